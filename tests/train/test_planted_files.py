"""Nothing ffjobs reads from a run's checkpoint folder runs code: a pickle planted there as each
file it reads is refused by name, and training goes on from what it can trust.

Every plant here would create a marker file if it were unpickled
(:func:`test_a_planted_pickle_runs_code_when_unpickled` shows it does), so a marker that never
appears means nothing in the file ran.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import shutil
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import pytest
import torch

from ffjobs.train.checkpoint import (
    Checkpointer,
    CheckpointWarning,
    data_name,
    manifest_name,
)
from ffjobs.train.checkpoint.storage import LocalStore
from ffjobs.train.compile import cache as compile_cache
from ffjobs.train.compile.signing import (
    MAGIC,
    SignatureError,
    load_or_create_key,
    sign,
    verified_payload,
)
from ffjobs.train.job import TrainJob
from ffjobs.train.worker import run_rank

from .compiled_runs import PlantedPayload, planted_pickle
from .helpers import tiny_config

KEY = bytes(range(32))
OTHER_KEY = bytes(range(1, 33))


def planted_torch_file(marker: Path) -> bytes:
    """A zip checkpoint as ``torch.save`` writes it, holding the payload among real tensors."""
    buffer = io.BytesIO()
    torch.save({"step": 4, "weights": torch.ones(3), "generator": PlantedPayload(marker)}, buffer)
    return buffer.getvalue()


def plant_checkpoint(store: LocalStore, step: int, data: bytes) -> None:
    """``data`` as checkpoint ``step``, its manifest rewritten to match (size and sha256 pass)."""
    store.write(data_name(step), data)
    manifest = {
        "step": step,
        "file": data_name(step),
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "world_size": 1,
    }
    store.write(manifest_name(step), json.dumps(manifest).encode())


def one_line_naming(messages: list[str], name: str) -> str:
    """The one message naming ``name`` (each load that passed it says so once), checked to be
    one line that never suggests loading unsafely."""
    (message,) = {m for m in messages if name in m}
    assert "\n" not in message
    assert "weights_only" not in message and "Traceback" not in message
    return message


def test_a_planted_pickle_runs_code_when_unpickled(tmp_path):
    marker = tmp_path / "ran"
    pickle.loads(planted_pickle(marker))
    assert marker.exists()  # so a marker that stays absent below means nothing ran


# ----------------------------------------------------------------------------- checkpoints


# two short trainings and the tiny identity encoder's pre-training: 8 minutes on two busy cores
@pytest.mark.timeout(1800)
def test_a_planted_newest_checkpoint_is_refused_and_training_resumes_from_the_previous(
    tmp_path,
):
    from ffjobs.train.swap import face_swap_from_checkpoint

    first = run_rank(TrainJob.of(tiny_config(tmp_path, "train.deterministic=false"), data="memory"))
    assert first["final_step"] == 4
    store, marker = LocalStore(tmp_path / "ckpt"), tmp_path / "ran"
    plant_checkpoint(store, 4, planted_torch_file(marker))
    assert Checkpointer(str(tmp_path / "ckpt")).latest_verified().step == 4  # sha256 matches

    longer = tiny_config(tmp_path, "train.deterministic=false", "train.steps=6")
    with pytest.warns(CheckpointWarning) as caught:
        # evaluate and swap build their model through this: the previous checkpoint's weights
        _, evaluated_step = face_swap_from_checkpoint(longer, str(tmp_path / "ckpt"))
        second = run_rank(TrainJob.of(longer, data="memory"))
    assert evaluated_step == 2
    assert second["start_step"] == 2 and second["final_step"] == 6
    assert not marker.exists()
    message = one_line_naming([str(w.message) for w in caught], data_name(4))
    assert "refused" in message and "objects other than tensors" in message


@pytest.mark.parametrize("planted", [planted_pickle, planted_torch_file])
def test_a_planted_only_checkpoint_leaves_nothing_to_load(tmp_path, planted):
    store, marker = LocalStore(tmp_path / "ckpt"), tmp_path / "ran"
    plant_checkpoint(store, 2, planted(marker))
    with pytest.warns(CheckpointWarning) as caught:
        assert Checkpointer(store.location).load_latest() is None
    assert not marker.exists()
    one_line_naming([str(w.message) for w in caught], data_name(2))


def test_a_planted_manifest_is_refused_and_the_previous_checkpoint_is_used(tmp_path):
    checkpointer = Checkpointer(str(tmp_path / "ckpt"))
    for step in (2, 4):
        checkpointer.save(step, {"weights": torch.full((2,), float(step))}, {"rank": 0})
    marker = tmp_path / "ran"
    checkpointer.store.write(manifest_name(4), planted_pickle(marker))  # JSON expected
    with pytest.warns(CheckpointWarning) as caught:
        ref, state = checkpointer.load_latest()
    assert ref.step == 2 and state["weights"].tolist() == [2.0, 2.0]
    assert not marker.exists()
    assert "manifest unreadable" in one_line_naming([str(w.message) for w in caught], "step-")


def test_evaluate_on_a_run_whose_checkpoint_fails_the_safe_load_says_so_in_one_line(tmp_path):
    from ffjobs.runs.run import create_run, finish_run

    config = tiny_config(tmp_path, f"runs_dir={tmp_path / 'runs'}")
    run = create_run(config, key="planted", echo=lambda line: None)
    finish_run(run, "FINISHED")
    marker = tmp_path / "ran"
    plant_checkpoint(LocalStore(run.checkpoint_dir), 4, planted_torch_file(marker))
    done = subprocess.run(
        [sys.executable, "-m", "ffjobs.cli", "evaluate", "--run-key", "planted"]
        + ["--set", f"runs_dir={tmp_path / 'runs'}"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 2, output[-3000:]
    assert "Traceback" not in output and "weights_only" not in output
    assert not marker.exists()
    (error,) = [line for line in output.splitlines() if line.startswith("ffjobs: error:")]
    assert "no verified checkpoint that loads safely" in error
    refused = [line for line in output.splitlines() if "refused" in line]
    assert len(refused) == 1 and data_name(4) in refused[0]


# ----------------------------------------------------------------------------- compile cache


def test_pickles_planted_as_the_compile_cache_are_refused_by_name_and_never_loaded(tmp_path):
    store, marker = LocalStore(tmp_path / "ckpt"), tmp_path / "ran"
    captures = compile_cache.regions_file("cpu")
    store.write(compile_cache.BLOB, planted_pickle(marker))
    store.write(captures, planted_pickle(marker))
    report = compile_cache.CacheReport()
    with pytest.warns(UserWarning) as caught:
        compile_cache.load(store, report, fingerprint="code-a", device="cpu", key=KEY)
    assert not marker.exists()
    assert report.loaded_entries == 0 and report.regions == {}
    messages = [str(w.message) for w in caught]
    for name in (compile_cache.BLOB, captures):
        assert "refused" in one_line_naming(messages, name + " ")


def test_compile_cache_files_signed_under_another_key_or_name_are_refused(tmp_path):
    store, marker = LocalStore(tmp_path / "ckpt"), tmp_path / "ran"
    # another run's key over a planted blob; a cuda0 capture file passed off as the CPU's
    store.write(compile_cache.BLOB, sign(OTHER_KEY, compile_cache.BLOB, planted_pickle(marker)))
    compile_cache.save_regions(
        store, compile_cache.CacheReport(), {"generator": b"x"}, "code-a", "cuda0", key=KEY
    )
    store.write(compile_cache.regions_file("cpu"), store.read(compile_cache.regions_file("cuda0")))
    report = compile_cache.CacheReport()
    with pytest.warns(UserWarning, match="does not match this run's key") as caught:
        compile_cache.load(store, report, fingerprint="code-a", device="cpu", key=KEY)
    assert len([w for w in caught if "refused" in str(w.message)]) == 2
    assert report.loaded_entries == 0 and report.regions == {} and not marker.exists()


def test_a_signed_file_is_its_payload_and_any_change_is_refused():
    signed = sign(KEY, "compile-cache.bin", b"payload")
    assert signed.startswith(MAGIC)
    assert verified_payload(KEY, "compile-cache.bin", signed) == b"payload"
    for key, name, data in (
        (OTHER_KEY, "compile-cache.bin", signed),
        (KEY, "compile-cache.regions.cpu.bin", signed),
        (KEY, "compile-cache.bin", signed[:-1] + b"P"),
        (KEY, "compile-cache.bin", b"payload"),
        (KEY, "compile-cache.bin", MAGIC),
    ):
        with pytest.raises(SignatureError):
            verified_payload(key, name, data)


def test_the_signing_key_is_private_and_one_per_run_however_many_ranks_make_it(tmp_path):
    path = tmp_path / "run" / "signing.key"
    keys: list[bytes] = []
    makers = [
        threading.Thread(target=lambda: keys.append(load_or_create_key(path))) for _ in range(8)
    ]
    for maker in makers:
        maker.start()
    for maker in makers:
        maker.join(timeout=60)
    assert len(keys) == 8 and len(set(keys)) == 1 and len(keys[0]) == 32
    assert path.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in path.parent.iterdir()) == ["signing.key"]  # no leftovers


def test_the_training_stage_hands_the_ranks_the_key_file_not_the_key(tmp_path, monkeypatch):
    from dataclasses import asdict

    from ffjobs.runs.run import create_run, finish_run
    from ffjobs.train import stage

    config = tiny_config(tmp_path, f"runs_dir={tmp_path / 'runs'}")
    run = create_run(config, key="keyed", echo=lambda line: None)
    jobs: list[TrainJob] = []

    def launched(job: TrainJob, nproc: int, **options) -> dict:
        jobs.append(job)
        return {"start_step": 0, "final_step": 0}

    monkeypatch.setattr("ffjobs.train.launch.launch_job", launched)
    stage.train_stage(config, run, data="memory")
    finish_run(run, "FINISHED")
    (job,) = jobs
    key_file = Path(job.signing_key_file)
    assert key_file == (run.dir / "signing.key").resolve()
    assert key_file.stat().st_mode & 0o777 == 0o600
    key = load_or_create_key(key_file)
    spec = json.dumps(asdict(job))
    assert key.hex() not in spec and key_file.read_text().strip() not in spec


@pytest.mark.slow  # the shared cold CPU compile (compiled_runs.py): minutes on two busy cores
@pytest.mark.timeout(1800)
def test_a_compiled_job_refuses_a_planted_cache_compiles_cold_and_signs_what_it_writes(
    cold_compile, tmp_path
):
    store, key_file = cold_compile.store, cold_compile.key_file
    assert cold_compile.run.final_step == 2
    assert not cold_compile.marker.exists()
    stderr = cold_compile.run.stderr.splitlines()
    for name in (compile_cache.BLOB, compile_cache.regions_file("cpu")):
        assert any(name in line and "refused" in line for line in stderr)
        # written anew after the first step, under the run's key
        verified_payload(load_or_create_key(key_file), name, store.read(name))
    key = load_or_create_key(key_file)
    for name in store.list():  # the key never reaches the checkpoint store
        data = store.read(name)
        assert key not in data and key.hex().encode() not in data
    warm = compile_cache.CacheReport()
    copy = LocalStore(shutil.copytree(store.directory, tmp_path / "ckpt"))  # load writes to it
    with warnings.catch_warnings(record=True) as caught:  # a warm load of its own files
        warnings.simplefilter("always")
        compile_cache.load(copy, warm, rank=1, key=key)
    assert warm.loaded_entries > 0
    assert not [w for w in caught if "refused" in str(w.message)]


def test_a_pickle_planted_as_the_attempt_log_is_refused_by_name(tmp_path):
    """The run's attempt records are JSON lines: a pickle in their place is named, never run."""
    from ffjobs.config import load_config
    from ffjobs.errors import UserError
    from ffjobs.runs.run import create_run
    from ffjobs.train.attempts import attempts_file, read_attempts

    config = load_config("local", [f"runs_dir={tmp_path / 'runs'}", "tracking.enabled=false"])
    run = create_run(config, echo=lambda line: None)
    marker = tmp_path / "marker"
    attempts_file(run).write_bytes(planted_pickle(marker))
    with pytest.raises(UserError, match=r"attempts\.jsonl:1: not an attempt record") as refused:
        read_attempts(run)
    assert "\n" not in str(refused.value)
    assert not marker.exists()
