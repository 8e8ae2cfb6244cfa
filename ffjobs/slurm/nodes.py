"""SLURM node names: expand a compressed node list, find the address a node answers on, and the
port a job's ranks meet on (with :func:`export_task_rendezvous`, what a submitit task sets).

One parser for every node list ffjobs reads (``SLURM_JOB_NODELIST``, ``sacct``'s ``NodeList``),
pure Python so it works off the cluster and in tests, with the forms ``scontrol show hostnames``
accepts: comma lists, ranges and single numbers in brackets, zero padding as written, several
bracket groups in one name and text after a bracket (``rack[1-2]-gpu[07-08]-ib``).
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
from typing import Any

RENDEZVOUS_PORTS = (20000, 32768)
"""Where a job's rendezvous port comes from: below Linux's default ephemeral range
(``net.ipv4.ip_local_port_range``, 32768-60999), from which the kernel hands out the local ports
of outgoing connections, srun's own among them: a job that listened on a port derived from its
id in that range failed when srun had just taken the same port on its first node."""

# one bracket group of a name: ``[01-03,7]``
_BRACKET = re.compile(r"\[([^\[\]]*)\]")


class NodeListError(ValueError):
    """A node list that is not in SLURM's compressed form."""


def _split_top_level(nodelist: str) -> list[str]:
    """Split at commas (and whitespace) that are outside brackets."""
    items, depth, current = [], 0, []
    for char in nodelist:
        if char == "[":
            depth += 1
            if depth > 1:
                raise NodeListError(f"node list {nodelist!r}: nested '['")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise NodeListError(f"node list {nodelist!r}: ']' without '['")
        if depth == 0 and (char == "," or char.isspace()):
            items.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth:
        raise NodeListError(f"node list {nodelist!r}: '[' without ']'")
    items.append("".join(current))
    return [item for item in items if item]


def _expand_range(group: str, nodelist: str) -> list[str]:
    """``01-03,7`` -> ``["01", "02", "03", "7"]``; the width of each low bound is kept."""
    numbers: list[str] = []
    for part in group.split(","):
        low, dash, high = part.strip().partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise NodeListError(f"node list {nodelist!r}: bad range {part!r} in [{group}]")
        if not dash:
            numbers.append(low)
            continue
        if int(high) < int(low):
            raise NodeListError(f"node list {nodelist!r}: range {part!r} runs backwards")
        width = len(low)  # zero padding as written: gpu[08-10] -> gpu08, gpu09, gpu10
        numbers.extend(f"{i:0{width}d}" for i in range(int(low), int(high) + 1))
    return numbers


def _expand_item(item: str, nodelist: str) -> list[str]:
    """One name with zero or more bracket groups; the first group varies slowest."""
    match = _BRACKET.search(item)
    if match is None:
        if "]" in item:
            raise NodeListError(f"node list {nodelist!r}: ']' without '['")
        return [item]
    head, tail = item[: match.start()], item[match.end() :]
    rests = _expand_item(tail, nodelist)
    return [head + number + rest for number in _expand_range(match[1], nodelist) for rest in rests]


def expand_nodelist(nodelist: str) -> list[str]:
    """Every node of a SLURM node list, in order: ``node[1-3,7],gpu-a[01-02]`` -> 6 names.

    An empty list gives ``[]``; a malformed one raises :class:`NodeListError` naming it.
    """
    names: list[str] = []
    for item in _split_top_level(nodelist.strip()):
        names.extend(_expand_item(item, nodelist))
    return names


def first_node(nodelist: str) -> str:
    """The first node of a node list (the rendezvous host of a job)."""
    names = expand_nodelist(nodelist)
    if not names:
        raise NodeListError(f"node list {nodelist!r} names no node")
    return names[0]


def node_address(node: str) -> str:
    """``node`` if it resolves, else its SLURM ``NodeAddr`` (node names need not be hostnames)."""
    try:
        socket.gethostbyname(node)
        return node
    except OSError:
        pass
    try:
        out = subprocess.run(
            ["scontrol", "show", "node", node, "-o"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return node
    for field in out.split():
        if field.startswith("NodeAddr="):
            return field.split("=", 1)[1]
    return node


def job_port(job_id: str | int) -> int:
    """The port job ``job_id``'s ranks meet on at its first node: the same on every node
    without talking, different for jobs whose ids differ by less than the range's width
    (array tasks, ``123_4``, count by all their digits), never an ephemeral port."""
    low, high = RENDEZVOUS_PORTS
    digits = re.sub(r"\D", "", str(job_id))[-9:] or "0"
    return low + int(digits) % (high - low)


def export_task_rendezvous() -> Any:
    """In a task of a submitit job: export torch's rank variables (``RANK``, ``WORLD_SIZE``,
    ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``) with the job's own :func:`job_port`
    (submitit's is random in 20000-60000, the ephemeral range included) and the address the
    first node answers on; returns submitit's ``TorchDistributedEnvironment``."""
    from submitit.helpers import JobEnvironment, TorchDistributedEnvironment

    os.environ["MASTER_PORT"] = str(job_port(JobEnvironment().job_id))  # submitit keeps it
    env = TorchDistributedEnvironment().export(set_cuda_visible_devices=False, overwrite=True)
    os.environ["MASTER_ADDR"] = node_address(env.master_addr)
    return env
