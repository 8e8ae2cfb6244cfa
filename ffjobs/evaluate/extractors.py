"""User-supplied TorchScript networks for the optional metrics: a pose regressor
(``evaluate.pose_weights``) and a feature extractor for FID (``evaluate.fid_weights``).

ffjobs ships and downloads neither. Both take images ``(N, 3, H, W)`` in [-1, 1] at the
model's resolution (resizing or normalising differently is the script's own business) and
return one row per image, ``(N, K)``. A file that does not load, or that answers a probe batch
with another shape, is a one-line error naming the setting and the file.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from ffjobs.errors import UserError

WHAT = {
    "pose_weights": "a TorchScript pose regressor (images (N, 3, H, W) in [-1, 1] -> (N, K) "
    "pose, e.g. yaw, pitch, roll)",
    "fid_weights": "a TorchScript feature extractor (images (N, 3, H, W) in [-1, 1] -> (N, D) "
    "features, e.g. an Inception or face-recognition backbone)",
}


def skipped_reason(setting: str) -> str:
    """Why a metric was not computed, and how to have it (the report's ``skipped`` entry)."""
    return f"skipped: set evaluate.{setting} to {WHAT[setting]}; nothing is downloaded"


def load_extractor(setting: str, path: str, resolution: int) -> nn.Module:
    """The TorchScript module at ``path`` for ``evaluate.<setting>``, checked on a probe."""
    where = f"evaluate.{setting}: {path}"
    if not Path(path).is_file():
        raise UserError(f"{where}: file not found; it must be {WHAT[setting]}")
    try:
        module = torch.jit.load(path, map_location="cpu").eval()
    except (RuntimeError, ValueError, OSError) as exc:
        raise UserError(
            f"{where}: not a TorchScript file ({_first_line(exc)}); save one with "
            "torch.jit.save(torch.jit.script(module), path)"
        ) from None
    probe = torch.zeros(2, 3, resolution, resolution)
    try:
        with torch.no_grad():
            out = module(probe)
    except Exception as exc:  # a scripted module raises whatever its code raises
        raise UserError(
            f"{where}: fails on a batch of 2 images of {resolution} px ({_first_line(exc)}); "
            f"it must be {WHAT[setting]}"
        ) from None
    if not isinstance(out, torch.Tensor) or out.dim() != 2 or out.shape[0] != 2:
        shape = list(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise UserError(
            f"{where}: returns {shape} for a batch of 2 images of {resolution} px, expected "
            f"[2, K]; it must be {WHAT[setting]}"
        )
    return module


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
