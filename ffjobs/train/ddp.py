"""Wrapping a network for data-parallel training: DDP with a comm hook, optionally compiled.

Kept apart from the loop because it tracks torch's DDP API (renamed arguments between
releases) and the ``torch.compile`` wrapper around it: a DDP module is compiled lazily (Dynamo
splits its graph at the gradient buckets), any other module becomes a
:class:`~ffjobs.train.compile.regions.CompiledRegion`, whose capture a restarted job loads instead of
tracing again.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from ffjobs.train.compile.regions import CompiledRegion


def no_buffer_sync_per_forward() -> dict[str, bool]:
    """DDP keyword that turns off the buffer broadcast before every forward.

    G and D have no batch norm, so their buffers never diverge between ranks. torch >= 2.14
    renamed ``broadcast_buffers`` to ``forward_sync_buffers`` (2.11 only knows the old name).
    """
    params = inspect.signature(DDP.__init__).parameters
    key = "forward_sync_buffers" if "forward_sync_buffers" in params else "broadcast_buffers"
    return {key: False}


def wrap(
    name: str,
    module: nn.Module,
    device: torch.device,
    *,
    world_size: int,
    bucket_cap_mb: float,
    comm_hook: Callable,
    compile_mode: str | None,
) -> nn.Module:
    """``module`` in DDP (more than one rank) with ``comm_hook``, then compiled in
    ``compile_mode`` (``torch.compile``'s mode; ``None``: eager) as :func:`compiled` ``name``.

    One rank gets no DDP at all: there is nothing to all-reduce.
    """
    wrapped: nn.Module = module
    if world_size > 1:
        ddp = DDP(
            module,
            device_ids=[device.index] if device.type == "cuda" else None,
            bucket_cap_mb=bucket_cap_mb,
            gradient_as_bucket_view=True,
            **no_buffer_sync_per_forward(),
        )
        ddp.register_comm_hook(None, comm_hook)
        wrapped = ddp
    return compiled(name, wrapped, compile_mode)


def compiled(name: str, module: nn.Module, mode: str | None) -> nn.Module:
    """``module`` compiled in ``mode`` (``None``: ``module`` itself): lazily when it is in
    DDP, else as the compiled region ``name``."""
    if mode is None:
        return module
    if isinstance(module, DDP):
        return torch.compile(module, mode=mode)
    return CompiledRegion(name, module, mode)


def no_sync(*wrapped: nn.Module) -> contextlib.AbstractContextManager:
    """Backward passes inside accumulate gradients locally, without all-reduce.

    Accepts what :func:`wrap` returns; modules that are not DDP (one rank) are left alone.
    Nests: an inner ``no_sync`` ending does not turn the outer one off.
    """
    stack = contextlib.ExitStack()
    for module in wrapped:
        ddp = getattr(module, "_orig_mod", module)  # under torch.compile's wrapper
        if isinstance(ddp, DDP):
            stack.enter_context(ddp.no_sync())
    return stack
