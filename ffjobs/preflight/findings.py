"""Findings and the verdict they add up to."""

from __future__ import annotations

from dataclasses import asdict, dataclass

LEVELS = ("PASS", "WARN", "FAIL")


@dataclass(frozen=True)
class Finding:
    """One observation with its weight: ``FAIL`` blocks training, ``WARN`` is worth a look."""

    level: str
    check: str
    """Which check produced it: ``env``, ``ib``, ``versions``, ``transport``, ``bandwidth``, ..."""
    message: str
    node: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    def line(self) -> str:
        where = f" [{self.node}]" if self.node else ""
        return f"{self.level} {self.check}{where}: {self.message}"


def verdict_of(findings: list[Finding]) -> str:
    """The worst level among the findings; ``PASS`` when none is WARN or FAIL."""
    worst = 0
    for finding in findings:
        if finding.level in LEVELS:
            worst = max(worst, LEVELS.index(finding.level))
    return LEVELS[worst]
