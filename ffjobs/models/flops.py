"""FLOPs of one training image through a full generator + discriminator step, for MFU.

Counted with :class:`torch.utils.flop_counter.FlopCounterMode` (matrix products and
convolutions; elementwise work is not counted, as usual for MFU) on ``meta`` tensors, so it
costs no real compute or memory even for the 512 px preset. The step counted is the one in
:mod:`ffjobs.models.losses`: source embedding (no grad), generator forward, discriminator on
real and detached fused images plus its backward, then discriminator (weights frozen) and
identity encoder on the fused images plus the generator's backward.
"""

from __future__ import annotations

import torch
from torch.utils.flop_counter import FlopCounterMode

from ffjobs.config.model import ModelConfig
from ffjobs.models.losses import discriminator_loss, generator_loss


def training_step_flops(cfg: ModelConfig, batch_size: int = 2) -> float:
    """FLOPs of one G+D training step on ``batch_size`` images (forward and backward)."""
    from ffjobs.models import build

    with torch.device("meta"):
        generator, discriminator, identity_encoder = build(cfg, load_identity_weights=False)
        size = cfg.resolution
        source = torch.empty(batch_size, 3, size, size)
        target = torch.empty(batch_size, 3, size, size)
        same_identity = torch.ones(batch_size, dtype=torch.bool)
    with FlopCounterMode(display=False) as counter:
        with torch.no_grad():
            source_embedding = identity_encoder(source)
        fused = generator(target, source_embedding)

        disc_real = discriminator(target)
        d_losses = discriminator_loss(disc_real=disc_real, disc_fused=discriminator(fused.detach()))
        d_losses["total"].backward()

        discriminator.requires_grad_(False)
        g_losses = generator_loss(
            fused=fused,
            target=target,
            same_identity=same_identity,
            source_embedding=source_embedding,
            fused_embedding=identity_encoder(fused),
            disc_fused=discriminator(fused),
            disc_real=disc_real,
            weights=cfg.losses,
        )
        g_losses["total"].backward()
    return float(counter.get_total_flops())


def training_flops_per_image(cfg: ModelConfig) -> float:
    """FLOPs per training image of one G+D step (what MFU divides throughput by)."""
    batch_size = 2
    return training_step_flops(cfg, batch_size) / batch_size
