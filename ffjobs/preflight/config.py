"""Configuration of the NCCL/InfiniBand preflight: what to measure and what passes."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class PreflightConfig:
    enabled: bool = True
    sizes_mib: list[float] = field(default_factory=lambda: [1.0, 16.0, 64.0])
    """All-reduce message sizes to sweep, in MiB."""
    warmup_iters: int = field(default=2, metadata={"ge": 0})
    iters: int = field(default=5, metadata={"ge": 1})
    min_busbw_gbps: dict[str, float] = field(default_factory=dict)
    """Minimum bus bandwidth (GB/s) per message size in MiB, e.g. {"1024": 300}."""
    expected_intra_node: list[str] = field(default_factory=list)
    """Transports allowed between GPUs of one node, e.g. ["P2P"]; empty: not checked."""
    expected_inter_node: list[str] = field(default_factory=list)
    """Transports allowed between nodes, e.g. ["NET/IB"]; empty: not checked."""
    expected_ib_rate_gbps: float | None = None
    timeout_s: float = field(default=120.0, metadata={"gt": 0.0})
