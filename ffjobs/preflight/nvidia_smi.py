"""Parse ``nvidia-smi`` outputs: the GPU link matrix (``topo -m``) and the CSV GPU query."""

from __future__ import annotations

import re
import shutil
import subprocess

QUERY_FIELDS = "index,name,driver_version,memory.total,pci.bus_id"


def parse_topo_matrix(text: str) -> dict[str, dict[str, str]]:
    """``nvidia-smi topo -m`` -> ``{"GPU0": {"GPU1": "NV18"}, ...}`` (GPU and NIC rows only)."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return {}
    header = lines[0].split("\t")
    columns = [c.strip() for c in header if re.fullmatch(r"\s*(GPU|NIC|mlx)\w*\s*", c)]
    matrix: dict[str, dict[str, str]] = {}
    for line in lines[1:]:
        cells = [c.strip() for c in line.split("\t")]
        if not cells or not re.fullmatch(r"(GPU|NIC)\d+", cells[0]):
            continue
        values = cells[1 : 1 + len(columns)]
        matrix[cells[0]] = {
            col: val for col, val in zip(columns, values, strict=False) if col != cells[0]
        }
    return matrix


def gpu_links(matrix: dict[str, dict[str, str]]) -> set[str]:
    """Distinct link kinds between GPUs, e.g. ``{"NV18"}`` or ``{"SYS", "NODE"}``."""
    return {
        link
        for row, cols in matrix.items()
        if row.startswith("GPU")
        for col, link in cols.items()
        if col.startswith("GPU")
    }


def run_nvidia_smi(*args: str, timeout_s: float = 10.0) -> str | None:
    """Output of ``nvidia-smi args...``, or None when it is absent or fails."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        result = subprocess.run(
            [exe, *args], capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout if result.returncode == 0 else None
