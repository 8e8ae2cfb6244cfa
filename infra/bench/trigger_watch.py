"""How the deferred training task's trigger watches SLURM jobs: end -> event, commands, loop.

Submits ``--jobs`` short jobs (``sbatch --wrap 'sleep N; date ...'``, one CPU each, N spread
over ``--sleep LO:HI``; they queue when the cluster is full) and watches each with
:class:`ffjobs.airflow.triggers.SlurmJobTrigger` -- its ``run()`` coroutine, all of them in one
asyncio event loop, as one triggerer runs its triggers, but without the triggerer process and
its database. Each trigger starts right after its job's ``sbatch`` with an owner file that names
its job (the operator writes it before deferring). Measured:

* **end -> event**: the trigger's event time minus SLURM's ``End`` (``sacct``, whole seconds,
  read after the watch) and minus the moment the job's own command finished (the batch script's
  last command writes ``date +%s.%N`` to a file);
* **commands**: every call through the hook's ``run_command_async`` (argv, start, end, what
  ``sacct`` said) and, as a cross-check, every process the watch spawned (``subprocess.Popen``,
  which asyncio uses), per watched job per minute of its watch;
* **event-loop block**: a monitor coroutine sleeps ``--tick`` (1 ms) in a loop and records how
  late it wakes (*late*) and how much CPU the loop's thread spent meanwhile (*busy*: the part
  of the lateness the loop spent running something; the rest the thread was off the core,
  waiting for the GIL or waiting in a system call, e.g. for a spawned child to ``exec``). Per
  poll: the worst sample that overlaps the poll (its ``sacct`` from spawn to answer, plus 5 ms
  for the trigger to read it). Also how long each ``Popen`` of a trigger's command held the
  loop's thread (asyncio spawns in the loop's thread). Given for the whole run and for the time
  after the last ``sbatch`` (the submissions are the bench's, not the triggerer's).
  ``--asyncio-debug`` also turns on asyncio's debug mode and counts its slow-callback warnings
  (``slow_callback_duration`` 10 ms). The monitor itself costs most of the process's CPU.

Every job it submitted is cancelled at the end (``scancel``; the ended ones are unaffected).
Against the local mini-cluster (one job CPU each: 6 run at a time there, the rest queue):

    source .state/local-stack/env.sh
    PYTHONPATH=. .venv/bin/python infra/bench/trigger_watch.py --jobs 5 --sleep 20:50 \
        --poll-s 10 --out five.json
    PYTHONPATH=. .venv/bin/python infra/bench/trigger_watch.py --jobs 50 --sleep 5:25 \
        --poll-s 10 --out fifty.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import math
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BLOCK_GOAL_S = 0.010
READ_SLACK_S = 0.005
"""After a poll's command answers, the trigger parses the answer in the same loop step."""


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100) of ``values``; NaN when there are none."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def summary(values: list[float]) -> dict[str, float | int]:
    """n, min, median, p99, max and mean of ``values`` (NaN for an empty list)."""
    if not values:
        return {
            "n": 0,
            "min": math.nan,
            "median": math.nan,
            "p99": math.nan,
            "max": math.nan,
            "mean": math.nan,
        }
    return {
        "n": len(values),
        "min": min(values),
        "median": percentile(values, 50),
        "p99": percentile(values, 99),
        "max": max(values),
        "mean": sum(values) / len(values),
    }


def busy(sample: tuple[float, float, float]) -> float:
    """The part of a monitor sample's lateness that the loop's thread spent on the CPU: work
    the loop ran instead of waking the monitor (the rest: the thread was off the core)."""
    _woke, late, cpu = sample
    return max(0.0, min(late, cpu))


def window_blocks(
    samples: list[tuple[float, float, float]], windows: list[tuple[float, float]], tick: float
) -> list[tuple[float, float]]:
    """For each window ``(start, end)`` (monotonic seconds), the worst lateness and the worst
    :func:`busy` time among the monitor samples ``(woke, late, cpu)`` whose sleep overlapped
    it (0 when none did)."""
    woke = [s[0] for s in samples]
    out = []
    for start, end in windows:
        late = cpu = 0.0
        index = _first_at_or_after(woke, start)
        while index < len(samples) and samples[index][0] - samples[index][1] - tick <= end:
            late, cpu = max(late, samples[index][1]), max(cpu, busy(samples[index]))
            index += 1
        out.append((late, cpu))
    return out


def _first_at_or_after(values: list[float], x: float) -> int:
    lo, hi = 0, len(values)
    while lo < hi:
        mid = (lo + hi) // 2
        if values[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


@dataclass
class Command:
    argv: list[str]
    start: float
    """Monotonic seconds; ``wall`` is the same moment as ``time.time()``."""
    end: float = math.nan
    wall: float = math.nan
    error: str | None = None
    state: str | None = None
    """For a ``sacct`` poll: the job's state in its answer (None: accounting did not know it)."""


@dataclass
class Watched:
    job_id: str
    sleep_s: int
    submitted: float
    watch_started: float = math.nan
    event_at: float = math.nan
    event_state: str | None = None
    process_end: float = math.nan
    sacct_start: float = math.nan
    sacct_end: float = math.nan
    commands: list[Command] = field(default_factory=list)


class Recorder:
    """Counts what goes through the hook's command runner and every process spawned."""

    def __init__(self) -> None:
        self.commands: list[Command] = []
        self.spawned: list[tuple[str, float, float]] = []
        """(program, seconds ``Popen`` took, when it began) per process spawned."""
        self.on = False

    def install(self) -> None:
        import ffjobs.airflow.hooks as hooks
        from ffjobs.slurm.jobstate import sacct_status

        real = hooks.run_command_async

        async def counted(argv, timeout: float = 60.0) -> str:
            command = Command(list(argv), time.monotonic(), wall=time.time())
            if self.on:
                self.commands.append(command)
            try:
                out = await real(argv, timeout)
            except Exception as exc:
                command.error = str(exc)
                raise
            finally:
                command.end = time.monotonic()
            if argv[0] == "sacct":
                job_id = argv[argv.index("-j") + 1]
                status = sacct_status(out, job_id)
                command.state = status.slurm_state if status else None
            return out

        hooks.run_command_async = counted
        recorder, popen = self, subprocess.Popen

        class CountingPopen(popen):
            def __init__(self, args, *rest, **kwargs):
                began = time.monotonic()
                super().__init__(args, *rest, **kwargs)
                if recorder.on:  # the spawn blocks the loop's thread until the child has exec'd
                    name = os.path.basename(str(list(args)[0]))
                    recorder.spawned.append((name, time.monotonic() - began, began))

        subprocess.Popen = CountingPopen


async def monitor(samples: list, stop: asyncio.Event, tick: float) -> None:
    """Sleep ``tick`` in a loop; record (woke, lateness, loop thread CPU meanwhile)."""
    while not stop.is_set():
        before, cpu = time.monotonic(), time.thread_time()
        await asyncio.sleep(tick)
        after = time.monotonic()
        samples.append((after, after - before - tick, time.thread_time() - cpu))


async def sbatch(workdir: Path, sleep_s: int) -> str:
    script = f"sleep {sleep_s}; date +%s.%N > $SLURM_JOB_ID.end"
    argv = [
        "sbatch",
        "--parsable",
        "-J",
        "trigger-watch",
        "-n1",
        "-c1",
        "--chdir",
        str(workdir),
        "-o",
        str(workdir / "%j.out"),
        "--wrap",
        script,
    ]
    process = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"sbatch failed: {err.decode(errors='replace').strip()}")
    return out.decode().strip().split(";")[0]


async def watch(job: Watched, workdir: Path, poll_s: float) -> None:
    from ffjobs.airflow.hooks import write_owner  # imported before the loop started (main)
    from ffjobs.airflow.triggers import SlurmJobTrigger

    folder = workdir / job.job_id
    owner = folder / "train" / "slurm-owner.json"
    token = f"1:{uuid.uuid4().hex[:16]}"
    write_owner(owner, {"job_id": job.job_id, "token": token})
    trigger = SlurmJobTrigger(
        job_id=job.job_id,
        attempt=1,
        submitted_at=job.submitted,
        folder=str(folder),
        owner_file=str(owner),
        token=token,
        poll_s=poll_s,
    )
    job.watch_started = time.time()
    async for event in trigger.run():
        job.event_at = time.time()
        status = event.payload["status"]
        job.event_state = status["slurm_state"] if status else None


async def run(args: argparse.Namespace, workdir: Path, recorder: Recorder):
    loop = asyncio.get_running_loop()
    slow: list[float] = []
    if args.asyncio_debug:
        loop.set_debug(True)
        loop.slow_callback_duration = BLOCK_GOAL_S

        class Slow(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                if record.msg.startswith("Executing") and len(record.args or ()) >= 2:
                    slow.append(float(record.args[-1]))

        logging.getLogger("asyncio").addHandler(Slow())
    lo, hi = args.sleep
    sleeps = [round(lo + (hi - lo) * i / max(1, args.jobs - 1)) for i in range(args.jobs)]
    random.Random(args.seed).shuffle(sleeps)

    samples: list[tuple[float, float, float]] = []
    stop = asyncio.Event()
    probe = asyncio.create_task(monitor(samples, stop, args.tick))
    usage0, children0 = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    began, began_mono = time.time(), time.monotonic()
    submitted = math.inf
    jobs: list[Watched] = []
    tasks = []
    try:
        recorder.on = True
        for sleep_s in sleeps:
            job_id = await sbatch(workdir, sleep_s)
            job = Watched(job_id, sleep_s, time.time())
            jobs.append(job)
            tasks.append(asyncio.create_task(watch(job, workdir, args.poll_s)))
        submitted = time.monotonic()
        done, pending = await asyncio.wait(tasks, timeout=args.timeout)
        for task in pending:
            task.cancel()
        for task in done:
            if task.exception() is not None:
                raise task.exception()
    finally:
        recorder.on = False
        loop.set_debug(False)
        stop.set()
        await probe
        wall = time.monotonic() - began_mono
        usage, children = (
            resource.getrusage(resource.RUSAGE_SELF),
            resource.getrusage(resource.RUSAGE_CHILDREN),
        )
        if jobs:
            await cancel([j.job_id for j in jobs])
    await asyncio.to_thread(read_ends, jobs, workdir)
    # the figures are made after the loop has ended: a slow step of theirs is not the loop's
    return lambda: report(
        args,
        jobs,
        recorder,
        samples,
        slow,
        began,
        wall,
        submitted - began_mono,
        cpu={
            "self_s": usage.ru_utime + usage.ru_stime - usage0.ru_utime - usage0.ru_stime,
            "children_s": children.ru_utime
            + children.ru_stime
            - children0.ru_utime
            - children0.ru_stime,
        },
    )


async def cancel(job_ids: list[str]) -> None:
    process = await asyncio.create_subprocess_exec(
        "scancel", *job_ids, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
    )
    await process.wait()


def read_ends(jobs: list[Watched], workdir: Path) -> None:
    """SLURM's Start and End (epoch seconds) and the job command's own end, per job."""
    out = subprocess.run(
        [
            "sacct",
            "-X",
            "-n",
            "-P",
            "-j",
            ",".join(j.job_id for j in jobs),
            "-o",
            "JobID,Start,End",
        ],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "SLURM_TIME_FORMAT": "%s"},
    ).stdout
    times = {}
    for line in out.splitlines():
        job_id, start, end = line.split("|")
        times[job_id] = (_epoch(start), _epoch(end))
    for job in jobs:
        job.sacct_start, job.sacct_end = times.get(job.job_id, (math.nan, math.nan))
        with contextlib.suppress(OSError, ValueError):  # no file: the command never ended
            job.process_end = float((workdir / f"{job.job_id}.end").read_text())


def _epoch(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan  # Unknown / None: never started or not ended


def report(args, jobs, recorder, samples, slow, began, wall, submitting, cpu) -> dict[str, Any]:
    from ffjobs.slurm.accounting import TERMINAL_STATES

    by_job = {j.job_id: j for j in jobs}
    for command in recorder.commands:
        for job_id in by_job.keys() & set(command.argv):
            by_job[job_id].commands.append(command)

    seen = [j for j in jobs if not math.isnan(j.event_at)]
    end_to_event = [j.event_at - j.sacct_end for j in seen if not math.isnan(j.sacct_end)]
    process_to_event = [j.event_at - j.process_end for j in seen if not math.isnan(j.process_end)]
    process_to_sacct = [
        j.sacct_end - j.process_end
        for j in jobs
        if not (math.isnan(j.sacct_end) or math.isnan(j.process_end))
    ]
    deadline = args.poll_s + 5.0
    late = [j.job_id for j in jobs if not (j.event_at - j.sacct_end <= deadline)]

    # sacct polls that began after the job's command had ended but still saw it not ended
    stale = []
    for job in jobs:
        for command in job.commands:
            if command.argv[0] != "sacct" or math.isnan(job.process_end):
                continue
            after = command.wall - job.process_end
            if after > 0 and command.state is not None and command.state not in TERMINAL_STATES:
                stale.append(after)

    per_minute = []
    for job in seen:
        minutes = (job.event_at - job.watch_started) / 60
        per_minute.append(len(job.commands) / minutes)
    watched_minutes = sum((j.event_at - j.watch_started) / 60 for j in seen)
    programs: dict[str, int] = {}
    for command in recorder.commands:
        programs[command.argv[0]] = programs.get(command.argv[0], 0) + 1
    spawned: dict[str, int] = {}
    for name, _, _ in recorder.spawned:
        spawned[name] = spawned.get(name, 0) + 1

    polls = [c for c in recorder.commands if c.argv[0] == "sacct"]
    origin = samples[0][0] - samples[0][1] - args.tick if samples else 0.0
    steady_from = origin + submitting
    return {
        "config": {
            "jobs": args.jobs,
            "sleep_s": list(args.sleep),
            "poll_s": args.poll_s,
            "tick_s": args.tick,
            "asyncio_debug": args.asyncio_debug,
            "seed": args.seed,
            "python": sys.version.split()[0],
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(began)),
        },
        "wall_s": wall,
        "cpu": {**cpu, "self_fraction_of_one_core": cpu["self_s"] / wall},
        "events": {
            "jobs": len(jobs),
            "seen": len(seen),
            "states": sorted({str(j.event_state) for j in seen}),
        },
        "end_to_event_s": {
            "from_sacct_end": summary(end_to_event),
            "from_process_end": summary(process_to_event),
            "sacct_end_minus_process_end": summary(process_to_sacct),
            "goal_s": deadline,
            "late_jobs": late,
        },
        "stale_polls_after_process_end_s": summary(stale),
        "commands": {
            "through_run_command_async": programs,
            "processes_spawned": spawned,
            "per_job_per_minute": summary(per_minute),
            "all_per_watched_minute": len(recorder.commands) / watched_minutes
            if watched_minutes
            else math.nan,
            "failed": sum(c.error is not None for c in recorder.commands),
            "sacct_duration_s": summary([c.end - c.start for c in polls]),
        },
        "loop_block_s": {
            "goal_s": BLOCK_GOAL_S,
            "whole_run": loop_figures(samples, polls, recorder.spawned, args.tick, origin),
            "submitting_s": submitting,
            "after_submissions": loop_figures(
                [x for x in samples if x[0] - x[1] - args.tick >= steady_from],
                [c for c in polls if c.start >= steady_from],
                [x for x in recorder.spawned if x[2] >= steady_from],
                args.tick,
                origin,
            ),
            "asyncio_slow_callbacks": summary(slow) if args.asyncio_debug else None,
        },
        "jobs": [
            {
                "job_id": j.job_id,
                "sleep_s": j.sleep_s,
                "submitted": j.submitted,
                "sacct_start": j.sacct_start,
                "sacct_end": j.sacct_end,
                "process_end": j.process_end,
                "watch_started": j.watch_started,
                "event_at": j.event_at,
                "state": j.event_state,
                "commands": len(j.commands),
            }
            for j in jobs
        ],
    }


def loop_figures(samples, polls: list[Command], spawned, tick: float, origin: float) -> dict:
    """The monitor's samples, the worst of them per poll, and the spawns: what blocked the
    loop. ``origin``: the run's start (monotonic), for the times of the worst samples."""
    windows = [(c.start, c.end + READ_SLACK_S) for c in polls]
    per_poll = window_blocks(samples, windows, tick)
    late, busy_s = [s[1] for s in samples], [busy(s) for s in samples]
    spawns = [took for name, took, _ in spawned if name != "sbatch"]
    return {
        "per_poll_worst_late": summary([x for x, _ in per_poll]),
        "per_poll_worst_busy": summary([x for _, x in per_poll]),
        "polls_over_goal_late": sum(x > BLOCK_GOAL_S for x, _ in per_poll),
        "polls_over_goal_busy": sum(x > BLOCK_GOAL_S for _, x in per_poll),
        "samples_late": {**summary(late), "p99.9": percentile(late, 99.9)},
        "samples_busy": {**summary(busy_s), "p99.9": percentile(busy_s, 99.9)},
        "samples_over_goal_late": sum(x > BLOCK_GOAL_S for x in late),
        "samples_over_goal_busy": sum(x > BLOCK_GOAL_S for x in busy_s),
        "spawn_of_trigger_commands": summary(spawns),
        "worst_late": [_sample(x, origin) for x in _worst(samples, lambda x: x[1])],
        "worst_busy": [_sample(x, origin) for x in _worst(samples, busy)],
        "worst_spawns": [
            {"program": name, "took_s": took, "at_s": at - origin}
            for name, took, at in _worst(spawned, lambda x: x[1])
        ],
    }


def _worst(items: list, key, n: int = 5) -> list:
    return sorted(items, key=key, reverse=True)[:n]


def _sample(sample: tuple[float, float, float], origin: float) -> dict[str, float]:
    return {"at_s": sample[0] - origin, "late_s": sample[1], "cpu_s": sample[2]}


def sleep_range(text: str) -> tuple[int, int]:
    lo, _, hi = text.partition(":")
    return int(lo), int(hi or lo)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1, help="jobs to submit and watch")
    parser.add_argument("--sleep", type=sleep_range, default=(30, 30), help="LO:HI seconds")
    parser.add_argument("--poll-s", type=float, default=10.0, help="the trigger's poll_s")
    parser.add_argument("--tick", type=float, default=0.001, help="the monitor's sleep")
    parser.add_argument("--timeout", type=float, default=900.0, help="give up after (s)")
    parser.add_argument("--seed", type=int, default=0, help="shuffles the sleeps")
    parser.add_argument("--asyncio-debug", action="store_true")
    parser.add_argument("--out", type=Path, help="write the full result here (JSON)")
    args = parser.parse_args()
    if not os.environ.get("SLURM_CONF"):
        sys.exit("SLURM_CONF is not set: source .state/local-stack/env.sh first")
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="trigger-watch-") as tmp:
        workdir = Path(tmp)
        # Airflow writes its logs folder under AIRFLOW_HOME when imported; keep it here
        os.environ.setdefault("AIRFLOW_HOME", str(workdir / "airflow"))
        import ffjobs.airflow.triggers  # noqa: F401 - Airflow's import, before the loop is timed

        recorder = Recorder()
        recorder.install()
        result = asyncio.run(run(args, workdir, recorder))()
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    brief = {k: result[k] for k in ("config", "wall_s", "cpu", "events", "end_to_event_s")}
    brief["commands"] = {k: v for k, v in result["commands"].items()}
    brief["loop_block_s"] = {
        k: {kk: vv for kk, vv in v.items() if not kk.startswith("worst")}
        if isinstance(v, dict) and "samples_late" in v
        else v
        for k, v in result["loop_block_s"].items()
    }
    brief["stale_polls_after_process_end_s"] = result["stale_polls_after_process_end_s"]
    print(json.dumps(brief, indent=1))


if __name__ == "__main__":
    main()
