"""Configuration of the NCCL/InfiniBand preflight: what to measure and what passes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

TRANSPORT_KINDS = ("P2P", "SHM", "NET/IB", "NET/Socket", "NET", "COLLNET", "NVLS")


@dataclass
class PreflightConfig:
    enabled: bool = True
    """Run the preflight before training (the pipeline skips it when false)."""
    backend: Literal["auto", "nccl", "gloo"] = "auto"
    """``auto``: NCCL when GPUs are visible, gloo on CPU."""
    sizes_mib: list[float] = field(default_factory=lambda: [1.0, 16.0, 64.0])
    """All-reduce message sizes to sweep, in MiB."""
    warmup_iters: int = field(default=2, metadata={"ge": 0})
    """Untimed all-reduces per size before timing (connection setup, allocator, clocks)."""
    min_iters: int = field(default=3, metadata={"ge": 1})
    """Fewest timed all-reduces per size."""
    max_iters: int = field(default=200, metadata={"ge": 1})
    """Most timed all-reduces per size (bounds the small sizes)."""
    target_time_s: float = field(default=0.25, metadata={"gt": 0.0, "le": 10.0})
    """Timed wall-clock per size; the iteration count adapts to reach it."""
    min_busbw_gbps: dict[str, float] = field(default_factory=dict)
    """Minimum bus bandwidth (GB/s) per message size in MiB, e.g. {"1024": 300}."""
    expected_intra_node: list[str] = field(default_factory=list)
    """Transports allowed between GPUs of one node, e.g. ["P2P"]; empty: not checked."""
    expected_inter_node: list[str] = field(default_factory=list)
    """Transports allowed between nodes, e.g. ["NET/IB"]; empty: not checked."""
    require_gdrdma: bool = False
    """Inter-node IB channels must use GPUDirect RDMA (``/GDRDMA`` in the channel line)."""
    expected_ib_rate_gbps: float | None = field(default=None, metadata={"gt": 0.0})
    """Every selected InfiniBand port must be ACTIVE at this rate or faster; null: IB not checked."""
    allow_nvls: bool = True
    """False: warn unless ``NCCL_NVLS_ENABLE=0`` (NVLink multicast off)."""
    pair_size_mib: float = field(default=16.0, metadata={"gt": 0.0})
    """Message size of the per-node and node-pair checks that single out a slow node."""
    suspect_ratio: float = field(default=0.7, metadata={"gt": 0.0, "le": 1.0})
    """A node below this fraction of the median node, or a node every pair of which is below
    this fraction of the best pair, is suspect."""
    nodes: int | None = field(default=None, metadata={"ge": 1})
    """Nodes the preflight job spans; null: the training job's ``slurm.nodes``. More nodes than
    training needs let a failing node be named and left out while the rest still hold the job."""
    probe_topology: bool = True
    """Run ``nvidia-smi topo -m`` on each node (skipped silently when nvidia-smi is absent)."""
    timeout_s: float = field(default=120.0, metadata={"gt": 0.0})
    """Limit for process-group setup and each collective."""

    def __post_init__(self) -> None:
        if not self.sizes_mib or any(s <= 0 for s in self.sizes_mib):
            raise ValueError(
                f"sizes_mib: must be a non-empty list of sizes > 0, got {self.sizes_mib}"
            )
        if self.min_iters > self.max_iters:
            raise ValueError("min_iters: must be <= max_iters")
        for key in self.min_busbw_gbps:
            try:
                size = float(key)
            except ValueError:
                raise ValueError(f"min_busbw_gbps: key {key!r} is not a size in MiB") from None
            if size not in self.sizes_mib:
                raise ValueError(
                    f"min_busbw_gbps: size {key} MiB is not in sizes_mib {self.sizes_mib}; "
                    "add it there"
                )
        for name in ("expected_intra_node", "expected_inter_node"):
            for kind in getattr(self, name):
                if kind not in TRANSPORT_KINDS:
                    raise ValueError(
                        f"{name}: unknown transport {kind!r}; use {', '.join(TRANSPORT_KINDS)}"
                    )
