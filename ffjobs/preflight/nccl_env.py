"""NCCL/gloo environment sanity, checked on every node before any collective runs."""

from __future__ import annotations

import socket
from collections.abc import Mapping
from pathlib import Path

from ffjobs.preflight.findings import Finding
from ffjobs.preflight.selectors import Selector

IB_TIMEOUT_RANGE = (1, 31)
"""NCCL_IB_TIMEOUT is an exponent: 4.096 us * 2**value; NCCL accepts 1..31 (default 20)."""


def list_interfaces(sysfs_root: Path | str = "/sys") -> list[str]:
    """Network interface names: ``<sysfs_root>/class/net`` when present, else the kernel's index."""
    net = Path(sysfs_root) / "class" / "net"
    if net.is_dir():
        return sorted(p.name for p in net.iterdir())
    return sorted(name for _, name in socket.if_nameindex())


def check_socket_ifname(
    variable: str, spec: str, interfaces: list[str], node: str
) -> list[Finding]:
    """``NCCL_SOCKET_IFNAME`` must leave at least one existing interface; say which entry is wrong."""
    selector = Selector.parse(spec)
    chosen = [name for name in interfaces if selector.selects(name)]
    have = ", ".join(interfaces) or "none"
    if not chosen:
        return [
            Finding(
                "FAIL",
                "env",
                f"{variable}={spec} matches no network interface on this "
                f"node (have: {have}); set it to an existing interface or unset it",
                node,
            )
        ]
    findings = []
    if not selector.exclude:
        for entry in selector.entries:
            if not any(entry.matches(name) for name in interfaces):
                findings.append(
                    Finding(
                        "WARN",
                        "env",
                        f"{variable} entry {entry.text!r} matches "
                        f"no interface on this node (have: {have})",
                        node,
                    )
                )
    return findings


def check_gloo_ifname(spec: str, interfaces: list[str], node: str) -> list[Finding]:
    """gloo takes exact interface names (comma list), no prefixes."""
    missing = [
        name for name in (s.strip() for s in spec.split(",")) if name and name not in interfaces
    ]
    if missing:
        return [
            Finding(
                "FAIL",
                "env",
                f"GLOO_SOCKET_IFNAME={spec}: no interface "
                f"{', '.join(missing)} on this node (have: {', '.join(interfaces)}); "
                "set it to an existing interface or unset it",
                node,
            )
        ]
    return []


def check_ib_timeout(value: str, node: str) -> list[Finding]:
    low, high = IB_TIMEOUT_RANGE
    try:
        number = int(value)
    except ValueError:
        number = None
    if number is None or not low <= number <= high:
        return [
            Finding(
                "FAIL",
                "env",
                f"NCCL_IB_TIMEOUT={value} is outside {low}..{high} "
                "(exponent: 4.096 us * 2^value; NCCL default 20); fix or unset it",
                node,
            )
        ]
    return []


def check_nvls(value: str | None, allow_nvls: bool, node: str) -> list[Finding]:
    """Warn when NVLink multicast (NVLS) may be used where the cluster profile forbids it."""
    if allow_nvls or (value is not None and value.strip() == "0"):
        return []
    shown = f"NCCL_NVLS_ENABLE={value}" if value is not None else "NCCL_NVLS_ENABLE is unset"
    return [
        Finding(
            "WARN",
            "env",
            f"{shown} but this profile forbids NVLink multicast; export NCCL_NVLS_ENABLE=0",
            node,
        )
    ]


def check_environment(
    env: Mapping[str, str], interfaces: list[str], node: str, allow_nvls: bool = True
) -> list[Finding]:
    """All environment checks of one node; any FAIL here stops the preflight before collectives."""
    findings: list[Finding] = []
    if env.get("NCCL_SOCKET_IFNAME"):
        findings += check_socket_ifname(
            "NCCL_SOCKET_IFNAME", env["NCCL_SOCKET_IFNAME"], interfaces, node
        )
    if env.get("GLOO_SOCKET_IFNAME"):
        findings += check_gloo_ifname(env["GLOO_SOCKET_IFNAME"], interfaces, node)
    if env.get("NCCL_IB_TIMEOUT"):
        findings += check_ib_timeout(env["NCCL_IB_TIMEOUT"], node)
    findings += check_nvls(env.get("NCCL_NVLS_ENABLE"), allow_nvls, node)
    return findings
