"""InfiniBand ports from sysfs (``<root>/class/infiniband/<dev>/ports/<n>/...``) and their checks."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path

from ffjobs.preflight.findings import Finding
from ffjobs.preflight.selectors import Selector

_RATE = re.compile(r"([\d.]+)\s*Gb/sec")


@dataclass(frozen=True)
class IbPort:
    device: str
    port: int
    state: str
    """Logical state without its number, e.g. ``ACTIVE``, ``DOWN``, ``INIT``."""
    phys_state: str
    """Physical state without its number, e.g. ``LinkUp``, ``Polling``, ``Disabled``."""
    rate_gbps: float | None
    link_layer: str
    """``InfiniBand`` or ``Ethernet`` (RoCE)."""

    @property
    def name(self) -> str:
        return f"{self.device}:{self.port}"

    def to_dict(self) -> dict:
        return asdict(self)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError:
        return ""


def _strip_number(text: str) -> str:
    """``"4: ACTIVE"`` -> ``"ACTIVE"`` (sysfs prefixes the enum value)."""
    return text.split(":", 1)[1].strip() if ":" in text else text


def read_ib_ports(sysfs_root: Path | str = "/sys") -> list[IbPort]:
    """All InfiniBand/RoCE ports under ``<sysfs_root>/class/infiniband``; empty when there is none."""
    base = Path(sysfs_root) / "class" / "infiniband"
    ports: list[IbPort] = []
    if not base.is_dir():
        return ports
    for device in sorted(base.iterdir()):
        port_dir = device / "ports"
        if not port_dir.is_dir():
            continue
        for port in sorted(port_dir.iterdir(), key=lambda p: (len(p.name), p.name)):
            if not port.name.isdigit():
                continue
            rate = _RATE.search(_read(port / "rate"))
            ports.append(
                IbPort(
                    device=device.name,
                    port=int(port.name),
                    state=_strip_number(_read(port / "state")),
                    phys_state=_strip_number(_read(port / "phys_state")),
                    rate_gbps=float(rate.group(1)) if rate else None,
                    link_layer=_read(port / "link_layer") or "InfiniBand",
                )
            )
    return ports


def check_ib_ports(
    ports: list[IbPort], hca: str | None, expected_rate_gbps: float | None, node: str
) -> list[Finding]:
    """Check the ports NCCL would use (``NCCL_IB_HCA`` or all) against the expected state and rate.

    ``hca`` is the raw ``NCCL_IB_HCA`` value (``None``: unset). With ``expected_rate_gbps`` set,
    IB is required: a selected port that is not ACTIVE/LinkUp or is slower fails; otherwise
    such ports are only warnings.
    """
    findings: list[Finding] = []
    selector = Selector.parse(hca) if hca else None
    devices = sorted({p.device for p in ports})
    if selector is not None and not selector.exclude:
        for entry in selector.entries:
            matched = [
                p
                for p in ports
                if entry.matches(p.device) and (entry.port is None or entry.port == p.port)
            ]
            if not matched:
                have = ", ".join(p.name for p in ports) or "none"
                findings.append(
                    Finding(
                        "FAIL",
                        "ib",
                        f"NCCL_IB_HCA entry {entry.text!r} names no InfiniBand device "
                        f"port on this node (have: {have}); fix NCCL_IB_HCA in the cluster profile",
                        node,
                    )
                )
    selected = [p for p in ports if selector is None or selector.selects(p.device, p.port)]
    required = expected_rate_gbps is not None
    if required and not selected:
        what = f"NCCL_IB_HCA={hca} selects none of" if hca else "no InfiniBand port among"
        findings.append(
            Finding(
                "FAIL",
                "ib",
                f"{what} the devices here ({', '.join(devices) or 'none found'}); "
                f"the profile expects IB at {expected_rate_gbps:g} Gb/s",
                node,
            )
        )
    level = "FAIL" if required else "WARN"
    for port in selected:
        if port.state != "ACTIVE" or port.phys_state not in ("LinkUp", ""):
            findings.append(
                Finding(
                    level,
                    "ib",
                    f"{port.name} is {port.state or 'unknown'}/"
                    f"{port.phys_state or 'unknown'}, expected ACTIVE/LinkUp; "
                    "check the cable and switch port or exclude this node",
                    node,
                )
            )
        elif required and (port.rate_gbps is None or port.rate_gbps < expected_rate_gbps):
            rate = f"{port.rate_gbps:g} Gb/s" if port.rate_gbps else "an unknown rate"
            findings.append(
                Finding(
                    "FAIL",
                    "ib",
                    f"{port.name} trained at {rate}, expected "
                    f"{expected_rate_gbps:g} Gb/s; reseat or replace the link or exclude this node",
                    node,
                )
            )
    return findings
