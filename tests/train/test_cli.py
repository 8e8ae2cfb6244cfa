"""``ffjobs train`` and ``ffjobs bench train`` end to end on CPU (2 gloo ranks, tiny model)."""

from __future__ import annotations

import json
import os

import pytest

from ffjobs.bench.train import run_compiler_cache
from ffjobs.cli import main

from .helpers import TINY_MODEL, tiny_identity_weights

CACHE_VARIABLES = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")
"""Where a benchmark's ranks put their compiler's local caches."""


def _tiny_args(tmp_path):
    args = []
    for override in [
        *TINY_MODEL,
        "train.batch_size=2",
        "train.steps=4",
        "train.log_every=2",
        "train.checkpoint_every=2",
        f"train.checkpoint_dir={tmp_path / 'ckpt'}",
        f"model.identity_weights={tiny_identity_weights()}",
        "tracking.enabled=false",
    ]:
        args += ["--set", override]
    return args


def test_train_two_ranks_json_then_resumes(tmp_path, capsys):
    data = tmp_path / "data"
    from ffjobs.data.synth import generate_dataset

    generate_dataset(data, identities=6, per_identity=4, size=64, seed=0)
    args = [
        "train",
        "--nproc",
        "2",
        "--json",
        "--set",
        f"data.source={data}",
        *_tiny_args(tmp_path),
    ]
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)  # exactly one JSON object on stdout
    assert report["status"] == "passed" and "on 2 ranks" in report["summary"]
    facts = report["facts"]
    assert facts["final_step"] == 4 and facts["start_step"] == 0
    assert facts["checkpoint"].endswith("step-00000004.pt")
    # the run's checkpoints live in a folder of its own, named by its run key
    assert facts["checkpoint_dir"] == str(tmp_path / "ckpt" / report["run_key"])
    record = json.loads((tmp_path / "runs" / report["run_key"] / "run.json").read_text())
    assert record["status"] == "passed" and record["stages"][0]["name"] == "train"

    # a second invocation is a new run: it starts from step 0 in its own folder
    assert main([*args, "--set", "train.steps=6"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["run_key"] != report["run_key"]
    assert again["facts"]["start_step"] == 0 and again["facts"]["final_step"] == 6


def test_train_missing_dataset_is_a_one_line_usage_error(tmp_path, capsys):
    code = main(["train", "--set", f"data.source={tmp_path / 'nope'}", *_tiny_args(tmp_path)])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "data.source" in err[0] and "Traceback" not in err[0]


@pytest.mark.parametrize("nproc", [2])
def test_bench_train_reports_throughput_mfu_and_exposed_comm(tmp_path, capsys, nproc):
    args = ["bench", "train", "--nproc", str(nproc), "--warmup", "1", "--steps", "2", "--json"]
    assert main([*args, *_tiny_args(tmp_path)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["world_size"] == nproc and report["backend"] == "gloo"
    assert report["images_per_s"] > 0
    assert report["images_per_s_per_gpu"] == pytest.approx(report["images_per_s"] / nproc)
    assert 0 < report["mfu_vs_measured_peak"] < 1
    assert report["measured_peak_flops"] > 1e8 and report["flops_per_image"] > 0
    assert 0 <= report["exposed_comm_fraction"] < 1 and report["exposed_comm_s"] > 0
    assert 0 <= report["exposed_comm_fraction_ab"] < 1
    parts = report["data_wait_s"] + report["compute_s"] + report["exposed_comm_s"]
    assert parts == pytest.approx(report["step_time_s"], rel=1e-6)
    # checkpoint cost: the async write is done by the writer process, beside counted steps
    assert report["checkpoint_async_write_s"] > 0 and report["steps_during_write"] >= 1
    assert len(report["checkpoint_async_rounds"]) == 3  # the share is their mean
    assert 0 < report["checkpoint_blocked_fraction"] < 1
    assert not (tmp_path / "ckpt").exists()  # a benchmark never writes checkpoints


def test_bench_train_leaves_the_checkpoints_of_the_run_it_is_pointed_at(tmp_path, capsys):
    # --checkpoint-dir names a run's folder (for its compile cache); the checkpoint cost is
    # measured beside it: no checkpoint a resume would pick up is added, none of the run's pruned
    from ffjobs.train.checkpoint import Checkpointer

    run = tmp_path / "run"
    Checkpointer(str(run)).save(1, {"weights": [1.0, 2.0]}, {"rng": 0})
    before = sorted(p.name for p in run.iterdir())
    cache_variables = {k: os.environ.get(k) for k in CACHE_VARIABLES}
    args = ["bench", "train", "--nproc", "1", "--warmup", "1", "--steps", "2", "--no-peak"]
    # the bench's saves are at later steps than the run's: kept by step, they would prune it
    assert main([*args, "--json", "--checkpoint-dir", str(run), *_tiny_args(tmp_path)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["checkpoint_bytes"] > 0 and len(report["checkpoint_async_rounds"]) == 3
    assert sorted(p.name for p in run.iterdir()) == before
    assert Checkpointer(str(run)).steps() == [1] and Checkpointer(str(run)).verify(1)[0]
    # its local compiler caches went with it, and its caller's environment is its own again:
    # a later compile in this process must not write into the removed folder (node memory)
    assert not run_compiler_cache(str(run)).exists()
    assert [k for k in CACHE_VARIABLES if os.environ.get(k) != cache_variables[k]] == []
