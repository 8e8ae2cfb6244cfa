"""Training on the real SLURM mini-cluster (two of three namespaced nodes, gloo on CPU) through
``ffjobs train --submit --wait``: a fault injected at a known step, then the classification,
the retry (or not) and the outcome are checked against the run's attempt log, and a recovered
run's final weights against an uninterrupted run with the same seed."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from train.helpers import TINY_MODEL, final_weights  # tests/ is on sys.path (rootdir conftest)

from ffjobs.slurm.drills import cut_link, job_nodes, throttled_link, wait_for_step
from ffjobs.train.slurm_job import unresponsive_nodes

REPO = Path(__file__).resolve().parents[2]
STEPS, CHECKPOINT_EVERY = 8, 2
JOB_S = 900
"""Limit of one ``ffjobs train --submit --wait`` (or ``ffjobs run`` up to training) of the tiny
job, its retries included: one to three minutes on a quiet 2-core machine, with room for a
loaded one."""
RESUME_S = 600
"""``ffjobs run --resume`` supervising one more job of the tiny training."""
MID_TRAINING_S = 600
"""From the submission until the first job's ranks are at a step (or held at their pause), the
two waits of :func:`wait_for_log` and :func:`ffjobs.slurm.drills.wait_for_step`, 300 s each."""
STRAIGHT_S = 300
"""The straight reference on two local ranks, trained by the first test that needs it: tens of
seconds for 8 or 60 steps."""
DRILL_S = JOB_S + STRAIGHT_S + 60
"""A drill's limit: its job, the reference, the checks. Drills that wait for more say so."""

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(DRILL_S)]
TRAIN = [
    *TINY_MODEL,
    "model.identity_weights=null",  # a random frozen encoder: no pre-training in the jobs
    # no held-out measurement on the way: no recogniser to pre-train before a drill, and no
    # pause of rank 0 that a drill's short collective timeout would count against the peer
    "evaluate.every_steps=0",
    "train.batch_size=2",
    f"train.steps={STEPS}",
    f"train.checkpoint_every={CHECKPOINT_EVERY}",
    "train.keep_checkpoints=10",
    "train.log_every=1",  # a progress line per step: the attempt log counts steps from them
    "train.deterministic=true",
    "train.precision=fp32",
    "train.init_timeout_s=60",
    "train.collective_timeout_s=30",
    "tracking.enabled=false",
    "slurm.retry_backoff_s=1",
    "slurm.time_min=5",
]


def ffjobs(*args: str, sets: list[str] = ()) -> list[str]:
    """The ``ffjobs`` command line ``args``, each of ``sets`` as a ``--set``."""
    return [sys.executable, "-m", "ffjobs.cli", *args, *(a for s in sets for a in ("--set", s))]


def run_dirs(tmp_path: Path) -> list[str]:
    """Runs, checkpoints and submitit folders of a test under its own temp dir."""
    return [f"runs_dir={tmp_path / 'runs'}", f"train.checkpoint_dir={tmp_path / 'ckpt'}",
            f"slurm.folder={tmp_path / 'jobs'}"]  # fmt: skip


SUBMIT = ("train", "-c", "minicluster", "--submit", "--data", "memory", "--json")


def submit(tmp_path: Path, env: dict[str, str], *overrides: str) -> tuple[int, dict, list]:
    """``ffjobs train --submit --wait`` of a tiny job; (exit code, outcome, attempt records)."""
    command = ffjobs(*SUBMIT, "--wait", sets=[*TRAIN, *run_dirs(tmp_path), *overrides])
    result = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=JOB_S
    )
    assert result.stdout.strip(), result.stderr[-4000:]
    outcome = json.loads(result.stdout)
    log = Path(outcome["facts"]["attempt_log"])
    attempts = [json.loads(line) for line in log.read_text().splitlines()]
    return result.returncode, outcome, attempts


@pytest.fixture(scope="module")
def straight(tmp_path_factory) -> Callable[..., dict]:
    """``straight(*overrides)``: the final weights of the same training without faults, as
    local ranks: the reference of the bitwise checks, trained once per settings and test run."""
    from ffjobs.config import load_config
    from ffjobs.train.launch import launch_local

    root, weights = tmp_path_factory.mktemp("straight"), {}

    def reference(*overrides: str) -> dict:
        if overrides not in weights:
            sets = [*TRAIN, *overrides, "slurm.executor=local", "slurm.nodes=1"]
            folder = root / str(len(weights))
            launch_local(load_config("minicluster", sets), 2, data="memory",
                         checkpoint_dir=str(folder), quiet_stdout=True)  # fmt: skip
            weights[overrides] = final_weights(folder)
        return weights[overrides]

    return reference


def assert_bitwise_equal(ours: dict, reference: dict, steps: int = STEPS) -> None:
    assert ours["step"] == reference["step"] == steps
    for net in ("generator", "discriminator", "ema"):
        for name, tensor in reference[net].items():
            assert torch.equal(ours[net][name], tensor), f"{net}.{name} differs"


@pytest.fixture
def env(local_stack) -> dict[str, str]:
    import os

    # the stack's SLURM_CONF stays; a surrounding job's or launcher's rank variables do not
    inherited = ("SLURM_JOB", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_STEP", "RANK", "WORLD_SIZE")
    env = {k: v for k, v in os.environ.items() if not k.startswith(inherited)}
    # one thread per rank, as the local reference run has (sbatch and srun pass it on):
    # another thread count sums in another order, and bitwise equality is the claim
    return {**env, "OMP_NUM_THREADS": "1"}


def test_killed_rank_is_retried_without_its_node_and_finishes_bitwise(tmp_path, env, straight):
    code, outcome, attempts = submit(
        tmp_path, env, "train.faults.kill_rank=1", "train.faults.kill_at_step=5"
    )
    assert code == 0, (outcome, attempts)
    first, second = attempts
    # communicator when rank 0 met the dead peer in a collective; unknown (srun's "task 1:
    # Killed") when srun ended the step while rank 0 was between two collectives
    assert first["kind"] in ("communicator", "node_failure", "unknown") and first["retryable"]
    assert first["suspect_nodes"], first  # the killed rank's node
    assert first["suspect_nodes"][0] in first["nodes"]
    assert set(first["suspect_nodes"]) <= set(second["excluded"])
    assert not set(second["nodes"]) & set(first["suspect_nodes"])  # ran on the healthy nodes
    assert first["steps_lost"] <= CHECKPOINT_EVERY  # at most one checkpoint interval lost
    assert second["kind"] is None and outcome["facts"]["final_step"] == STEPS
    assert 0 < outcome["facts"]["goodput"] < 1
    key = outcome["run_key"]
    assert_bitwise_equal(final_weights(tmp_path / "ckpt" / key), straight())


def test_fast_path_restarts_the_worker_group_inside_the_allocation(tmp_path, env, straight):
    code, outcome, attempts = submit(
        tmp_path, env, "slurm.restarts_in_allocation=1",
        "train.faults.kill_rank=1", "train.faults.kill_at_step=5",
    )  # fmt: skip
    assert code == 0, (outcome, attempts)
    (only,) = attempts  # recovered inside the first job: no resubmission
    assert only["kind"] is None and only["start_step"] == 0
    key = outcome["run_key"]
    assert_bitwise_equal(final_weights(tmp_path / "ckpt" / key), straight())


def test_hung_rank_is_caught_by_the_collective_timeout_and_retried_bitwise(tmp_path, env, straight):
    code, outcome, attempts = submit(
        tmp_path, env, "train.faults.hang_rank=1", "train.faults.hang_at_step=5",
        "train.collective_timeout_s=10",
    )  # fmt: skip
    assert code == 0, (outcome, attempts)
    first, second = attempts
    assert first["kind"] == "communicator" and first["retryable"]
    assert first["suspect_nodes"] == [first["nodes"][1]]  # the hung rank's node, not its peer's
    assert first["suspect_nodes"][0] not in second["nodes"]
    # the healthy rank gave up after the collective timeout, not after the job's time limit
    assert first["ended_at"] - first["started_at"] < 10 + 60
    assert first["steps_lost"] <= CHECKPOINT_EVERY
    key = outcome["run_key"]
    assert_bitwise_equal(final_weights(tmp_path / "ckpt" / key), straight())


def test_user_code_exception_is_not_retried_and_says_why(tmp_path, env):
    code, outcome, attempts = submit(
        tmp_path, env, "train.faults.raise_rank=0", "train.faults.raise_at_step=3"
    )
    assert code == 1
    (only,) = attempts
    assert only["kind"] == "user_code" and not only["retryable"]
    assert "not retryable" in outcome["summary"] and "ValueError" in outcome["summary"]


def test_out_of_memory_is_not_retried_by_default(tmp_path, env):
    code, outcome, attempts = submit(
        tmp_path, env, "train.faults.raise_rank=1", "train.faults.raise_at_step=3",
        "train.faults.raise_error=out_of_memory",
    )  # fmt: skip
    assert code == 1
    (only,) = attempts
    assert only["kind"] == "out_of_memory" and not only["retryable"]


def test_a_failure_on_every_attempt_stops_after_the_budget(tmp_path, env):
    code, outcome, attempts = submit(
        tmp_path, env, "train.faults.raise_in_collective_at_step=3",
        "train.faults.every_time=true", "slurm.max_attempts=2",
    )  # fmt: skip
    assert code == 3  # retryable, but the budget is spent
    assert [a["kind"] for a in attempts] == ["communicator", "communicator"]
    assert "attempt budget of 2" in outcome["summary"]
    assert all(a["job_id"] for a in attempts) and attempts[0]["job_id"] != attempts[1]["job_id"]


def start(tmp_path: Path, env: dict[str, str], *overrides: str) -> subprocess.Popen:
    """``ffjobs train --submit --wait`` in the background (for drills that act mid-training)."""
    command = ffjobs(*SUBMIT, "--wait", sets=[*TRAIN, *run_dirs(tmp_path), *overrides])
    return subprocess.Popen(
        command,
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        # SIGINT as a terminal gives it: a test run started in a shell's background ignores
        # SIGINT, and a child that inherited that would ignore this test's Ctrl-C
        preexec_fn=_default_sigint,
    )


def _default_sigint() -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def finish(proc: subprocess.Popen) -> tuple[int, dict, list]:
    out, _ = proc.communicate(timeout=JOB_S)
    assert out.strip().startswith("{"), out[-3000:]
    outcome = json.loads(out)
    log = Path(outcome["facts"]["attempt_log"]).read_text()
    return proc.returncode, outcome, [json.loads(line) for line in log.splitlines()]


@pytest.mark.timeout(MID_TRAINING_S + DRILL_S)
def test_preemption_signal_checkpoints_and_requeues_through_submitit(tmp_path, env, straight):
    """USR2 (what SLURM sends before a pre-emption or the time limit) on every task: one
    consistent checkpoint, a requeue of the same job by submitit, and the run finishes."""
    # the ranks are held at step 5 until the signal ends the pause: it lands mid-training
    proc = start(tmp_path, env, "train.faults.pause_at_step=5",
                 f"train.faults.pause_until_file={tmp_path / 'never'}")  # fmt: skip
    wait_for_log(tmp_path, "paused at step 5")
    job_id = wait_for_step(tmp_path, 4)
    subprocess.run(["scancel", "--signal=USR2", job_id], env=env, check=True, timeout=30)
    start_requeued_now(job_id, env)
    code, outcome, attempts = finish(proc)
    assert code == 0, outcome
    assert len(attempts) == 1 and attempts[0]["job_id"] == job_id  # requeued, not resubmitted
    folder = next((tmp_path / "jobs").glob(f"*/attempt-1/{job_id}"))
    rank0 = (folder / f"{job_id}_0_log.err").read_text()
    rank0 += (folder / f"{job_id}_0_log.out").read_text()
    assert "will checkpoint and stop" in rank0 and "resumed from" in rank0
    assert outcome["facts"]["final_step"] == STEPS
    ours = final_weights(tmp_path / "ckpt" / outcome["run_key"])
    assert_bitwise_equal(ours, straight())


def start_requeued_now(job_id: str, env: dict[str, str], timeout_s: float = 300) -> None:
    """Once SLURM has requeued the job, let it start at once: slurmctld holds a requeued batch
    job for its credential lifetime (``AuthInfo=cred_expire``, 120 s), and what is checked here
    is the requeue and the resume, not that wait."""
    deadline = time.monotonic() + timeout_s
    show = ["scontrol", "show", "job", "--oneliner", job_id]
    while True:
        job = subprocess.run(show, env=env, capture_output=True, text=True, timeout=30).stdout
        if "JobState=PENDING" in job and "Restarts=0" not in job:
            break
        assert time.monotonic() < deadline, f"job {job_id} not requeued in {timeout_s:.0f} s"
        time.sleep(0.5)
    update = ["scontrol", "update", f"JobId={job_id}", "StartTime=now"]
    subprocess.run(update, env=env, check=True, capture_output=True, timeout=30)


def wait_for_log(tmp_path: Path, text: str, tasks: int = 2, timeout_s: float = 300) -> None:
    """Until every task's stderr of the run's first job says ``text``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        logs = list((tmp_path / "jobs").glob("*/attempt-1/*/*_log.err"))
        if len(logs) == tasks and all(text in log.read_text(errors="replace") for log in logs):
            return
        time.sleep(0.2)
    raise TimeoutError(f"the job's tasks never said {text!r} in {timeout_s:.0f} s")


@pytest.mark.parametrize("how", ["scancel", "ctrl-c"])
@pytest.mark.timeout(MID_TRAINING_S + RESUME_S + DRILL_S)
def test_a_users_cancel_stops_the_run_and_an_explicit_resume_finishes_it(
    tmp_path, env, straight, how
):
    """``scancel`` (or Ctrl-C on ``ffjobs train --submit --wait``, which cancels its job) of a
    job whose ranks are held at step 5: SIGTERM, every rank trains step 5, checkpoints it and
    stops; nothing requeues the job (one run in ``sacct -D``, no REQUEUED), the attempt is
    recorded as cancelled by the user and through what, the command exits 4 and retries
    nothing. ``ffjobs run --resume`` then trains on from step 5, bitwise."""
    import os
    import pwd
    import signal

    go_on = tmp_path / "go-on"
    proc = start(tmp_path, env, "train.faults.pause_at_step=5",
                 f"train.faults.pause_until_file={go_on}")  # fmt: skip
    wait_for_log(tmp_path, "paused at step 5")
    job_id = wait_for_step(tmp_path, 4)
    if how == "scancel":
        subprocess.run(["scancel", job_id], env=env, check=True, timeout=30)
    else:
        proc.send_signal(signal.SIGINT)
    code, outcome, attempts = finish(proc)
    assert code == 4, outcome  # ExitCode.CANCELLED
    (only,) = attempts
    assert only["job_id"] == job_id and only["state"] == "CANCELLED"
    assert only["kind"] == "cancelled" and not only["retryable"], only
    user = f"{pwd.getpwuid(os.getuid()).pw_name} (uid {os.getuid()})"
    through = "scancel" if how == "scancel" else "Ctrl-C on ffjobs train --submit --wait"
    assert f"cancelled by user {user} through {through};" in only["summary"], only
    assert only["checkpoint_step"] == 5 and only["final_step"] == 5, only
    assert outcome["facts"]["failure"] == "cancelled" and "not retryable" in outcome["summary"]
    sacct = ["sacct", "-D", "-X", "-n", "-P", "-j", job_id, "-o", "State"]
    out = subprocess.run(sacct, env=env, capture_output=True, text=True, check=True).stdout
    runs = [state for state in out.splitlines() if state.strip()]
    assert len(runs) == 1 and runs[0].startswith("CANCELLED by"), runs  # never REQUEUED
    folder = next((tmp_path / "jobs").glob(f"*/attempt-1/{job_id}"))
    rank0 = "".join((folder / f"{job_id}_0_log.{end}").read_text() for end in ("err", "out"))
    assert "a cancel: no requeue" in rank0 and "stop requested (cancel)" in rank0
    if how != "scancel":
        return

    go_on.touch()  # the resumed job trains through step 5
    key = outcome["run_key"]
    resume = ffjobs("run", "--resume", key, "--stages", "train", "--json",
                    sets=[f"runs_dir={tmp_path / 'runs'}"])  # fmt: skip
    result = subprocess.run(resume, cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=RESUME_S)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    (train,) = json.loads(result.stdout)["stages"]
    log = Path(train["facts"]["attempt_log"]).read_text().splitlines()
    first, second = [json.loads(line) for line in log]
    assert first["kind"] == "cancelled" and second["kind"] is None
    assert second["start_step"] == 5 and second["final_step"] == STEPS
    assert_bitwise_equal(final_weights(tmp_path / "ckpt" / key), straight())


@pytest.mark.timeout(MID_TRAINING_S + DRILL_S)
def test_cut_link_names_the_node_and_the_retry_runs_without_it(tmp_path, env, straight):
    """The network link of the node of rank 1 goes down mid-training and stays down."""
    proc = start(tmp_path, env, "train.steps=60", "train.collective_timeout_s=10")
    job_id = wait_for_step(tmp_path, 3)
    victim = job_nodes(job_id)[1]
    with cut_link(victim):
        code, outcome, attempts = finish(proc)
    # restored, the node is back in service at once, marked down meanwhile or not (SLURM alone
    # asks a down node to register only every few minutes: the next test would wait for it)
    deadline = time.monotonic() + 30
    while unresponsive_nodes([victim]):
        assert time.monotonic() < deadline, f"{victim} still out of service after its restore"
        time.sleep(0.5)
    assert code == 0, (outcome, attempts)
    last = attempts[-1]
    assert victim not in last["nodes"] and last["kind"] is None
    # either the supervisor retried without the node, or SLURM itself requeued the job once it
    # declared the silent node down (JobRequeue): both must land on the healthy nodes
    if len(attempts) > 1:
        first = attempts[0]
        assert first["kind"] in ("communicator", "node_failure") and first["retryable"]
        assert first["suspect_nodes"][0] == victim, first
        assert first["steps_lost"] <= CHECKPOINT_EVERY
    ours = final_weights(tmp_path / "ckpt" / outcome["run_key"])
    assert_bitwise_equal(ours, straight("train.steps=60"), steps=60)


@pytest.mark.timeout(MID_TRAINING_S + DRILL_S + 300)  # + the node's return (up.sh)
def test_a_node_that_dies_mid_job_is_excluded_and_the_run_finishes(tmp_path, env, straight):
    """Every process in the namespace of the node of rank 1 (its slurmd, slurmstepd and the
    rank) is killed mid-training: what a node crash looks like to the rest of the cluster."""
    import time

    proc = start(tmp_path, env, "train.steps=60")
    job_id = wait_for_step(tmp_path, 3)
    victim = job_nodes(job_id)[1]
    pids = subprocess.run(["ip", "netns", "pids", f"ffjobs-{victim}"], capture_output=True,
                          text=True, check=True).stdout.split()  # fmt: skip
    subprocess.run(["kill", "-9", *pids], check=False)
    try:
        code, outcome, attempts = finish(proc)
    finally:  # bring the node back for the tests after this one
        subprocess.run(["bash", str(REPO / "infra" / "local" / "up.sh")], capture_output=True,
                       timeout=300)  # fmt: skip
        time.sleep(1)
    assert code == 0, (outcome, attempts)
    first, second = attempts[0], attempts[-1]
    assert first["kind"] in ("node_failure", "communicator") and first["retryable"]
    assert victim in first["suspect_nodes"], first
    assert victim not in second["nodes"] and second["kind"] is None
    assert first["steps_lost"] <= CHECKPOINT_EVERY
    ours = final_weights(tmp_path / "ckpt" / outcome["run_key"])
    assert_bitwise_equal(ours, straight("train.steps=60"), steps=60)


def test_ffjobs_run_with_a_slurm_profile_trains_on_slurm_into_one_mlflow_run(tmp_path, env):
    """The whole pipeline on the cluster profile: validation here, preflight and training as
    SLURM jobs, every attempt in the run's MLflow run on the stack's server."""
    uri = env["FFJOBS_NODE_TRACKING_URI"]  # the server as the nodes reach it, over the bridge
    sets = [*[s for s in TRAIN if not s.startswith("tracking.")], f"tracking.tracking_uri={uri}",
            "tracking.experiment=ffjobs-slurm-run", "data.synth.identities=6",
            "data.synth.per_identity=4", "preflight.sizes_mib=[1]", "preflight.target_time_s=0.05",
            f"train.checkpoint_dir={tmp_path / 'ckpt'}", f"slurm.folder={tmp_path / 'jobs'}"]  # fmt: skip
    # the stages up to training: evaluation and registration have tests of their own
    command = ffjobs("run", "-c", "minicluster", "--stages", "validate,preflight,train", "--json",
                     sets=sets)  # fmt: skip
    result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=JOB_S)  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    summary = json.loads(result.stdout)
    assert [s["status"] for s in summary["stages"]] == ["passed"] * 3
    assert "PASS on 2 ranks" in summary["stages"][1]["summary"]
    train = summary["stages"][2]["facts"]
    assert train["attempts"] == 1 and train["final_step"] == STEPS

    from mlflow.tracking import MlflowClient

    run = MlflowClient(uri).get_run(summary["mlflow_run_id"])
    assert run.info.status == "FINISHED" and run.data.tags["ffjobs.train"] == "passed"
    record = json.loads((tmp_path / summary["run_dir"] / "run.json").read_text())
    job_ids = [job["job_id"] for job in record["slurm_jobs"]]
    assert run.data.tags["slurm.job_ids"] == ",".join(job_ids)
    assert run.data.metrics["goodput"] > 0 and "loss_identity" in run.data.metrics


def test_preflight_on_three_nodes_names_the_throttled_one_and_training_runs_without_it(
    tmp_path, env
):
    """node3's link is throttled below the profile's bandwidth minimum; the preflight spans all
    three nodes (the training job needs two), fails naming node3, and training runs on the
    other two."""
    # 20 Mbit/s is 0.0025 GB/s; the bridge gives gloo well over 0.05 GB/s even on a loaded
    # 2-core machine: the 0.01 GB/s minimum sits 4x above the throttle and 5x below the healthy
    # links, and a suspect must be 5x slower than the best pair (the throttle is ~100x)
    sets = [*TRAIN, f"train.checkpoint_dir={tmp_path / 'ckpt'}", f"slurm.folder={tmp_path / 'jobs'}",
            "data.synth.identities=6", "data.synth.per_identity=4", "preflight.nodes=3",
            "preflight.sizes_mib=[1]", "preflight.min_busbw_gbps={'1': 0.01}",
            "preflight.pair_size_mib=0.25", "preflight.suspect_ratio=0.2",
            "preflight.target_time_s=0.05", "preflight.warmup_iters=1", "preflight.min_iters=2"]  # fmt: skip
    # the stages up to training: evaluation and registration have tests of their own
    command = ffjobs("run", "-c", "minicluster", "--stages", "validate,preflight,train", "--json",
                     sets=sets)  # fmt: skip
    with throttled_link("node3", "20mbit"):
        result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True,
                                timeout=JOB_S)  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    validate, preflight, train = json.loads(result.stdout)["stages"]
    assert preflight["status"] == "passed", preflight
    assert preflight["facts"]["verdict"] == "FAIL" and preflight["facts"]["exclude"] == ["node3"]
    assert preflight["facts"]["suspect_nodes"] == ["node3"]
    assert "training excludes node3" in preflight["summary"]
    attempts = Path(train["facts"]["attempt_log"]).read_text().splitlines()
    (only,) = [json.loads(line) for line in attempts]
    assert "node3" not in only["nodes"] and "node3" in only["excluded"] and only["kind"] is None
    assert train["facts"]["final_step"] == STEPS


@pytest.mark.parametrize("how", ["live", "ended", "fails"])
@pytest.mark.timeout(300 + 600 + RESUME_S + STRAIGHT_S + 60)  # submit, the job's end, resume
def test_a_job_of_the_run_is_attached_to_never_duplicated(tmp_path, env, straight, how):
    """``ffjobs train --submit`` returns once the job is queued; supervising the run later
    (``ffjobs run --resume KEY --stages train``) waits for that job instead of submitting one,
    and a job that ended while nobody supervised it is read and recorded as its attempt, from
    its own attempt folder: nothing is submitted after its success. A re-attached job that
    fails is classified from its own logs, and the retry runs without its suspect node, on the
    inputs the run started with (``--data memory``: ``ffjobs run`` has no ``--data``)."""
    faults = ["train.faults.kill_rank=1", "train.faults.kill_at_step=5"] if how == "fails" else []
    command = ffjobs(*SUBMIT, sets=[*TRAIN, *run_dirs(tmp_path), *faults])
    submitted = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True,
                               timeout=300)  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr[-3000:]
    outcome = json.loads(submitted.stdout)
    assert outcome["status"] == "submitted"
    key, job_id = outcome["run_key"], outcome["facts"]["job_id"]
    if how == "ended":
        from ffjobs.slurm.jobstate import JobState, poll_jobs

        deadline = time.monotonic() + 600  # a tiny job: seconds of training, plus queueing
        while not poll_jobs([job_id])[job_id].is_terminal:
            assert time.monotonic() < deadline, f"job {job_id} did not end"
            time.sleep(1)
        assert poll_jobs([job_id])[job_id].state is JobState.SUCCEEDED
    resume = ffjobs("run", "--resume", key, "--stages", "train", "--json",
                    sets=[f"runs_dir={tmp_path / 'runs'}"])  # fmt: skip
    result = subprocess.run(resume, cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=RESUME_S)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    (train,) = json.loads(result.stdout)["stages"]
    attempts = [
        json.loads(line) for line in Path(train["facts"]["attempt_log"]).read_text().splitlines()
    ]
    record = json.loads(next((tmp_path / "runs").glob("*/run.json")).read_text())
    assert record["train_data"] == "memory"
    named = subprocess.run(["sacct", "-X", "-n", "-P", "-o", "JobID", "--name", key],
                           env=env, capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    jobs = [job["job_id"] for job in record["slurm_jobs"]]
    assert named == jobs  # every SLURM job of the run, ever, is one of its attempts
    if how != "fails":
        (only,) = attempts
        assert only["job_id"] == job_id and only["kind"] is None
        assert only["number"] == 1 and only["final_step"] == STEPS  # read from its own folder
        assert jobs == [job_id]
        return
    first, second = attempts
    assert first["job_id"] == job_id and first["number"] == 1  # its own attempt folder
    # as in test_killed_rank_is_retried_without_its_node_and_finishes_bitwise: unknown when srun
    # ended the step while rank 0 was between two collectives; its node is the suspect either way
    kind = first["kind"]
    assert kind in ("communicator", "node_failure", "unknown") and first["retryable"], first
    assert first["suspect_nodes"] and first["suspect_nodes"][0] in first["nodes"], first
    assert first["final_step"] >= CHECKPOINT_EVERY  # its progress lines were found
    assert not set(second["nodes"]) & set(first["suspect_nodes"])
    assert second["kind"] is None and second["final_step"] == STEPS
    assert jobs == [job_id, second["job_id"]]
    # trained on random tensors throughout (--data memory), as the straight run
    assert_bitwise_equal(final_weights(tmp_path / "ckpt" / key), straight())
