"""Failure classification on realistic rank logs: one test per kind, evidence pattern and rule.

Fixtures in ``tests/slurm/data/``:

- ``gloo-*.log``, ``dist-store-timeout.log``, ``value-error-*.log``,
  ``dataloader-missing-image.log``: real output of PyTorch 2.x on this project's CPU
  environment, from short loopback drills (two gloo ranks on 127.0.0.1 with a 3-5 s process-group
  timeout doing an all-reduce loop; at step 20 rank 1 SIGKILLed itself (``gloo-read-error``) or
  slept past the timeout (``gloo-recv-timeout``/``gloo-peer-closed``); rank 0 alone waiting for a
  second client (``dist-store-timeout``); rank 0 raising a ValueError mid-loop; a DataLoader
  worker opening a missing image). Only the interpreter paths were rewritten.
- ``nccl-bad-ifname-excerpt.log``: lines 5-30 of the real H200 log
  ``shared/fixtures/h200x2/nccl-info-bad-ifname.log`` (``NCCL_SOCKET_IFNAME=doesnotexist0``).
- ``nccl-watchdog-timeout-rank0.log``, ``nccl-remote-error-rank0.log``, ``cuda-oom-rank1.log``,
  ``nccl-healthy-rank1.log``: assembled from PyTorch 2.4+/NCCL 2.21 output as published in
  PyTorch and NCCL issue threads (watchdog block, ncclRemoteError with NET/IB completion error,
  torch.OutOfMemoryError), with the hosts renamed node1/node2.
- ``storage-enospc-rank0.log``, ``storage-enospc-peer-rank1.log``: the two ranks' logs of a real
  local launch whose checkpoint folder, a 2 MB tmpfs, filled up before step 4's checkpoint
  (rank 0's ``StorageError``; rank 1 lost its gloo peer). ``storage-eacces.log``: a real
  PermissionError (a user writing into a folder another user owns). ``storage-edquot.log`` and
  ``storage-s3-access-denied.log``: the tracebacks of EDQUOT as ``write(2)`` reports it and of
  botocore's ClientError for an S3 403, raised by small scripts (a quota and a bucket policy are
  not at hand). Interpreter and data paths were rewritten.
- ``srun-killed-rank1-rank0.log``, ``srun-killed-rank1-rank1.log``: a real two-node job on the
  mini-cluster whose rank 1 SIGKILLed itself at step 5 while rank 0 was between steps: srun
  reported the kill and ended the step before rank 0 met a collective, so rank 0 stopped on
  SIGTERM with no communicator error. ``srun-cancelled-after-value-error-rank*.log``: a real
  job of the mini-cluster whose rank 0 raised a ValueError and did not exit; the supervisor
  cancelled the job and srun then reported rank 0 "Terminated". Paths were rewritten.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from ffjobs.slurm.failures import (
    MAX_EVIDENCE,
    MAX_LOG_BYTES,
    Failure,
    FailureKind,
    RankLog,
    classify_failure,
    read_rank_logs,
)

DATA = Path(__file__).parent / "data"
SHARED_H200 = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "h200x2"


def fixture(name: str) -> str:
    return (DATA / name).read_text()


def rank(number: int, text: str = "", exit_code: int | None = 1, node: str | None = None):
    return RankLog(rank=number, node=node or f"node{number + 1}", text=text, exit_code=exit_code)


def test_failure_to_dict_is_json_ready():
    failure = Failure(FailureKind.COMMUNICATOR, True, "s", ("e",), ("node2",))
    as_dict = json.loads(json.dumps(failure.to_dict()))
    assert as_dict["kind"] == "communicator" and as_dict["suspect_nodes"] == ["node2"]
    assert as_dict["evidence"] == ["e"] and as_dict["data_file"] is None


# --- SLURM states -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "kind"),
    [
        ("NODE_FAIL", FailureKind.NODE_FAILURE),
        ("BOOT_FAIL", FailureKind.NODE_FAILURE),
        ("PREEMPTED", FailureKind.PREEMPTION),
        ("TIMEOUT", FailureKind.TIMEOUT),
        ("DEADLINE", FailureKind.TIMEOUT),
    ],
)
def test_slurm_states_are_retryable_kinds(state, kind):
    failure = classify_failure(state, 1, [rank(0, exit_code=None), rank(1, exit_code=None)])
    assert failure.kind is kind and failure.retryable
    assert f"slurm: job state {state}" in failure.evidence


@pytest.mark.parametrize(
    ("banner", "kind"),
    [
        ("DUE TO PREEMPTION", FailureKind.PREEMPTION),
        ("DUE TO TIME LIMIT", FailureKind.TIMEOUT),
        ("DUE TO NODE FAILURE, SEE SLURMCTLD LOG", FailureKind.NODE_FAILURE),
    ],
)
def test_slurmstepd_cancel_banner_decides_a_cancelled_job(banner, kind):
    text = f"slurmstepd: error: *** JOB 4711 ON node1 CANCELLED AT 2026-11-30T03:12:44 {banner} ***"
    assert classify_failure("CANCELLED", 0, [rank(0, text, exit_code=-15)]).kind is kind


def test_node_fail_beats_everything_in_the_logs_and_names_slurms_node():
    ranks = [
        rank(0, fixture("cuda-oom-rank1.log") + "\nsrun: error: Node failure on node2\n"),
        rank(1, fixture("value-error-rank0.log")),
    ]
    failure = classify_failure("NODE_FAIL", 1, ranks)
    assert failure.kind is FailureKind.NODE_FAILURE and failure.retryable
    assert failure.suspect_nodes == ("node2",)
    assert "rank 0 (node1): srun: error: Node failure on node2" in failure.evidence


def test_node_fail_without_a_named_node_suspects_the_ranks_that_left_no_end():
    ranks = [rank(0, fixture("gloo-read-error-rank0.log"), exit_code=1), rank(1, exit_code=None)]
    failure = classify_failure("NODE_FAIL", None, ranks)
    assert failure.suspect_nodes == ("node2",)


def test_cancelled_with_clean_logs_is_not_retried():
    failure = classify_failure("CANCELLED", 0, [rank(0, "step 10 loss 0.5", exit_code=-15)])
    assert failure.kind is FailureKind.UNKNOWN and not failure.retryable


def test_unrecognised_failure_is_unknown_and_retryable():
    failure = classify_failure("FAILED", 1, [rank(0, "step 10 loss 0.5", exit_code=1)])
    assert failure.kind is FailureKind.UNKNOWN and failure.retryable
    assert "exit code 1" in failure.summary


# --- out of memory ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        pytest.param(fixture("cuda-oom-rank1.log"), id="torch.OutOfMemoryError"),
        pytest.param("RuntimeError: CUDA out of memory. Tried to allocate 2.26 GiB", id="cuda"),
        pytest.param(
            "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=4711.0. Some of your "
            "processes may have been killed by the cgroup out-of-memory handler.",
            id="oom-kill",
        ),
        pytest.param(
            "[812.4] Out of memory: Killed process 4127 (python) total-vm:96013420kB", id="kernel"
        ),
    ],
)
def test_oom_signatures_are_out_of_memory_and_not_retried(line):
    failure = classify_failure("FAILED", 1, [rank(0, exit_code=-9), rank(1, line)])
    assert failure.kind is FailureKind.OUT_OF_MEMORY and not failure.retryable
    assert failure.evidence and failure.evidence[0].startswith("rank 1 (node2): ")


def test_a_vague_oom_line_counts_only_on_a_sigkilled_rank():
    text = "srun: error: node2: task 1: oom event"
    assert classify_failure("FAILED", 137, [rank(1, text, exit_code=137)]).kind is (
        FailureKind.OUT_OF_MEMORY
    )
    assert classify_failure("FAILED", 1, [rank(1, text, exit_code=1)]).kind is FailureKind.UNKNOWN


def test_oom_on_one_rank_beats_communicator_errors_on_the_others():
    ranks = [
        rank(0, fixture("nccl-watchdog-timeout-rank0.log"), exit_code=-6),
        rank(1, fixture("cuda-oom-rank1.log")),
    ]
    failure = classify_failure("FAILED", 1, ranks)
    assert failure.kind is FailureKind.OUT_OF_MEMORY
    assert "rank 1 (node2)" in failure.summary


# --- data, config, user code -----------------------------------------------------------------


def test_missing_image_in_a_dataloader_worker_is_data_with_the_file_named():
    failure = classify_failure("FAILED", 1, [rank(0, fixture("dataloader-missing-image.log"))])
    assert failure.kind is FailureKind.DATA and not failure.retryable
    assert failure.data_file == "/data/faces/train/id_0007/img_0000.jpg"
    assert failure.traceback_excerpt.splitlines()[-1].startswith("FileNotFoundError: [Errno 2]")


@pytest.mark.parametrize(
    ("exception", "data_file"),
    [
        ("FileNotFoundError: s3://faces/train/id_0007/img_0003.jpg", "s3://faces/train/id_0007/img_0003.jpg"),
        ("botocore.errorfactory.NoSuchKey: An error occurred (NoSuchKey) when calling the GetObject operation: The specified key does not exist.", None),
        ("ValueError: id_0007/img_0003.jpg changed since validation (sha256 differs)", "id_0007/img_0003.jpg"),
        ("OSError: checksum mismatch for 'train/id_0002/img_0001.png'", "train/id_0002/img_0001.png"),
        ("FileNotFoundError: [Errno 2] No such file or directory: 'id_0002/01.jpg'", "id_0002/01.jpg"),
    ],
)  # fmt: skip
def test_data_error_patterns(exception, data_file):
    text = f'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\n{exception}\n'
    failure = classify_failure("FAILED", 1, [rank(0, text)])
    assert failure.kind is FailureKind.DATA and failure.data_file == data_file


def test_a_dataset_refused_as_changed_since_validation_is_data_naming_its_files():
    refusal = (
        "ffjobs.data.index.DatasetChangedError: dataset /data/config/faces changed since "
        "validation: 2 removed (id_0002/01.jpg, id_0005/01.jpg), 1 added (id_0003/08.jpg); "
        "training refused before its first step (validated fingerprint 0123abcd): restore the "
        "files and resume the run (validation checks them again), or start a new run"
    )
    text = f'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\n{refusal}\n'
    failure = classify_failure("FAILED", 1, [rank(0, text, node="node1"), rank(1, text)])
    assert failure.kind is FailureKind.DATA and not failure.retryable
    assert failure.data_file == "id_0002/01.jpg"
    assert failure.summary == (
        "dataset changed since validation, training refused on rank 0 (node1): 2 removed "
        "(id_0002/01.jpg, id_0005/01.jpg), 1 added (id_0003/08.jpg); not retried"
    )


@pytest.mark.parametrize(
    "exception",
    [
        "FileNotFoundError: [Errno 2] No such file or directory: 'runs/checkpoints/step-00000200.pt'",
        "FileNotFoundError: [Errno 2] No such file or directory: 'configs/clusters/mine.yaml'",
        "FileNotFoundError: [Errno 2] No such file or directory: 'srun'",
    ],
)
def test_missing_checkpoint_config_or_command_is_not_data(exception):
    text = f'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\n{exception}\n'
    failure = classify_failure("FAILED", 1, [rank(0, text)])
    assert failure.kind is FailureKind.USER_CODE and failure.data_file is None


def test_data_beats_user_code_on_another_rank():
    ranks = [
        rank(0, fixture("value-error-rank0.log")),
        rank(1, fixture("dataloader-missing-image.log")),
    ]
    assert classify_failure("FAILED", 1, ranks).kind is FailureKind.DATA


@pytest.mark.parametrize(
    "line",
    [
        "ffjobs: error: --set: train.lr: must be > 0.0, got -1.0",
        "ffjobs.config.ConfigError: configs/clusters/mine.yaml:12: slurm.gpus_per_node: must be >= 1",
        "sbatch: error: Invalid generic resource (gres) specification",
        "sbatch: error: Batch job submission failed: Requested node configuration is not available",
    ],
)
def test_config_patterns_are_config_and_not_retried(line):
    failure = classify_failure("FAILED", 2, [rank(0, line)])
    assert failure.kind is FailureKind.CONFIG and not failure.retryable
    assert failure.evidence == (f"rank 0 (node1): {line}",)


def test_plain_value_error_is_user_code_with_the_traceback():
    failure = classify_failure(None, 1, [rank(0, fixture("value-error-rank0.log"))])
    assert failure.kind is FailureKind.USER_CODE and not failure.retryable
    assert failure.traceback_excerpt.splitlines()[0] == "Traceback (most recent call last):"
    assert failure.traceback_excerpt.endswith("ValueError: expected 5 landmarks, got 68")
    assert failure.evidence == ("rank 0 (node1): ValueError: expected 5 landmarks, got 68",)


def test_traceback_excerpt_keeps_the_last_lines_of_a_deep_traceback():
    frames = "".join(f'  File "m.py", line {i}, in f{i}\n    f{i + 1}()\n' for i in range(40))
    text = f"Traceback (most recent call last):\n{frames}KeyError: 'landmarks'\n"
    excerpt = classify_failure(None, 1, [rank(0, text)]).traceback_excerpt
    assert len(excerpt.splitlines()) == 15 and excerpt.endswith("KeyError: 'landmarks'")


def test_crashed_rank_beats_its_peers_communicator_errors():
    """Real drill: rank 0 raised, rank 1's all-reduce lost it: the code, not the fabric."""
    ranks = [
        rank(0, fixture("value-error-rank0.log")),
        rank(1, fixture("value-error-peer-rank1.log")),
    ]
    failure = classify_failure(None, 1, ranks)
    assert failure.kind is FailureKind.USER_CODE and not failure.retryable
    assert "ValueError on rank 0 (node1)" in failure.summary


def test_torchrun_wrapper_traceback_is_not_the_story():
    text = fixture("value-error-rank0.log") + (
        '\nTraceback (most recent call last):\n  File "/venv/bin/torchrun", line 10, in <module>\n'
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
    )
    failure = classify_failure(None, 1, [rank(0, text)])
    assert failure.traceback_excerpt.endswith("ValueError: expected 5 landmarks, got 68")


# --- communicator -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        "[rank0]:[E1130 03:12:44.408271257 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=15120, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600060 milliseconds before timing out.",
        "[rank0]:[E1130 03:12:44.465224069 ProcessGroupNCCL.cpp:1834] [PG ID 0 PG GUID 0(default_pg) Rank 0] Timeout at NCCL work: 15120, last enqueued NCCL work: 15121, last completed NCCL work: 15119.",
        "RuntimeError: NCCL communicator was aborted on rank 1.",
        "[E1130 03:12:44.5 ProcessGroupNCCL.cpp:1290] [PG 0 Rank 1] ncclCommAbort() was called",
        "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.hpp:268, remote process exited or there was a network error, NCCL version 2.21.5",
        "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
        "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.",
        "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1269, unhandled system error, NCCL version 2.14.3",
        "ncclInternalError: Internal check failed.",
        "node1:183006:183181 [1] misc/socket.cc:538 NCCL WARN Net : Connection closed by remote peer node2.cluster<47861>",
        "node1:183006:183220 [1] misc/socket.cc:518 NCCL WARN Net : Call to recv from 10.10.0.2<58355> failed : Broken pipe",
        "socketProgressOpt: Call to recv from 10.10.0.2<33759> failed : Connection reset by peer",
        "torch.distributed.DistNetworkError: The client socket has timed out after 600000ms while trying to connect to (node1, 29500).",
        fixture("dist-store-timeout.log"),
        "[E815 16:11:29.420629547 ProcessGroupGloo.cpp:143] Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/pair.cc:144] no error",
        fixture("gloo-read-error-rank0.log"),
        fixture("gloo-peer-closed-rank1.log"),
        fixture("gloo-recv-timeout-rank0.log"),
        "terminate called after throwing an instance of 'gloo::EnforceNotMet'",
        "RuntimeError: Application timeout caused pair closure",
        "ffjobs.train.faults.InjectedFault: injected failure inside all-reduce at step 7",
    ],
)  # fmt: skip
def test_communicator_patterns_are_retryable(line):
    failure = classify_failure("FAILED", 1, [rank(0, line)])
    assert failure.kind is FailureKind.COMMUNICATOR and failure.retryable
    assert failure.evidence and all(e.startswith("rank 0 (node1): ") for e in failure.evidence)


@pytest.mark.parametrize(
    "line",
    [
        "urllib3.exceptions.ProtocolError: ('Connection aborted.', ConnectionResetError(104, 'Connection reset by peer'))",
        "BrokenPipeError: [Errno 32] Broken pipe",
        "node1:4127:4190 [0] NCCL INFO [Service thread] Connection closed by localRank 0",
        "[I1130 03:12:44.1 ProcessGroupNCCL.cpp:913] [PG ID 0 Rank 0] ProcessGroupNCCL initialization options: TIMEOUT(ms): 600000",
    ],
)  # fmt: skip
def test_lookalikes_outside_a_collective_are_not_communicator_evidence(line):
    assert classify_failure("FAILED", 1, [rank(0, line)]).kind is not FailureKind.COMMUNICATOR


def test_killed_rank_is_the_suspect_when_its_peer_reports_gloo_errors():
    """Real drill: rank 1 SIGKILLed at step 20, rank 0's all-reduce read a reset connection."""
    ranks = [
        rank(0, fixture("gloo-read-error-rank0.log"), exit_code=1),
        rank(1, "[fault] rank 1: SIGKILL at step 20\n", exit_code=-9),
    ]
    failure = classify_failure(None, 1, ranks)
    assert failure.kind is FailureKind.COMMUNICATOR and failure.retryable
    assert failure.suspect_nodes == ("node2",)
    assert failure.evidence[0] == "rank 1 (node2): killed by signal 9 (SIGKILL)"
    assert "suspect node2" in failure.summary


def test_a_rank_srun_saw_killed_is_the_suspect_when_no_peer_noticed_it():
    """SLURM gives every rank the job's exit code; only srun's line says which rank died how."""
    ranks = [
        rank(number, fixture(f"srun-killed-rank1-rank{number}.log"), exit_code=9)
        for number in (0, 1)
    ]
    failure = classify_failure("FAILED", 9, ranks)
    assert failure.kind is FailureKind.UNKNOWN and failure.retryable
    assert failure.suspect_nodes == ("node2",)
    assert "rank 1 (node2): killed by signal 9 (SIGKILL)" in failure.evidence
    assert "killed by signal 9 (SIGKILL)" in failure.summary and "suspect node2" in failure.summary


def test_a_task_srun_reports_ended_by_the_cancel_is_not_the_cause():
    ranks = [
        rank(number, fixture(f"srun-cancelled-after-value-error-rank{number}.log"), exit_code=None)
        for number in (0, 1)
    ]
    failure = classify_failure("CANCELLED", None, ranks)
    assert failure.kind is FailureKind.USER_CODE and not failure.retryable
    assert "ValueError on rank 0" in failure.summary
    assert not [e for e in failure.evidence if "killed by signal" in e]


@pytest.mark.parametrize(
    ("line", "ranks", "signal_number"),
    [
        ("srun: error: node2: task 1: Killed", (1,), 9),
        ("srun: error: node1: tasks 0-1,3: Segmentation fault", (0, 1, 3), 11),
        ("srun: error: gpu-07.cluster: task 2: Aborted (core dumped)", (2,), 6),
    ],
)
def test_srun_names_the_tasks_a_signal_ended(line, ranks, signal_number):
    ending = "srun: launch/slurm: _step_signal: Terminating StepId=6.0"
    logs = [rank(0, f"{line}\n{ending}\nsrun: error: node1: task 0: Terminated\n", exit_code=1)]
    logs += [rank(number, exit_code=1) for number in range(1, 4)]
    failure = classify_failure("FAILED", 1, logs)
    killed = [e for e in failure.evidence if "killed by signal" in e]
    # what srun reports once the step is being ended is not the cause
    name = signal.Signals(signal_number).name
    assert killed == [
        f"rank {r} (node{r + 1}): killed by signal {signal_number} ({name})" for r in ranks
    ]


def test_watchdog_victim_is_not_the_suspect_the_silent_hung_peer_is():
    ranks = [
        rank(0, fixture("nccl-watchdog-timeout-rank0.log"), exit_code=-6),  # aborted by watchdog
        rank(1, fixture("nccl-healthy-rank1.log"), exit_code=-9),  # hung, then killed by srun
    ]
    failure = classify_failure("FAILED", 134, ranks)
    assert failure.kind is FailureKind.COMMUNICATOR
    assert failure.suspect_nodes == ("node2",)
    watchdog = [e for e in failure.evidence if "Watchdog caught" in e]
    assert len(watchdog) == 1  # repeated per collective and in what(): deduplicated


def test_silent_rank_is_the_suspect_when_every_other_rank_reports():
    ranks = [
        rank(0, fixture("gloo-recv-timeout-rank0.log"), exit_code=1),
        rank(1, fixture("gloo-recv-timeout-rank0.log").replace("rank0", "rank1"), exit_code=1),
        rank(2, "step 19 loss 0.51\n", exit_code=None),
    ]
    assert classify_failure("FAILED", 1, ranks).suspect_nodes == ("node3",)


def test_peer_address_named_by_nccl_maps_to_its_node():
    healthy = fixture("nccl-healthy-rank1.log")
    ranks = [
        rank(0, fixture("nccl-remote-error-rank0.log"), exit_code=1),
        rank(1, healthy + "ncclRemoteError: A call failed possibly due to a network error\n"),
    ]
    failure = classify_failure("FAILED", 1, ranks)
    assert failure.kind is FailureKind.COMMUNICATOR
    assert failure.suspect_nodes == ("node2",)
    assert failure.evidence[0].startswith("rank 1 (node2): ")  # the suspect's lines first


def test_peer_hostname_named_by_nccl_maps_to_its_node():
    line = "node1:4127:4181 [0] misc/socket.cc:538 NCCL WARN Net : Connection closed by remote peer node2.cluster<47861>"  # noqa: E501
    ranks = [rank(0, line), rank(1, "ncclRemoteError: remote process exited\n")]
    assert classify_failure("FAILED", 1, ranks).suspect_nodes == ("node2",)


def test_evidence_is_capped_and_deduplicated():
    text = "\n".join(
        f"[rank{r}]:[E1130 03:12:44.4 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught "
        f"collective operation timeout: WorkNCCL(SeqNum={s}, OpType=ALLREDUCE) ran for 600060 ms"
        for r in range(1)
        for s in range(50)
    )
    ranks = [rank(r, text.replace("[rank0]", f"[rank{r}]"), exit_code=-6) for r in range(16)]
    failure = classify_failure("FAILED", 1, ranks)
    assert len(failure.evidence) == MAX_EVIDENCE
    assert len(set(failure.evidence)) == MAX_EVIDENCE
    assert failure.suspect_nodes == ()


# --- NCCL_DEBUG logs from an H200 machine ----------------------------------------------------


def test_bad_socket_ifname_excerpt_is_config():
    # NCCL_SOCKET_IFNAME naming no interface makes NCCL unusable on every attempt: the
    # DistBackendError is the symptom, "invalid usage" and "no socket interface found" say it is
    # the environment, so retrying the same config cannot help.
    ranks = [rank(0, fixture("nccl-bad-ifname-excerpt.log")), rank(1, exit_code=-15)]
    failure = classify_failure(None, 1, ranks)
    assert failure.kind is FailureKind.CONFIG and not failure.retryable
    assert any("no socket interface found" in e for e in failure.evidence)


def shared_log(name: str) -> str:
    path = SHARED_H200 / name
    if not path.exists():
        pytest.skip(f"{path} is absent")
    return path.read_text()


def test_bad_socket_ifname_full_log_is_config():
    failure = classify_failure(None, 1, [rank(0, shared_log("nccl-info-bad-ifname.log"))])
    assert failure.kind is FailureKind.CONFIG and not failure.retryable


@pytest.mark.parametrize(
    "name",
    ["nccl-info-nvlink-p2p.log", "nccl-info-socket-only.log", "nccl-info-p2p-disabled-shm.log"],
)
def test_healthy_nccl_info_logs_give_no_evidence(name):
    failure = classify_failure(None, 1, [rank(0, shared_log(name))])
    assert failure.kind is FailureKind.UNKNOWN and failure.evidence == ()


# --- reading logs -----------------------------------------------------------------------------


def test_read_rank_logs_tolerates_missing_and_undecodable_files_and_keeps_the_tail(tmp_path):
    big = tmp_path / "rank0.log"
    big.write_bytes(b"x" * (MAX_LOG_BYTES + 10) + b"\nlast line\xff\n")
    logs = read_rank_logs(
        {1: tmp_path / "missing.log", 0: big}, {0: "node1"}, exit_codes_by_rank={0: -9}
    )
    assert [log.rank for log in logs] == [0, 1]
    assert len(logs[0].text.encode()) <= MAX_LOG_BYTES + 2  # U+FFFD is 3 bytes for 1
    assert logs[0].text.endswith("last line\ufffd\n")
    assert (logs[0].node, logs[0].exit_code) == ("node1", -9)
    assert (logs[1].text, logs[1].node, logs[1].exit_code) == ("", None, None)


# --- storage ----------------------------------------------------------------------------------

NOT_RETRIED = "not retried: free space or fix access, then resume the run"


def test_a_full_checkpoint_folder_is_storage_and_outranks_the_peer_it_took_down():
    ranks = [rank(0, (DATA / "storage-enospc-rank0.log").read_text()),
             rank(1, (DATA / "storage-enospc-peer-rank1.log").read_text())]  # fmt: skip
    failure = classify_failure("FAILED", 1, ranks)
    assert failure.kind is FailureKind.STORAGE and not failure.retryable
    assert failure.summary == (
        "storage error on rank 0 (node1): checkpoint folder /shared/ckpt/local-20261204-225718-"
        "4b1af1: No space left on device (ENOSPC) writing step-00000004.pt (521.0 KiB); 64.0 KiB "
        f"free of 2.0 MiB; {NOT_RETRIED}"
    )
    assert failure.suspect_nodes == ()  # a full disk is no node's fault
    assert failure.evidence[0].startswith(
        "rank 0 (node1): ffjobs.train.checkpoint.storage.StorageError: "
    )


@pytest.mark.parametrize(
    ("fixture", "what"),
    [
        ("storage-edquot.log",
         "Disk quota exceeded (EDQUOT) on /shared/ckpt/run-1/compile-cache/entry-3f2a.bin"),
        ("storage-eacces.log",
         "Permission denied (EACCES) on /shared/runs/run-1/train/spool/metrics-rank0.jsonl"),
        ("storage-s3-access-denied.log", "S3 access denied (AccessDenied) (GetObject)"),
    ],
)  # fmt: skip
def test_storage_errors_of_the_os_and_s3_are_storage_naming_what_refused(fixture, what):
    failure = classify_failure("FAILED", 1, [rank(0, (DATA / fixture).read_text())])
    assert failure.kind is FailureKind.STORAGE and not failure.retryable
    assert failure.summary == f"storage error on rank 0 (node1): {what}; {NOT_RETRIED}"


@pytest.mark.parametrize(
    "exception",
    [
        "OSError: [Errno 28] No space left on device",
        "RuntimeError: background checkpoint write failed: checkpoint folder /c: No space left "
        "on device (ENOSPC) writing step-00000004.pt (1.0 MiB); 0 B free of 2.0 MiB",
        "OSError: [Errno 30] Read-only file system: '/shared/ckpt/run-1/step-00000004.pt'",
        "ffjobs.train.checkpoint.storage.StorageError: checkpoint store s3://b/ckpt/run-1: access denied "
        "(AccessDenied) writing step-00000004.pt (1.0 MiB) to s3://b/ckpt/run-1/step-00000004.pt",
    ],
)
def test_storage_error_lines(exception):
    text = f'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\n{exception}\n'
    assert classify_failure("FAILED", 1, [rank(0, text)]).kind is FailureKind.STORAGE


def test_the_launcher_reads_what_storage_refused_from_a_ranks_log_alone():
    from ffjobs.slurm.failures import storage_error

    text = (DATA / "storage-enospc-rank0.log").read_text()
    assert storage_error(text).startswith("checkpoint folder /shared/ckpt/local-20261204-225718-")
    assert storage_error((DATA / "value-error-rank0.log").read_text()) is None
