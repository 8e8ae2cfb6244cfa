"""The CPU time of every process of a run, Python or not (g++, Chromium, slurmd, MariaDB), from
the kernel's process accounting (acct(2), ``CONFIG_BSD_PROCESS_ACCT_V3``; root only).

    python dev/test-suite/process_accounting.py on FILE    # before the run
    python dev/test-suite/process_accounting.py off        # after it
    python dev/test-suite/process_accounting.py report FILE

The kernel appends one 64-byte record per process as it exits, named by the command of the
thread that exited last (a Python process may show as ``pt_gloo_runloop``, say). Processes
still running at ``off`` are missing.
"""

from __future__ import annotations

import collections
import ctypes
import struct
import sys
from pathlib import Path

RECORD = 64
AHZ = 100  # the accounting clock: comp_t times are in 1/100 s


def switch(path: str | None) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if path is not None:
        Path(path).touch()
    if libc.acct(path.encode() if path else None) != 0:
        raise OSError(ctypes.get_errno(), f"acct({path})")


def _comp(value: int) -> int:
    """comp_t: a 13-bit mantissa and a 3-bit base-8 exponent."""
    return (value & 0x1FFF) << (3 * (value >> 13))


def report(path: str, top: int = 40) -> None:
    data = Path(path).read_bytes()
    by_command: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0])
    for offset in range(0, len(data) - RECORD + 1, RECORD):
        record = data[offset : offset + RECORD]
        utime, stime = struct.unpack("<2H", record[32:36])
        command = record[48:64].split(b"\0")[0].decode(errors="replace")
        row = by_command[command]
        row[0] += (_comp(utime) + _comp(stime)) / AHZ
        row[1] += _comp(stime) / AHZ
        row[2] += 1
    total = sum(row[0] for row in by_command.values())
    print(f"{len(data) // RECORD} processes, {total:.0f} CPU-s")
    print(f"{'CPU-s':>8} {'system':>7} {'procs':>6} command")
    for command, (cpu, system, count) in sorted(by_command.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"{cpu:8.1f} {system:7.1f} {count:6d} {command}")


if __name__ == "__main__":
    action, *rest = sys.argv[1:]
    if action == "on":
        switch(rest[0])
    elif action == "off":
        switch(None)
    else:
        report(rest[0])
