"""Fault drills on a mini-cluster node's link to the bridge, through ``infra/local/link.sh``.

The context managers always restore the link, even when the body fails::

    with cut_link("node2"):
        ...  # node2 unreachable from the host and the other nodes
    with throttled_link("node2", "8mbit"):
        ...  # node2's traffic, both ways, limited to 8 Mbit/s
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LINK_SCRIPT = Path(__file__).resolve().parents[2] / "infra" / "local" / "link.sh"
DEFAULT_RATE = "8mbit"


def _link(*args: str) -> None:
    result = subprocess.run(
        ["bash", str(LINK_SCRIPT), *args], capture_output=True, text=True, timeout=30
    )
    if result.returncode != 0:
        raise RuntimeError(f"link.sh {' '.join(args)} failed: {result.stderr.strip()}")


def cut(node: str) -> None:
    """Take ``node``'s link down: nothing reaches it or leaves it until :func:`restore`."""
    _link("cut", node)


def restore(node: str) -> None:
    _link("restore", node)


def throttle(node: str, rate: str = DEFAULT_RATE) -> None:
    """Limit ``node``'s traffic in both directions to ``rate`` (tc syntax: ``8mbit``)."""
    _link("throttle", rate, node)


def unthrottle(node: str) -> None:
    _link("unthrottle", node)


@contextmanager
def cut_link(node: str) -> Iterator[None]:
    try:  # restore and unthrottle are idempotent: safe even if the change itself half failed
        cut(node)
        yield
    finally:
        restore(node)


@contextmanager
def throttled_link(node: str, rate: str = DEFAULT_RATE) -> Iterator[None]:
    try:
        throttle(node, rate)
        yield
    finally:
        unthrottle(node)
