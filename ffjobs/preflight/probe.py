"""What one node has: library and driver versions, GPUs, GPU links, IB ports, interfaces."""

from __future__ import annotations

import os
import platform
import re
import socket
from pathlib import Path
from typing import Any

from ffjobs.preflight.ib import read_ib_ports
from ffjobs.preflight.nccl_env import list_interfaces
from ffjobs.preflight.nvidia_smi import gpu_links, parse_topo_matrix, run_nvidia_smi

_DRIVER = re.compile(r"Kernel Module\s+(?:for\s+\S+\s+)?([\d.]+)")


def node_name() -> str:
    """The scheduler's node name when under SLURM (several slurmd may share one host), else host."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def driver_version(proc_root: Path | str = "/proc") -> str | None:
    """NVIDIA kernel driver version from ``/proc/driver/nvidia/version``; None without a driver."""
    try:
        text = (Path(proc_root) / "driver" / "nvidia" / "version").read_text(encoding="utf-8")
    except OSError:
        return None
    match = _DRIVER.search(text)
    return match.group(1) if match else None


def probe_topology() -> dict[str, Any]:
    """GPU link matrix from ``nvidia-smi topo -m`` (empty without nvidia-smi); can take ~1 s."""
    text = run_nvidia_smi("topo", "-m")
    matrix = parse_topo_matrix(text) if text else {}
    return {"gpu_links": sorted(gpu_links(matrix)), "topology": matrix}


def probe_node(sysfs_root: Path | str = "/sys") -> dict[str, Any]:
    """Probe this node; cheap (no collectives, no subprocess), so it runs before rendezvous."""
    import torch

    nccl = None
    if torch.cuda.is_available():
        try:
            nccl = ".".join(str(v) for v in torch.cuda.nccl.version())
        except (AttributeError, RuntimeError):
            nccl = None
    gpus = []
    if torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            gpus.append(
                {
                    "index": index,
                    "name": props.name,
                    "memory_gib": round(props.total_memory / 2**30, 1),
                }
            )
    return {
        "node": node_name(),
        "hostname": socket.gethostname(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": nccl,
        "driver": driver_version(),
        "gpus": gpus,
        "gpu_links": [],
        "topology": {},
        "ib_ports": [port.to_dict() for port in read_ib_ports(sysfs_root)],
        "interfaces": list_interfaces(sysfs_root),
    }


VERSION_KEYS = ("torch", "cuda", "nccl", "driver")
