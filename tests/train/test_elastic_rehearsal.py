"""A multi-node failure and recovery rehearsed on one host: two torchrun "nodes", one rank killed.

Each node is its own ``torchrun --nnodes=2 --nproc-per-node=1`` with a c10d rendezvous on
127.0.0.1, running ``ffjobs train`` (one rank per task, gloo on CPU). Rank 1 SIGKILLs itself at
``KILL_AT`` (the kill drill), after the checkpoint at ``KILL_AT - 1 - LOST``. Its peer fails in
the next all-reduce, both agents use their one restart (``--max-restarts=1``), the two nodes
rendezvous again and the whole group resumes from the newest verified checkpoint. The drill
left its marker next to the checkpoints, so the resumed run passes ``KILL_AT`` and finishes.

The result is bitwise equal to a straight two-rank run of the same config: the checkpoint holds
every rank's data position and RNG states, and a rank restores the state of the rank number it
got in the new rendezvous round, so it does not matter which node each rank lands on.

``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``: by default torchrun lends its rendezvous store to the
workers and it outlives a restart, so the restarted ranks read the dead attempt's peer addresses
and the group never re-forms (pytorch/pytorch#135712, reproduced with torch 2.14 and gloo).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

from ffjobs.local_ranks import free_loopback_port

from .helpers import TINY_MODEL, final_weights

REPO = Path(__file__).resolve().parents[2]
STEPS = 24
CHECKPOINT_EVERY = 5
KILL_AT = 13
"""Rank 1 dies as step 13 starts: steps 11 and 12 ran after the checkpoint at 10 and are lost."""

TRAIN_SETTINGS = [
    *TINY_MODEL,
    "model.identity_weights=null",  # no identity pre-training: the encoder stays random
    "train.batch_size=2",
    f"train.steps={STEPS}",
    f"train.checkpoint_every={CHECKPOINT_EVERY}",
    "train.keep_checkpoints=10",
    "train.log_every=1",  # one progress line per step: the first step after the restart shows
    "train.deterministic=true",
    "train.precision=fp32",
    "train.backend=gloo",
    "train.init_timeout_s=60",
    "train.collective_timeout_s=60",
    "tracking.enabled=false",
]


@dataclass
class Node:
    """One torchrun launch and its console lines, each with the time it was read."""

    proc: subprocess.Popen
    lines: list[tuple[float, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append((time.monotonic(), line.rstrip("\n")))


@dataclass
class Rehearsal:
    returncodes: list[int]
    wall_s: float
    lines: list[tuple[float, str]]
    """Both nodes' lines in time order."""

    def first(self, pattern: str, after: float = 0.0) -> tuple[float, re.Match[str]]:
        for stamp, line in self.lines:
            if stamp >= after and (match := re.search(pattern, line)):
                return stamp, match
        raise AssertionError(f"no line matches {pattern!r}:\n" + self.log())

    def count(self, pattern: str) -> int:
        return sum(1 for _, line in self.lines if re.search(pattern, line))

    def log(self) -> str:
        return "\n".join(line for _, line in self.lines[-80:])


def torchrun_command(port: int, run_id: str, overrides: list[str]) -> list[str]:
    """One node: torchrun with a loopback c10d rendezvous running one ``ffjobs train`` rank."""
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",  # torchrun
        "--nnodes=2",
        "--nproc-per-node=1",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{port}",
        f"--rdzv-id={run_id}",
        "--max-restarts=1",
        "-m",
        "ffjobs.cli",
        "train",
    ]
    for override in overrides:
        command += ["--set", override]
    return command


def rehearse(workdir: Path, data: Path, *extra: str) -> Rehearsal:
    """Start two nodes, wait for both; returns exit codes, wall time and the merged log."""
    workdir.mkdir(parents=True)
    overrides = [
        *TRAIN_SETTINGS,
        f"data.source={data}",
        f"train.checkpoint_dir={workdir / 'ckpt'}",
        *extra,
    ]
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLURM_", "SUBMITIT_", "TORCHELASTIC_"))
        and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    }
    env.update(
        TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1",
        OMP_NUM_THREADS="1",
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])),
        PYTHONUNBUFFERED="1",
    )
    command = torchrun_command(free_loopback_port(), workdir.name, overrides)
    started = time.monotonic()
    nodes = [
        Node(
            subprocess.Popen(
                command,
                cwd=workdir,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
        for _ in range(2)
    ]
    try:
        codes = [node.proc.wait(timeout=180) for node in nodes]
    finally:
        for node in nodes:
            if node.proc.poll() is None:
                node.proc.kill()
                node.proc.wait()
    wall = time.monotonic() - started
    for node in nodes:
        node.reader.join(timeout=10)
    lines = sorted(line for node in nodes for line in node.lines)
    return Rehearsal(codes, wall, lines)


@pytest.mark.slow
def test_killed_rank_recovers_through_an_elastic_restart_bit_for_bit(tmp_path):
    from ffjobs.data.synth import generate_dataset

    data = generate_dataset(tmp_path / "data", identities=6, per_identity=4, size=64, seed=0)

    straight = rehearse(tmp_path / "straight", data)
    assert straight.returncodes == [0, 0], straight.log()

    drill = rehearse(
        tmp_path / "drill",
        data,
        "train.faults.kill_rank=1",
        f"train.faults.kill_at_step={KILL_AT}",
    )
    assert drill.returncodes == [0, 0], drill.log()

    # the drill fired once; the restarted run passed the same step without firing again
    killed_at, _ = drill.first(rf"\[fault\] rank 1: SIGKILL at step {KILL_AT}\b")
    assert drill.count(r"SIGKILL at step") == 1
    assert drill.count(r"kill drill already fired in this job; skipped") == 1

    # the whole group restarted and resumed from the newest verified checkpoint before KILL_AT
    resumed_at, match = drill.first(r"resumed from \S+ at step (\d+)", after=killed_at)
    start_step = int(match.group(1))
    assert start_step == (KILL_AT - 1) // CHECKPOINT_EVERY * CHECKPOINT_EVERY < KILL_AT
    # rank 0 holds the run and reports the stage of the restarted group
    assert drill.count(rf"\[ passed\] train .* steps {start_step} -> {STEPS} on 2 ranks") == 1

    # exact resume: the same final weights as the straight run, bit for bit
    # under torchrun the run key is the rendezvous id, so each rehearsal has its own folder
    reference = final_weights(tmp_path / "straight" / "ckpt" / "straight")
    resumed = final_weights(tmp_path / "drill" / "ckpt" / "drill")
    assert reference["step"] == resumed["step"] == STEPS
    for net in ("generator", "discriminator", "ema"):
        for key, value in reference[net].items():
            assert torch.equal(value, resumed[net][key]), f"{net}.{key}"

    # recovery figures (docs/benchmarks.md quotes them; ``pytest -s`` shows them)
    first_step_at, _ = drill.first(rf"^step {start_step + 1}/{STEPS} ", after=resumed_at)
    recovery_s = first_step_at - killed_at
    steps_lost = KILL_AT - 1 - start_step
    print(
        f"\nelastic rehearsal: kill -> checkpoint loaded {resumed_at - killed_at:.1f} s, "
        f"-> first step after restart {recovery_s:.1f} s; "
        f"steps lost {steps_lost}; wall {drill.wall_s:.1f} s vs straight {straight.wall_s:.1f} s "
        f"(x{drill.wall_s / straight.wall_s:.2f})"
    )
    assert 0 < recovery_s < 120
