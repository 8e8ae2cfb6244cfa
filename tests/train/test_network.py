"""A network bundle steps its optimizer and schedule together and resumes exactly."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from ffjobs.config.train import TrainConfig
from ffjobs.train.network import build_network, lr_lambda

CPU = torch.device("cpu")


def _network(module: nn.Module, **config):
    tc = TrainConfig(**config)
    return build_network("net", module, module, 0.1, tc, CPU)


def _train(net, inputs):
    for x in inputs:
        net.zero_grad()
        net.backward(net.wrapped(x).pow(2).sum())
        net.step(grad_clip=None)


def test_step_updates_weights_and_advances_the_schedule():
    net = _network(nn.Linear(3, 2), lr_schedule="cosine", steps=4, warmup_steps=2)
    before = net.module.weight.detach().clone()
    assert net.scheduler.get_last_lr() == [pytest.approx(0.05)]  # warmup step 1 of 2
    _train(net, [torch.randn(4, 3)])
    assert not torch.equal(before, net.module.weight)
    assert net.scheduler.get_last_lr() == [pytest.approx(0.1)]


def test_step_clips_the_gradient_norm():
    net = _network(nn.Linear(3, 2))
    net.zero_grad()
    net.backward(net.wrapped(torch.full((4, 3), 100.0)).sum())
    net.step(grad_clip=0.5)
    norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in net.module.parameters()]))
    assert norm.item() == pytest.approx(0.5, rel=1e-4)


def test_optimizer_state_round_trip_continues_bit_for_bit():
    torch.manual_seed(0)
    inputs = [torch.randn(4, 3) for _ in range(4)]
    straight = _network(nn.Linear(3, 2), lr_schedule="cosine", steps=4)
    weights_at_start = copy.deepcopy(straight.module.state_dict())
    _train(straight, inputs[:2])
    saved = copy.deepcopy((straight.module.state_dict(), straight.optimizer_state()))
    _train(straight, inputs[2:])

    module = nn.Linear(3, 2)
    module.load_state_dict(weights_at_start)
    resumed = _network(module, lr_schedule="cosine", steps=4)
    resumed.module.load_state_dict(saved[0])
    resumed.load_optimizer_state(saved[1])
    _train(resumed, inputs[2:])
    assert torch.equal(resumed.module.weight, straight.module.weight)
    assert resumed.scheduler.last_epoch == straight.scheduler.last_epoch == 4


def test_lr_lambda_warms_up_then_decays_to_the_floor():
    factor = lr_lambda("cosine", warmup=2, total=10, min_ratio=0.1)
    assert [factor(0), factor(1), factor(2)] == [0.5, 1.0, 1.0]
    assert factor(10) == pytest.approx(0.1)


def test_apply_config_after_a_resume_sets_the_new_rate_and_keeps_an_unchanged_one_exact():
    torch.manual_seed(0)
    inputs = [torch.randn(4, 3) for _ in range(4)]
    schedule = {"lr_schedule": "cosine", "steps": 4, "warmup_steps": 1}
    straight = _network(nn.Linear(3, 2), **schedule)
    _train(straight, inputs[:2])
    saved = copy.deepcopy((straight.module.state_dict(), straight.optimizer_state()))
    _train(straight, inputs[2:])

    def resumed(lr: float, **changes):
        tc = TrainConfig(**schedule, **changes)
        module = nn.Linear(3, 2)
        net = build_network("net", module, module, lr, tc, CPU)
        net.module.load_state_dict(saved[0])
        net.load_optimizer_state(saved[1])
        net.apply_config(lr, tc)
        return net

    same = resumed(0.1)  # the config the state was saved with: nothing moves by a bit
    assert same.optimizer.param_groups[0]["lr"] == saved[1]["optimizer"]["param_groups"][0]["lr"]
    _train(same, inputs[2:])
    assert torch.equal(same.module.weight, straight.module.weight)

    faster = resumed(0.5, weight_decay=0.01)
    factor = lr_lambda("cosine", 1, 4, 0.1)
    group = faster.optimizer.param_groups[0]
    assert group["lr"] == pytest.approx(0.5 * factor(2)) and group["weight_decay"] == 0.01
    assert faster.scheduler.get_last_lr() == [group["lr"]]
    _train(faster, inputs[2:3])  # the schedule goes on from the new base
    assert faster.scheduler.base_lrs == [0.5]
    assert faster.optimizer.param_groups[0]["lr"] == pytest.approx(0.5 * factor(3))
