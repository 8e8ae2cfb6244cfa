"""What NCCL, gloo, c10d, torch, SLURM and ffjobs print when something goes wrong: the patterns
:mod:`ffjobs.slurm.failures` reads rank logs with.

These change when those projects change their messages, and for no other reason: a new NCCL
wording is a line here and a fixture under ``tests/slurm/data``, never a change to how failures
are classified or retried. Each ``*_SIGNATURES`` entry is ``(name, pattern)``; the name says in
a failure's summary what was recognised.
"""

from __future__ import annotations

import re

COLLECTIVE_CONTEXT = (
    r"(?:NCCL|gloo|c10d|ProcessGroup|TCPStore|socketProgress|Call to (?:recv|send))"
)
COMMUNICATOR_SIGNATURES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern))
    for name, pattern in (
        ("NCCL watchdog timeout", r"Watchdog caught collective operation timeout"),
        ("NCCL timeout", r"\[E(?:\d{4} [\d:.]+)? ProcessGroupNCCL\.cpp:\d+\].*(?i:timeout|timed out)"),
        ("NCCL communicator aborted", r"NCCL communicator was aborted|ncclCommAbort"),
        ("ncclRemoteError", r"ncclRemoteError|remote process exited or there was a network error"),
        ("ncclSystemError", r"ncclSystemError|NCCL error.*unhandled system error"),
        ("ncclInternalError", r"ncclInternalError|NCCL error.*internal error"),
        ("NCCL network error", r"NCCL WARN (?:NET/|Net :|socketProgress|Call to)"),
        ("DistBackendError", r"\bDistBackendError\b"),
        ("DistNetworkError", r"\bDistNetworkError\b"),
        ("DistStoreError", r"\bDistStoreError\b"),
        ("gloo connectFullMesh", r"Gloo connectFullMesh failed"),
        ("gloo connection lost", r"gloo/transport/tcp/\w+\.cc:\d+\].*(?:Connection closed by peer|Read error|Write error)"),
        ("gloo timeout", r"Timed out waiting \d+ms for (?:recv|send) operation to complete"),
        ("gloo enforce", r"gloo::EnforceNotMet"),
        ("gloo pair closed", r"Application timeout caused pair closure"),
        ("connection reset", rf"{COLLECTIVE_CONTEXT}.*Connection reset by peer"),
        ("broken pipe", rf"{COLLECTIVE_CONTEXT}.*Broken pipe"),
        # ffjobs' own drill raises inside the all-reduce to rehearse this very retry path
        ("injected collective failure", r"InjectedFault: injected failure inside all-reduce"),
    )
)  # fmt: skip

OOM_SIGNATURES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern))
    for name, pattern in (
        ("CUDA out of memory", r"OutOfMemoryError|CUDA out of memory|Cuda failure.*out of memory"),
        ("CPU allocator out of memory", r"DefaultCPUAllocator: not enough memory|^MemoryError\b"),
        ("cgroup oom-kill", r"oom-kill|oom_kill|Memory cgroup out of memory"),
        ("kernel OOM killer", r"(?i)out of memory: killed process|killed process \d+.*out of memory"),
        ("srun out of memory", r"task \d+: Out Of Memory"),
    )
)  # fmt: skip
WEAK_OOM = re.compile(r"(?i)\boom\b|out of memory")
"""Counts only on a rank that was SIGKILLed (exit 137 or -9): alone it is too vague."""

CONFIG_SIGNATURES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern))
    for name, pattern in (
        ("ffjobs error", r"^ffjobs: error:"),
        ("ffjobs config error", r"\b(?:ConfigError|UserError)\b"),
        ("invalid generic resource", r"Invalid generic resource"),
        ("sbatch rejected the job", r"sbatch: error: Batch job submission failed"),
        # NCCL_SOCKET_IFNAME naming no interface fails the same way on every retry
        ("NCCL found no socket interface", r"NCCL WARN Bootstrap : no socket interface found"),
        ("NCCL invalid usage", r"ncclInvalidUsage|NCCL error.*invalid usage"),
    )
)  # fmt: skip

# slurmstepd: "*** JOB 41 ON node1 CANCELLED AT 2026-11-30T09:32:12 DUE TO TIME LIMIT ***"
SLURM_CANCEL_REASON = re.compile(
    r"\*\*\* (?:JOB|STEP) \S+ ON \S+ CANCELLED AT \S+ DUE TO ([A-Z ]+)"
)
SLURM_NODE_FAILURE = re.compile(r"\bNode failure on ([\w.-]+)")
# srun, for each task that a signal ended, with the signal's strsignal(3) text:
# "srun: error: node2: task 1: Killed", "srun: error: node1: tasks 0-1,3: Segmentation fault"
SRUN_TASK_SIGNALLED = re.compile(
    r"srun: error: ([\w.-]+): tasks? ([\d,-]+): (Killed|Terminated|Segmentation fault|Aborted"
    r"|Bus error|Illegal instruction|Floating point exception|Hangup|Interrupt)\b"
)
# What srun and slurmstepd print once the step is being ended (a cancel, --kill-on-bad-exit): a
# task reported ended by a signal after one of these was ended by it, not the cause
SRUN_STEP_ENDING = re.compile(
    r"\*\*\* (?:JOB|STEP) \S+ ON \S+ CANCELLED|srun: Job step aborted"
    r"|srun: forcing job termination|_step_signal: Terminating"
)

INFO_LINE = re.compile(r"NCCL INFO|^\[I\d{4} |^\[I ")
RANK_PREFIX = re.compile(r"^\[(?:rank|default)\d+\]:\s?")
TRACEBACK_HEADER = re.compile(r"^\s*(?:Original )?Traceback \(most recent call last\):")
EXCEPTION_LINE = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?::\s?(?P<message>.*))?$")
# launcher exceptions that only report that a rank failed; the rank's own traceback is the story
WRAPPER_EXCEPTIONS = ("ChildFailedError", "LaunchFailed", "FailedJobError")

DATA_ERROR = re.compile(
    r"No such file or directory|NoSuchKey|checksum|changed since validation", re.IGNORECASE
)
# ffjobs.data.index.DatasetChangedError: "dataset ROOT changed since validation: 1 removed
# (id_0002/01.jpg), 2 added (...); training refused ..."
DATASET_CHANGED = re.compile(r"changed since validation: ([^;]+);")
FIRST_NAMED = re.compile(r"\(([^,)]+)")
QUOTED = re.compile(r"'([^']+)'|\"([^\"]+)\"")
PATH_TOKEN = re.compile(
    r"s3://[^\s'\",;]+|(?:[\w.~-]*/)+[\w.-]+|\b[\w-]+\.[A-Za-z][A-Za-z0-9]{1,4}\b"
)
# a storage error as the exception line says it: ffjobs' own StorageError, or the OS's or S3's
STORAGE_ERROR = re.compile(
    r"\bStorageError\b|\[Errno (?:13|28|30|122)\]|\bAccessDenied\b|(?i:no space left on "
    r"device|disk quota exceeded|read-only file system|permission denied|\baccess denied\b)"
)
STORAGE_DETAIL = re.compile(r"(checkpoint (?:folder|store) .*)")
STORAGE_WHAT = (
    (re.compile(r"(?i)no space left on device|\[Errno 28\]"), "No space left on device (ENOSPC)"),
    (re.compile(r"(?i)disk quota exceeded|\[Errno 122\]"), "Disk quota exceeded (EDQUOT)"),
    (re.compile(r"(?i)read-only file system|\[Errno 30\]"), "Read-only file system (EROFS)"),
    (re.compile(r"(?i)permission denied|\[Errno 13\]"), "Permission denied (EACCES)"),
    (re.compile(r"(?i)AccessDenied|access denied"), "S3 access denied (AccessDenied)"),
)
CHECKPOINT_SUFFIXES = {".pt", ".pth", ".ckpt", ".safetensors"}
CONFIG_SUFFIXES = {".yaml", ".yml", ".toml", ".ini", ".cfg"}

# peers named by NCCL ("peer 10.0.0.2<45678>", "remote peer node2.cluster<47861>") and gloo
# ("[10.0.0.2]:14746"); a rank's own address is in its "Using eth0:10.0.0.1<0>" lines
PEER = re.compile(r"(?:peer|from) \[?([\w.:-]+?)\]?<\d+>|\[([\w.:-]+)\]:\d+")
OWN_ADDRESS = re.compile(r"(?:Bootstrap|NET/\w+|OOB).*?\b\w+:(\d+\.\d+\.\d+\.\d+)<\d+>")
