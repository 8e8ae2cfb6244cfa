"""One trained network with everything that updates it: module, optimizer, LR schedule, scaler.

The trainer holds one :class:`Network` per trained model (generator, discriminator), so a
step, a checkpoint and a resume are loops over networks rather than pairs of hand-kept names.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ffjobs.config.train import TrainConfig


@dataclass
class Network:
    """A network and its update rule.

    ``module`` is the plain model (its ``state_dict`` has no ``module.``/``_orig_mod.`` prefix);
    ``wrapped`` is what the forward pass calls: ``module`` in DDP and/or ``torch.compile``.
    """

    name: str
    module: nn.Module
    wrapped: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    scaler: torch.amp.GradScaler

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def backward(self, loss: torch.Tensor) -> None:
        """Accumulate the gradients of ``loss`` (scaled when training in fp16)."""
        self.scaler.scale(loss).backward()

    def step(self, grad_clip: float | None) -> None:
        """One optimizer step on the accumulated gradients (clipped), then the LR schedule's."""
        if grad_clip is not None:
            self.scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(self.module.parameters(), grad_clip)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.scheduler.step()

    def optimizer_state(self) -> dict[str, Any]:
        """Optimizer, scheduler and scaler state; the weights are ``module.state_dict()``."""
        return {
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
        }

    def load_optimizer_state(self, state: dict[str, Any]) -> None:
        """Inverse of :meth:`optimizer_state`."""
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.scaler.load_state_dict(state["scaler"])

    def apply_config(self, lr: float, tc: TrainConfig) -> None:
        """Set the configured base learning rate ``lr`` and Adam settings over those that
        :meth:`load_optimizer_state` restored, so that a run resumed with another ``train.lr``
        (or betas, weight decay, epsilon) trains with it from the step it resumed at.

        The schedule's multiplier is the config's (its function is never checkpointed) at the
        restored step, computed as the scheduler does: with an unchanged config every value is
        the restored one, bit for bit.
        """
        groups = self.optimizer.param_groups
        step = self.scheduler.last_epoch
        self.scheduler.base_lrs = [lr for _ in groups]
        for group, factor in zip(groups, self.scheduler.lr_lambdas, strict=True):
            group["initial_lr"] = lr
            group["lr"] = lr * factor(step)
            group.update(betas=tuple(tc.betas), weight_decay=tc.weight_decay, eps=tc.adam_eps)
        self.scheduler._last_lr = [group["lr"] for group in groups]  # what get_last_lr() says


def build_network(
    name: str,
    module: nn.Module,
    wrapped: nn.Module,
    lr: float,
    tc: TrainConfig,
    device: torch.device,
) -> Network:
    """Adam at ``lr`` with the configured schedule and (fp16 only) loss scaling."""
    optimizer = torch.optim.Adam(
        module.parameters(),
        lr=lr,
        betas=tuple(tc.betas),
        weight_decay=tc.weight_decay,
        eps=tc.adam_eps,
        fused=(tc.fused_adam and device.type == "cuda") or None,
    )
    factor = lr_lambda(tc.lr_schedule, tc.warmup_steps, tc.steps, tc.min_lr_ratio)
    return Network(
        name=name,
        module=module,
        wrapped=wrapped,
        optimizer=optimizer,
        scheduler=torch.optim.lr_scheduler.LambdaLR(optimizer, factor),
        scaler=torch.amp.GradScaler(device.type, enabled=tc.precision == "fp16"),
    )


def lr_lambda(schedule: str, warmup: int, total: int, min_ratio: float) -> Callable[[int], float]:
    """Multiplier of the base LR at a step: linear warmup, then constant or cosine decay."""

    def factor(step: int) -> float:
        if warmup and step < warmup:
            return (step + 1) / warmup
        if schedule == "constant":
            return 1.0
        progress = min((step - warmup) / max(total - warmup, 1), 1.0)
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return factor
