"""CPU time of one local launch's processes: the tests' tiny model, two ranks, four steps, random
data. Run from a checkout's root, at two commits side by side, to compare how ranks start:

    FFJOBS_TEST_RUN_DIR=$(mktemp -d) PYTHONPATH=$PWD python dev/test-suite/launch_cpu.py [N]

Prints, for each of N launches (default 3), the wall time and the CPU seconds of every process
the launch started (the ranks, their parent, the checkpoint writer), from ``RUSAGE_CHILDREN``.
"""

from __future__ import annotations

import resource
import sys
import tempfile
import time
from pathlib import Path

from ffjobs.train.launch import launch_local
from tests.train.helpers import tiny_config


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 3):
        config = tiny_config(Path(tempfile.mkdtemp()))
        cpu, wall = children_cpu(), time.monotonic()
        launch_local(config, 2, data="memory", quiet_stdout=True)
        print(f"wall {time.monotonic() - wall:.1f} s, launch CPU {children_cpu() - cpu:.2f} s")


if __name__ == "__main__":
    main()
