"""What a checkpoint holds in torch's terms: the safe load of a checkpoint's bytes and every
rank's RNG states. The training process's side of :mod:`ffjobs.train.checkpoint`; finding and
verifying a run's checkpoints (:mod:`~.manager`) does not import torch."""

from __future__ import annotations

import io
import pickle
import random
import re
import warnings
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from ffjobs.errors import UserError
from ffjobs.train.distributed import get_world_size


class UnsafeCheckpoint(UserError):
    """A checkpoint file that does not load as tensors and plain containers (it was made by
    something other than ffjobs, or altered to run code when unpickled)."""


_FORBIDDEN = re.compile(
    r"(unsupported GLOBAL \S+|Unsupported global: GLOBAL \S+|Unsupported operand \S+)"
)


def _load_failure(exc: Exception) -> str:
    """Why a safe load failed, in one short line: never torch's advice to load unsafely."""
    text = str(exc)
    found = _FORBIDDEN.search(text)
    if found is not None or isinstance(exc, pickle.UnpicklingError) or "weights" in text.lower():
        what = f" ({found.group(1).removeprefix('Unsupported global: ')})" if found else ""
        return f"it holds objects other than tensors and plain containers{what}"
    first_line = (text.strip().splitlines() or [""])[0]
    return f"not a checkpoint ({type(exc).__name__}: {first_line[:120]})"


def safe_load(data: bytes | memoryview, where: str) -> dict[str, Any]:
    """A checkpoint's state from its bytes, as tensors and plain containers only (onto the
    CPU); raises :class:`UnsafeCheckpoint` naming ``where`` for anything else."""
    try:
        with warnings.catch_warnings():
            # torch's note on a foreign file's pickle protocol: the refusal below says enough
            warnings.simplefilter("ignore")
            state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:
        raise UnsafeCheckpoint(f"checkpoint {where} refused: {_load_failure(exc)}") from None
    if not isinstance(state, dict):
        raise UnsafeCheckpoint(
            f"checkpoint {where} refused: it holds a {type(state).__name__}, not a training state"
        )
    return state


def capture_rng_state() -> dict[str, Any]:
    """This process's python, numpy, torch (and CUDA) generator states, in loadable types."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": {
            "kind": kind,
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Inverse of :func:`capture_rng_state`."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    np_state = state["numpy"]
    np.random.set_state(
        (
            np_state["kind"],
            np_state["keys"].numpy().astype(np.uint32),
            np_state["pos"],
            np_state["has_gauss"],
            np_state["cached_gaussian"],
        )
    )
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def gather_to_rank0(obj: Any) -> list[Any]:
    """Every rank's ``obj`` as a list indexed by rank (``[obj]`` when not distributed)."""
    if get_world_size() == 1:
        return [obj]
    gathered: list[Any] = [None] * get_world_size()
    dist.all_gather_object(gathered, obj)
    return gathered
