"""``ffjobs bench recovery``: how fast training on SLURM notices a fault and trains again.

For each drill (a rank SIGKILLed, a rank hung inside a collective, the link of the node of rank
1 cut) and each path (a new job per failure; the in-allocation fast path), one short
``ffjobs train --submit --wait`` on the cluster profile, with the fault at a known step, and
three figures from what the run leaves behind:

* fault -> detection: from the drill firing (its marker's time, or the cut) to the supervisor
  seeing the failed job end (slow path; the fast path restarts inside the job, unseen outside);
* fault -> training again: to the first training step after the resume (rank 0 prints its
  time);
* steps lost: steps trained past the newest verified checkpoint and trained again (counted
  from rank 0's progress lines: one per step, two for a redone one).

Meant for the local mini-cluster (``infra/local/up.sh``), where the link drill uses
``infra/local/link.sh``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ffjobs.cli import add_json_argument, print_json
from ffjobs.slurm.drills import cut_link, job_nodes, wait_for_step
from ffjobs.slurm.progress import Start, read_starts

DRILLS = {
    "kill": ["train.faults.kill_rank=1", "train.faults.kill_at_step=20"],
    "hang": ["train.faults.hang_rank=1", "train.faults.hang_at_step=20"],
    "link": [],
}
TRAIN = [
    "model.width=8", "model.max_width=16", "model.residual_blocks=1",
    "model.discriminator_width=8", "model.discriminator_layers=2", "model.identity_width=0.25",
    "model.identity_input_size=32", "model.identity_dim=32", "model.identity_weights=null",
    "train.batch_size=2", "train.steps=60", "train.checkpoint_every=10", "train.log_every=1",
    "train.precision=fp32", "train.init_timeout_s=60", "tracking.enabled=false",
    "slurm.retry_backoff_s=1", "slurm.time_min=5",
]  # fmt: skip


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "recovery",
        help="time fault detection and resume on SLURM (kill, hang, cut link; fast path on/off)",
    )
    parser.add_argument("--config", "-c", default="minicluster", metavar="PRESET|PATH")
    parser.add_argument("--drills", default="kill,hang,link", help="subset of kill,hang,link")
    parser.add_argument("--collective-timeout", type=float, default=10.0, metavar="S")
    add_json_argument(parser)
    parser.set_defaults(handler=_bench_recovery)


def _bench_recovery(args: argparse.Namespace) -> int:
    rows = []
    for drill in [d.strip() for d in args.drills.split(",") if d.strip()]:
        for fast in (False, True):
            rows.append(run_drill(args.config, drill, fast, args.collective_timeout))
            if not args.json:
                print(_line(rows[-1]), flush=True)
    report = {"config": args.config, "collective_timeout_s": args.collective_timeout, "rows": rows}
    if args.json:
        print_json(report)
    return 0


def run_drill(config: str, drill: str, fast: bool, collective_timeout: float) -> dict[str, Any]:
    """One drill on one path; the figures of the module docstring."""
    Path("runs").mkdir(exist_ok=True)  # on the shared filesystem the nodes see, like runs
    with tempfile.TemporaryDirectory(prefix="bench-recovery-", dir="runs") as tmp:
        work = Path(tmp).resolve()
        sets = [*TRAIN, *DRILLS[drill], f"runs_dir={work / 'runs'}",
                f"train.checkpoint_dir={work / 'ckpt'}", f"slurm.folder={work / 'jobs'}",
                f"train.collective_timeout_s={collective_timeout}",
                f"slurm.restarts_in_allocation={1 if fast else 0}"]  # fmt: skip
        command = [sys.executable, "-m", "ffjobs.cli", "train", "-c", config, "--submit",
                   "--wait", "--data", "memory", "--json"]  # fmt: skip
        for item in sets:
            command += ["--set", item]
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        if drill == "link":
            victim = job_nodes(wait_for_step(work, 20))[1]
            with cut_link(victim):
                fault_at = time.time()
                out, _ = proc.communicate(timeout=900)
        else:
            out, _ = proc.communicate(timeout=900)
            marker = next(work.glob(f"ckpt/*/drill-fired-{drill}.json"))
            fault_at = json.loads(marker.read_text())["time"]
        outcome = json.loads(out)
        attempts = [
            json.loads(x) for x in Path(outcome["facts"]["attempt_log"]).read_text().splitlines()
        ]
        starts = [
            s for f in sorted(work.glob("jobs/*/*/*/*_progress.jsonl")) for s in read_starts(f)
        ]
        resumed = [s.first_step_at for s in starts if s.start_step > 0]
        first_failed = next((a for a in attempts if a["kind"]), None)
        return {
            "drill": drill,
            "path": "fast" if fast else "new job",
            "passed": proc.returncode == 0,
            "attempts": len(attempts),
            "kind": first_failed["kind"] if first_failed else None,
            "detect_s": round(first_failed["ended_at"] - fault_at, 1) if first_failed else None,
            "resume_s": round(min(resumed) - fault_at, 1) if resumed else None,
            "steps_lost": _steps_redone(starts),
        }


def _steps_redone(starts: list[Start]) -> int | None:
    """Steps trained twice: each start reports the steps it reached (every step, under the
    drills' ``train.log_every=1``), the redone ones twice."""
    reached = [step for start in starts for step in start.steps]
    return len(reached) - len(set(reached)) if reached else None


def _line(row: dict[str, Any]) -> str:
    def show(value: Any, unit: str = " s") -> str:
        return "-" if value is None else f"{value}{unit}"

    return (
        f"{row['drill']:<5} {row['path']:<8} {'ok' if row['passed'] else 'FAILED':<6} "
        f"attempts {row['attempts']}  {row['kind'] or '-':<13} detect {show(row['detect_s'])}  "
        f"training again {show(row['resume_s'])}  steps lost {show(row['steps_lost'], '')}"
    )
