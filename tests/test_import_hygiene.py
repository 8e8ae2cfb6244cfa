"""ffjobs imports without Airflow, MLflow, boto3 or submitit: the GPU image has none of them,
and DAG parsing must stay fast. Those libraries are imported inside the functions that use them."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

BLOCKED = ("airflow", "mlflow", "boto3", "botocore", "submitit")

PROBE = textwrap.dedent(
    """
    import importlib, pkgutil, sys

    blocked = set(sys.argv[1].split(","))

    class Blocker:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in blocked:
                raise ImportError(f"{name} imported at module level")
            return None

    sys.meta_path.insert(0, Blocker())
    import ffjobs, ffjobs.cli

    failures = []
    for info in pkgutil.walk_packages(ffjobs.__path__, "ffjobs."):
        if info.name.startswith("ffjobs.airflow"):  # Airflow's own operator and trigger
            continue
        try:
            importlib.import_module(info.name)
        except ImportError as exc:
            failures.append(f"{info.name}: {exc}")
    ffjobs.cli.build_parser()
    print("\\n".join(failures))
    sys.exit(1 if failures else 0)
    """
)


def test_package_imports_without_orchestration_libraries():
    result = subprocess.run(
        [sys.executable, "-c", PROBE, ",".join(BLOCKED)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_config_and_cli_load_without_torch():
    """Loading a config or building the CLI (what a DAG file does) must not import torch."""
    probe = (
        "import sys, ffjobs.cli, ffjobs.config\n"
        "ffjobs.cli.build_parser(); ffjobs.config.load_config('local')\n"
        "heavy = sorted(m for m in ('torch', 'torchvision', 'numpy', 'PIL') if m in sys.modules)\n"
        "print(heavy); sys.exit(1 if heavy else 0)\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_process_that_starts_the_ranks_imports_no_torch(tmp_path):
    """``ffjobs run``, ``train`` and ``runs show`` start ranks and find a run's newest
    checkpoint without torch: the ranks import it once, in the process they are forked from,
    and the command's own import of it was a second and a half of CPU per command."""
    import hashlib
    import json

    folder = tmp_path / "checkpoints"
    folder.mkdir()
    data = b"a checkpoint's bytes"
    (folder / "step-00000004.pt").write_bytes(data)
    manifest = {"step": 4, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (folder / "step-00000004.json").write_text(json.dumps(manifest))
    probe = textwrap.dedent(
        f"""
        import sys
        import ffjobs.cli, ffjobs.commands_runs, ffjobs.models.prepare, ffjobs.pipeline
        import ffjobs.quality.encoder, ffjobs.train.launch, ffjobs.train.stage
        from ffjobs.config import load_config
        from ffjobs.train.checkpoint import open_checkpoints

        checkpoints = open_checkpoints(load_config("local"), {str(folder)!r})
        steps = (checkpoints.latest().step, checkpoints.latest_verified().step)
        assert steps == (4, 4), steps
        heavy = sorted(m for m in ("torch", "torchvision") if m in sys.modules)
        print(heavy); sys.exit(1 if heavy else 0)
        """
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_checkpoint_package_names_resolve_on_first_use():
    """Its public names are imported lazily (so that its light parts load without torch)."""
    import ffjobs.train.checkpoint as package

    for name in package.__all__:
        assert getattr(package, name).__name__ == name
    assert set(package.__all__) == set(package._HOMES)


def test_importing_ffjobs_makes_full_collections_rarer_and_keeps_a_higher_setting():
    probe = textwrap.dedent(
        """
        import gc, sys
        gc.set_threshold(700, 10, int(sys.argv[1]))
        import ffjobs
        print(*gc.get_threshold())
        """
    )
    found = [
        subprocess.run(
            [sys.executable, "-c", probe, full],
            capture_output=True,
            text=True,
            cwd=REPO,
            check=True,
        ).stdout.split()
        for full in ("10", "500")
    ]
    assert found == [["700", "10", "100"], ["700", "10", "500"]]
