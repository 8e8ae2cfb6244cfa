"""Judge the measurements against the cluster profile: each check returns findings."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

from ffjobs.config.preflight import PreflightConfig
from ffjobs.preflight.findings import Finding
from ffjobs.preflight.nccl_log import NcclLog
from ffjobs.preflight.probe import VERSION_KEYS

MIB = 2**20

_TRANSPORT_HINTS = {
    "SHM": "GPU peer-to-peer is off or unavailable (NCCL_P2P_DISABLE? no NVLink/PCIe P2P?); "
    "traffic goes through host shared memory",
    "NET/Socket": "GPUs talk over TCP sockets (NCCL_P2P_DISABLE/NCCL_SHM_DISABLE? IB down or "
    "not found?)",
    "NET/IB": "traffic goes through the InfiniBand NIC",
    "P2P": "direct GPU peer-to-peer",
}


def check_versions(probes: Mapping[str, Mapping[str, Any]]) -> list[Finding]:
    """Version skew across nodes: NCCL or torch skew fails, CUDA or driver skew warns."""
    findings = []
    for key in VERSION_KEYS:
        by_value: dict[str, list[str]] = {}
        for node, probe in probes.items():
            by_value.setdefault(str(probe.get(key)), []).append(node)
        if len(by_value) < 2:
            continue
        majority = max(by_value, key=lambda v: len(by_value[v]))
        level = "FAIL" if key in ("nccl", "torch") else "WARN"
        for value, nodes in by_value.items():
            if value != majority:
                for node in nodes:
                    findings.append(
                        Finding(
                            level,
                            "versions",
                            f"{key} {value} differs from {majority} on the other nodes",
                            node,
                        )
                    )
    return findings


def check_transports(log: NcclLog, cfg: PreflightConfig, multi_node: bool) -> list[Finding]:
    """Compare the channel transports NCCL chose with those the profile expects."""
    findings = []
    if not log.channels:
        if cfg.expected_intra_node or cfg.expected_inter_node:
            findings.append(
                Finding(
                    "WARN",
                    "transport",
                    "no NCCL channel lines found in the "
                    "NCCL_DEBUG=INFO logs; transports not verified",
                )
            )
        return findings
    # Without host information every channel counts as intra-node on one node, inter otherwise.
    default_scope = "inter" if multi_node else "intra"
    for scope, expected in (("intra", cfg.expected_intra_node), ("inter", cfg.expected_inter_node)):
        if not expected:
            continue
        for kind, vias in sorted(log.transports(scope, default_scope).items()):
            if kind in expected:
                continue
            hosts = log.hosts_using(kind, scope, default_scope)
            hint = _TRANSPORT_HINTS.get(kind, "unexpected transport")
            findings.append(
                Finding(
                    "FAIL",
                    "transport",
                    f"{scope}-node channels use {kind} "
                    f"({', '.join(sorted(vias))}), expected {' or '.join(expected)}: {hint}",
                    ",".join(hosts) or None,
                )
            )
    if cfg.require_gdrdma:
        no_gdr = sorted({c.via for c in log.channels if c.kind == "NET/IB" and not c.gdrdma})
        if no_gdr:
            findings.append(
                Finding(
                    "FAIL",
                    "transport",
                    f"IB channels without GPUDirect RDMA "
                    f"({', '.join(no_gdr)}); check nvidia-peermem / dma-buf",
                )
            )
    if multi_node and "NET/IB" in cfg.expected_inter_node:
        for host, nets in sorted(log.networks.items()):
            if "IB" not in nets:
                findings.append(
                    Finding(
                        "FAIL",
                        "transport",
                        f"NCCL chose network {'/'.join(sorted(nets))}, expected IB",
                        host,
                    )
                )
    for host, message in log.warnings:
        findings.append(Finding("WARN", "nccl", f"NCCL WARN {message}", host))
    return findings


def check_bandwidth(sweep: list[Mapping[str, Any]], cfg: PreflightConfig) -> list[Finding]:
    findings = []
    by_size = {round(r["size_bytes"] / MIB, 6): r for r in sweep}
    for key, minimum in sorted(cfg.min_busbw_gbps.items(), key=lambda kv: float(kv[0])):
        result = by_size.get(round(float(key), 6))
        if result is None:
            findings.append(Finding("WARN", "bandwidth", f"{key} MiB was not measured"))
        elif result["busbw_gbps"] < minimum:
            findings.append(
                Finding(
                    "FAIL",
                    "bandwidth",
                    f"busbw at {key} MiB is {result['busbw_gbps']:.1f} GB/s, "
                    f"below the profile minimum {minimum:g} GB/s",
                )
            )
    return findings


def suspect_nodes(
    group_checks: Mapping[str, Mapping[str, Any]], ratio: float
) -> tuple[list[str], list[Finding]]:
    """Nodes whose own all-reduce is far below the median node's, or every node pair they are in
    far below the best pair."""
    findings: list[Finding] = []
    suspects: set[str] = set()
    nodes = {
        k.split(":", 1)[1]: v["busbw_gbps"]
        for k, v in group_checks.items()
        if k.startswith("node:")
    }
    if len(nodes) >= 2:
        median = statistics.median(nodes.values())
        for node, busbw in sorted(nodes.items()):
            if busbw < ratio * median:
                suspects.add(node)
                findings.append(
                    Finding(
                        "FAIL",
                        "slow-node",
                        f"intra-node busbw {busbw:.1f} GB/s "
                        f"is below {ratio:g} x the median {median:.1f} GB/s",
                        node,
                    )
                )
    pairs = {
        tuple(k.split(":", 1)[1].split("+")): v["busbw_gbps"]
        for k, v in group_checks.items()
        if k.startswith("pair:")
    }
    if len(pairs) >= 3:
        # against the best pair, not the median: with three nodes and one bad link, two of the
        # three pairs are slow and the median is a slow pair
        best = max(pairs.values())
        slow = {pair for pair, busbw in pairs.items() if busbw < ratio * best}
        members = {n for pair in pairs for n in pair}
        for node in sorted(members):
            mine = [pair for pair in pairs if node in pair]
            if mine and all(pair in slow for pair in mine):
                suspects.add(node)
                shown = ", ".join(f"{'+'.join(p)} {pairs[p]:.1f}" for p in mine)
                findings.append(
                    Finding(
                        "FAIL",
                        "slow-link",
                        f"every node pair with this node is "
                        f"slow ({shown} GB/s; best pair {best:.1f})",
                        node,
                    )
                )
    return sorted(suspects), findings
