"""Walking the tensors of a nested value (a batch, a training state)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def map_tensors(obj: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    """``obj`` (dicts, lists, tuples of tensors and plain values) with ``fn`` on each tensor, in
    order; the containers rebuilt, everything else as it is."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, dict):
        return {key: map_tensors(value, fn) for key, value in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(map_tensors(value, fn) for value in obj)
    return obj
