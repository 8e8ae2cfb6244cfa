"""A synthetic face identity dataset on disk: ``<identity>/<nn>.<jpg|png>`` drawn by
:mod:`ffjobs.data.faces`, deterministically from the seed (the same arguments write
byte-identical files), optionally with every defect validation must find planted
(:mod:`ffjobs.data.synth_corrupt`).
"""

from __future__ import annotations

import io
import json
import os
from multiprocessing.connection import Connection
from pathlib import Path

import numpy as np

from ffjobs.data.faces import Identity, Variation, identity_name, render_face
from ffjobs.data.worker_process import WorkerProcess
from ffjobs.errors import UserError

PARALLEL_FROM = 512
"""Datasets of at least this many images are rendered by a process pool, one identity a task."""
COMPLETE_MARKER = ".complete.json"
"""Written last into a dataset :func:`ensure_dataset` made: its arguments and image count.
A folder without it is not a complete dataset, however many images it holds."""


def synthetic_person(seed: int, i: int) -> Identity:
    """Identity ``i`` of the set made with ``seed``: what all its images share."""
    return Identity.sample(np.random.default_rng([seed, i]))


def synthetic_image(
    person: Identity, seed: int, i: int, j: int, size: int, image_format: str
) -> bytes:
    """The file bytes of ``person`` drawn in the pose, lighting and background of image ``j``
    of identity ``i`` (for ``person`` = identity ``i``'s own: that very image of the set)."""
    image = render_face(person, Variation.sample(np.random.default_rng([seed, i, j])), size)
    encoded = io.BytesIO()
    if image_format == "jpg":
        image.save(encoded, "JPEG", quality=90)
    else:
        image.save(encoded, "PNG")
    return encoded.getvalue()


def _write_identity(
    root: Path, i: int, per_identity: int, size: int, seed: int, image_format: str
) -> None:
    person = synthetic_person(seed, i)
    folder = root / identity_name(i)
    folder.mkdir(exist_ok=True)
    for j in range(per_identity):
        image = synthetic_image(person, seed, i, j, size, image_format)
        (folder / f"{j:02d}.{image_format}").write_bytes(image)


def _write_share(connection: Connection, tasks: list[tuple]) -> None:
    """Worker process: write the identities of ``tasks``, then say so."""
    for task in tasks:
        _write_identity(*task)
    connection.send(len(tasks))


def _write_in_workers(tasks: list[tuple], processes: int) -> None:
    """Write every identity of ``tasks``, split over ``processes`` worker processes."""
    workers = [
        WorkerProcess(_write_share, (tasks[k::processes],), name=f"ffjobs-synth-{k}")
        for k in range(processes)
    ]
    try:
        for worker in workers:
            try:
                worker.connection.recv()
            except (EOFError, OSError):
                worker.join(timeout=5)
                raise RuntimeError(
                    f"synthetic-data worker {worker.pid} {worker.how_it_ended()}"
                ) from None
    except BaseException:
        for worker in workers:
            worker.terminate()  # the dataset is incomplete anyway once one has failed
        raise
    finally:
        for worker in workers:
            worker.join()
            worker.close()


def generate_dataset(
    out_dir: str | Path,
    identities: int = 24,
    per_identity: int = 8,
    size: int = 64,
    seed: int = 0,
    corrupt: bool = False,
    image_format: str = "jpg",
) -> Path:
    """Write ``out_dir/<identity>/<nn>.<jpg|png>`` deterministically; return ``out_dir``.

    ``corrupt`` also plants every defect validation must find (see
    :mod:`ffjobs.data.synth_corrupt`), a ``manifest.jsonl`` and a ``planted.json``.
    """
    if image_format not in ("jpg", "png"):
        raise ValueError(f"image_format: expected jpg or png, got {image_format!r}")
    root = Path(out_dir)
    root.mkdir(parents=True, exist_ok=True)
    tasks = [(root, i, per_identity, size, seed, image_format) for i in range(identities)]
    processes = min(os.cpu_count() or 1, identities)
    if identities * per_identity >= PARALLEL_FROM and processes > 1:
        _write_in_workers(tasks, processes)
    else:
        for task in tasks:
            _write_identity(*task)
    if corrupt:
        from ffjobs.data.synth_corrupt import plant_defects

        plant_defects(root, identities=identities, size=size, seed=seed)
    return root


def dataset_complete(root: str | Path) -> bool:
    """Whether ``root`` is a dataset whose generation finished (its marker is there)."""
    return (Path(root) / COMPLETE_MARKER).is_file()


def mark_complete(root: str | Path, arguments: dict) -> None:
    """Say that ``root``'s generation with ``arguments`` finished (the last thing written)."""
    from ffjobs.shared_inputs import temporary_sibling

    marker = Path(root) / COMPLETE_MARKER
    temporary = temporary_sibling(marker)
    temporary.write_text(json.dumps(arguments) + "\n")
    temporary.replace(marker)


def unmark_complete(root: str | Path) -> None:
    """Say that ``root`` is being written (before writing into an existing dataset)."""
    (Path(root) / COMPLETE_MARKER).unlink(missing_ok=True)


def ensure_dataset(
    out_dir: str | Path,
    identities: int = 24,
    per_identity: int = 8,
    size: int = 64,
    seed: int = 0,
) -> Path:
    """:func:`generate_dataset` at ``out_dir`` unless a complete one is there; return ``out_dir``.

    Made once however many processes ask at the same time: written aside, marked complete,
    then renamed into place (:func:`ffjobs.shared_inputs.make_once`). A folder there without
    the marker (an interrupted generation) is generated again.
    """
    from ffjobs.shared_inputs import make_once

    arguments = {"identities": identities, "per_identity": per_identity, "size": size, "seed": seed}

    def make(path: Path) -> None:
        generate_dataset(path, **arguments)
        mark_complete(path, {**arguments, "images": identities * per_identity})

    out = Path(out_dir)
    make_once(out, make, what="the synthetic dataset", complete=dataset_complete)
    try:
        made_with = json.loads((out / COMPLETE_MARKER).read_text())
    except (OSError, ValueError):
        made_with = {}
    if not isinstance(made_with, dict) or any(made_with.get(k) != v for k, v in arguments.items()):
        said = ", ".join(f"{k}={v}" for k, v in arguments.items())
        found = ", ".join(f"{k}={made_with.get(k)}" for k in arguments) if made_with else "?"
        raise UserError(
            f"data.synth: {out} holds synthetic faces generated with {found}, not with this "
            f"config's {said}; they are not reused. Remove {out} to generate the new set there, "
            "or give each set its own data.source folder (ffjobs data synth)"
        )
    return out
