"""Which collective backend a job uses: one rule for the launcher and for every rank.

torch-free, so a launcher decides from the GPUs it sees (or the cluster profile promises)
without importing torch; a rank passes ``torch.cuda.device_count()``.
"""

from __future__ import annotations

from ffjobs.errors import UserError

BACKENDS = ("auto", "nccl", "gloo")


def choose_backend(requested: str, gpus: int, key: str) -> str:
    """``auto`` is nccl with GPUs and gloo without; ``nccl`` without GPUs is a user error.

    ``key`` is the config key the request came from (``train.backend``), named in the error.
    """
    if requested not in BACKENDS:
        raise UserError(f"{key}: must be one of {', '.join(BACKENDS)}, got {requested!r}")
    if requested == "auto":
        return "nccl" if gpus > 0 else "gloo"
    if requested == "nccl" and gpus <= 0:
        raise UserError(
            f"{key}: nccl needs GPUs and none is visible here; "
            f"use --set {key}=auto (gloo without GPUs) or run on a GPU node"
        )
    return requested
