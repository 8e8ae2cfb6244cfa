"""Wrapping for DDP: the comm hook sees every synced backward and none under ``no_sync``."""

from __future__ import annotations

import inspect

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel as DDP

from ffjobs.train import ddp
from ffjobs.train.compile.regions import CompiledRegion

CPU = torch.device("cpu")


@pytest.fixture
def one_rank_group():
    """A real (one-rank gloo) process group, so DDP can be built in this process."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


class CountingHook:
    """A plain all-reduce comm hook that counts its calls (DDP wants a function)."""

    def __init__(self):
        self.calls = 0

        def hook(state, bucket):
            self.calls += 1
            return allreduce_hook(state, bucket)

        self.hook = hook


def _backward(wrapped: nn.Module) -> None:
    wrapped(torch.randn(4, 3)).sum().backward()


def test_buffer_sync_keyword_is_the_one_this_torch_knows():
    ((key, value),) = ddp.no_buffer_sync_per_forward().items()
    assert value is False
    assert key in inspect.signature(DDP.__init__).parameters


def test_one_rank_is_not_wrapped():
    module = nn.Linear(3, 2)
    hook = CountingHook()
    wrapped = ddp.wrap(
        "net", module, CPU, world_size=1, bucket_cap_mb=25, comm_hook=hook.hook, compile_mode=None
    )
    assert wrapped is module
    with ddp.no_sync(wrapped):  # nothing to turn off, and no error
        _backward(wrapped)
    assert hook.calls == 0


def test_no_sync_skips_the_all_reduce_and_nests(one_rank_group):
    hook = CountingHook()
    wrapped = ddp.wrap(
        "net",
        nn.Linear(3, 2),
        CPU,
        world_size=2,
        bucket_cap_mb=25,
        comm_hook=hook.hook,
        compile_mode=None,
    )
    assert isinstance(wrapped, DDP)
    _backward(wrapped)
    assert hook.calls == 1
    with ddp.no_sync(wrapped):
        with ddp.no_sync(wrapped):  # the trainer's per-micro-batch no_sync inside the bench's
            _backward(wrapped)
        _backward(wrapped)  # the inner one ending must not switch sync back on
    assert hook.calls == 1
    _backward(wrapped)
    assert hook.calls == 2


def test_no_sync_reaches_through_the_compile_wrapper(one_rank_group):
    hook = CountingHook()
    wrapped = ddp.wrap(
        "net",
        nn.Linear(3, 2),
        CPU,
        world_size=2,
        bucket_cap_mb=25,
        comm_hook=hook.hook,
        compile_mode="default",
    )
    inner = wrapped._orig_mod
    assert isinstance(inner, DDP)  # DDP is compiled lazily: Dynamo splits it at its buckets
    assert not isinstance(wrapped, CompiledRegion)
    with ddp.no_sync(wrapped):
        assert inner.require_backward_grad_sync is False
    assert inner.require_backward_grad_sync is True


def test_a_module_outside_ddp_becomes_a_compiled_region():
    module = nn.Linear(3, 2)
    wrapped = ddp.wrap(
        "net", module, CPU, world_size=1, bucket_cap_mb=25, comm_hook=None, compile_mode="default"
    )
    assert isinstance(wrapped, CompiledRegion) and wrapped._orig_mod is module
    assert ddp.compiled("encoder", module, None) is module  # no compile mode: eager
