"""The networks and losses compute in float64 when the model is float64 (what the DDP
equivalence tests compare), and in float32 for lower precisions, as before."""

from __future__ import annotations

import torch

from ffjobs.config import load_config
from ffjobs.models import build
from ffjobs.models.losses import discriminator_loss, generator_loss
from ffjobs.models.numerics import at_least_float32

from .helpers import TINY_MODEL


def test_at_least_float32_upcasts_half_precisions_only():
    x = torch.ones(3, dtype=torch.float32)
    assert at_least_float32(x) is x
    assert at_least_float32(x.double()).dtype == torch.float64
    for half in (torch.bfloat16, torch.float16):
        assert at_least_float32(x.to(half)).dtype == torch.float32


def test_a_float64_model_stays_float64_through_the_norms_and_losses():
    config = load_config("local", [*TINY_MODEL, "model.identity_weights="])
    torch.manual_seed(0)
    models = build(config.model, load_identity_weights=False)
    g, d, identity = (network.double() for network in models)
    target = torch.rand(2, 3, 64, 64, dtype=torch.float64) * 2 - 1
    source_embedding = identity(target.flip(0))
    fused = g(target, source_embedding)
    disc_real = d(target)
    losses = {
        **discriminator_loss(disc_real=disc_real, disc_fused=d(fused.detach())),
        **generator_loss(
            fused=fused,
            target=target,
            same_identity=torch.tensor([True, False]),
            source_embedding=source_embedding,
            fused_embedding=identity(fused),
            disc_fused=d(fused),
            disc_real=disc_real,
            weights=config.model.losses,
        ),
    }
    assert fused.dtype == torch.float64
    assert {name: loss.dtype for name, loss in losses.items()} == dict.fromkeys(
        losses, torch.float64
    )
