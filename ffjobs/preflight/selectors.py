"""NCCL's interface/device list syntax (``NCCL_SOCKET_IFNAME``, ``NCCL_IB_HCA``).

A comma list of prefixes; a leading ``^`` excludes instead of selecting; an entry starting with
``=`` must match exactly; HCA entries may carry ``:port``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SelectorEntry:
    text: str
    name: str
    exact: bool
    port: int | None = None

    def matches(self, candidate: str) -> bool:
        return candidate == self.name if self.exact else candidate.startswith(self.name)


@dataclass(frozen=True)
class Selector:
    exclude: bool
    entries: tuple[SelectorEntry, ...]

    @classmethod
    def parse(cls, spec: str, with_ports: bool = False) -> Selector:
        """Parse a spec such as ``^docker,lo`` or ``=mlx5_0:1,mlx5_1:1``."""
        spec = spec.strip()
        exclude = spec.startswith("^")
        if exclude:
            spec = spec[1:]
        # NCCL accepts a single '=' before the list to make every entry exact.
        all_exact = spec.startswith("=")
        entries = []
        for raw in spec.split(","):
            text = raw.strip()
            if not text:
                continue
            exact = all_exact or text.startswith("=")
            name = text.lstrip("=")
            port = None
            if with_ports or ":" in name:
                base, sep, port_text = name.partition(":")
                if sep and port_text.isdigit():
                    name, port = base, int(port_text)
            entries.append(SelectorEntry(text, name, exact, port))
        return cls(exclude, tuple(entries))

    def selects(self, name: str, port: int | None = None) -> bool:
        """Whether NCCL would use interface/device ``name`` (and ``port``) under this spec."""
        hit = any(
            e.matches(name) and (e.port is None or port is None or e.port == port)
            for e in self.entries
        )
        return not hit if self.exclude else hit
