"""Read what NCCL chose from its ``NCCL_DEBUG=INFO`` output: channel transports, network, warnings.

NCCL prefixes each line with ``host:pid:tid [cudaDev]``; the ``ncclCommInitRankConfig`` line ties
a rank to that host, so a channel ``0[0] -> 1[1]`` can be classified intra- or inter-node.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

_PREFIX = r"(?:\[[^\]]*\]\s+)?(?P<host>[^\s:]+):(?P<pid>\d+):\d+\s+\[(?P<dev>\d+)\]\s+"
_INIT_RANK = re.compile(
    _PREFIX + r"NCCL INFO ncclCommInitRank\w*\s.*?\brank (?P<rank>\d+) "
    r"nranks (?P<nranks>\d+)\b.*?busId (?P<bus>[0-9a-fA-F]+)"
)
_CHANNEL = re.compile(
    _PREFIX + r"NCCL INFO Channel (?P<channel>\d+)(?:/\d+)? : "
    r"(?P<src>\d+)\[\d+\] -> (?P<dst>\d+)\[\d+\](?: \[(?P<dir>\w+)\])? "
    r"via (?P<via>\S+)"
)
_NETWORK = re.compile(_PREFIX + r"NCCL INFO Using network (?P<net>\S+)")
_VERSION = re.compile(_PREFIX + r"NCCL INFO NCCL version (?P<version>\S+)")
_WARN = re.compile(r"(?P<prefix>.*?)NCCL WARN (?P<message>.*)$")
_WARN_HOST = re.compile(_PREFIX)


@dataclass(frozen=True)
class Channel:
    """One channel connection NCCL set up between two ranks."""

    channel: int
    src: int
    dst: int
    via: str
    """Transport as NCCL prints it, e.g. ``P2P/CUMEM``, ``SHM/direct/direct``, ``NET/IB/0/GDRDMA``."""

    @property
    def kind(self) -> str:
        """Transport family: ``P2P``, ``SHM``, ``NET/IB``, ``NET/Socket``, ``NVLS``, ... ."""
        parts = self.via.split("/")
        if parts[0] == "NET" and len(parts) > 1:
            return f"NET/{parts[1]}"
        return parts[0]

    @property
    def gdrdma(self) -> bool:
        return "GDRDMA" in self.via.split("/")


@dataclass
class NcclLog:
    """Everything the preflight needs from one or more NCCL INFO logs."""

    rank_hosts: dict[int, str] = field(default_factory=dict)
    nranks: int | None = None
    channels: set[Channel] = field(default_factory=set)
    networks: dict[str, set[str]] = field(default_factory=dict)
    """Network plugin chosen per host (``Socket``, ``IB``)."""
    versions: dict[str, set[str]] = field(default_factory=dict)
    """NCCL library version per host."""
    warnings: list[tuple[str | None, str]] = field(default_factory=list)
    """``(host or None, message)`` for each ``NCCL WARN`` line, in order, without repeats."""

    def channel_scope(self, channel: Channel, default: str = "intra") -> str:
        """``intra`` when both ranks are on one host, ``inter`` otherwise; ``default`` if unknown."""
        src, dst = self.rank_hosts.get(channel.src), self.rank_hosts.get(channel.dst)
        if src is None or dst is None:
            return default
        return "intra" if src == dst else "inter"

    def transports(self, scope: str, default_scope: str = "intra") -> dict[str, set[str]]:
        """Transport family -> the exact ``via`` strings seen, for channels of one scope."""
        found: dict[str, set[str]] = {}
        for channel in self.channels:
            if self.channel_scope(channel, default_scope) == scope:
                found.setdefault(channel.kind, set()).add(channel.via)
        return found

    def hosts_using(self, kind: str, scope: str, default_scope: str = "intra") -> list[str]:
        """Hosts whose ranks have a channel of transport family ``kind`` in ``scope``."""
        hosts = set()
        for channel in self.channels:
            if channel.kind == kind and self.channel_scope(channel, default_scope) == scope:
                for rank in (channel.src, channel.dst):
                    if rank in self.rank_hosts:
                        hosts.add(self.rank_hosts[rank])
        return sorted(hosts)

    def to_dict(self) -> dict:
        return {
            "rank_hosts": {str(k): v for k, v in sorted(self.rank_hosts.items())},
            "nranks": self.nranks,
            "channels": len(self.channels),
            "transports": {
                scope: {k: sorted(v) for k, v in self.transports(scope).items()}
                for scope in ("intra", "inter")
            },
            "networks": {h: sorted(n) for h, n in self.networks.items()},
            "versions": {h: sorted(v) for h, v in self.versions.items()},
            "warnings": [{"host": h, "message": m} for h, m in self.warnings],
        }


def parse_nccl_log(lines: Iterable[str], into: NcclLog | None = None) -> NcclLog:
    """Parse NCCL INFO/WARN lines (any mix of ranks and other output) into an :class:`NcclLog`."""
    log = into if into is not None else NcclLog()
    seen_warnings = set(log.warnings)
    for line in lines:
        line = line.rstrip("\n")
        if "NCCL" not in line:
            continue
        if m := _CHANNEL.search(line):
            log.channels.add(Channel(int(m["channel"]), int(m["src"]), int(m["dst"]), m["via"]))
        elif m := _INIT_RANK.search(line):
            log.rank_hosts[int(m["rank"])] = m["host"]
            log.nranks = int(m["nranks"])
        elif m := _NETWORK.search(line):
            log.networks.setdefault(m["host"], set()).add(m["net"])
        elif m := _VERSION.search(line):
            log.versions.setdefault(m["host"], set()).add(m["version"])
        elif m := _WARN.search(line):
            host_match = _WARN_HOST.search(m["prefix"])
            entry = (host_match["host"] if host_match else None, m["message"].strip())
            if entry not in seen_warnings:
                seen_warnings.add(entry)
                log.warnings.append(entry)
    return log


def parse_nccl_logs(paths: Iterable[Path]) -> NcclLog:
    """Parse several per-rank NCCL debug files into one :class:`NcclLog`."""
    log = NcclLog()
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as handle:
            parse_nccl_log(handle, into=log)
    return log
