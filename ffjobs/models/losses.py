"""Face-fusion losses; each function returns a dict of named scalar tensors with a ``total``.

One training step, as the trainer uses them::

    source_embedding = identity_encoder(source)            # no grad
    fused = generator(target, source_embedding)
    # discriminator update
    d = discriminator_loss(disc_real=discriminator(target), disc_fused=discriminator(fused.detach()))
    d["total"].backward()
    # generator update (discriminator weights frozen, gradients flow through it)
    g = generator_loss(fused=fused, target=target, same_identity=same_identity,
                       source_embedding=source_embedding,
                       fused_embedding=identity_encoder(fused),
                       disc_fused=discriminator(fused), disc_real=<the real outputs above>,
                       weights=model_cfg.losses)
    g["total"].backward()

All terms are batch means with a fixed denominator (the per-rank batch size), so averaging
gradients over DDP ranks equals one step on the concatenated batch. That is why the
reconstruction term divides by the batch size, not by the number of same-identity pairs.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from ffjobs.config.model import LossWeights
from ffjobs.models.discriminator import DiscriminatorOutput
from ffjobs.models.numerics import at_least_float32, unit_rows


def identity_cosine(embedding_a: Tensor, embedding_b: Tensor) -> Tensor:
    """Per-sample cosine similarity of two embedding batches, in at least float32, at any
    magnitude (see :func:`unit_rows`)."""
    return (unit_rows(embedding_a) * unit_rows(embedding_b)).sum(dim=1)


def identity_loss(fused_embedding: Tensor, source_embedding: Tensor) -> Tensor:
    """``mean(1 - cosine)`` between fused-output and source identity embeddings."""
    return (1.0 - identity_cosine(fused_embedding, source_embedding.detach())).mean()


def reconstruction_loss(fused: Tensor, target: Tensor, same_identity: Tensor) -> Tensor:
    """L1 between fused and target over same-identity pairs, divided by the batch size."""
    per_sample = (at_least_float32(fused) - at_least_float32(target)).abs().mean(dim=(1, 2, 3))
    return (per_sample * same_identity.to(per_sample.dtype)).mean()


def adversarial_generator_loss(disc_fused: Sequence[DiscriminatorOutput]) -> Tensor:
    """Hinge generator term: ``-mean(D(fused))``, averaged over scales."""
    return torch.stack([-at_least_float32(out.logits).mean() for out in disc_fused]).mean()


def feature_matching_loss(
    disc_fused: Sequence[DiscriminatorOutput], disc_real: Sequence[DiscriminatorOutput]
) -> Tensor:
    """L1 between the last features of D(fused) and D(real) (real detached), over scales."""
    terms = [
        F.l1_loss(
            at_least_float32(fused.features[-1]), at_least_float32(real.features[-1].detach())
        )
        for fused, real in zip(disc_fused, disc_real, strict=True)
    ]
    return torch.stack(terms).mean()


def discriminator_loss(
    *, disc_real: Sequence[DiscriminatorOutput], disc_fused: Sequence[DiscriminatorOutput]
) -> dict[str, Tensor]:
    """Hinge loss ``relu(1 - D(real)) + relu(1 + D(fused))``, averaged over scales.

    Returns ``d_real``, ``d_fused`` and ``total``. Pass ``fused.detach()`` through the
    discriminator so this loss does not reach the generator.
    """
    real = torch.stack(
        [F.relu(1.0 - at_least_float32(out.logits)).mean() for out in disc_real]
    ).mean()
    fused = torch.stack(
        [F.relu(1.0 + at_least_float32(out.logits)).mean() for out in disc_fused]
    ).mean()
    return {"d_real": real, "d_fused": fused, "total": real + fused}


def generator_loss(
    *,
    fused: Tensor,
    target: Tensor,
    same_identity: Tensor,
    source_embedding: Tensor,
    fused_embedding: Tensor,
    disc_fused: Sequence[DiscriminatorOutput],
    disc_real: Sequence[DiscriminatorOutput],
    weights: LossWeights,
) -> dict[str, Tensor]:
    """Weighted sum of the generator's terms.

    Returns ``adversarial``, ``identity``, ``reconstruction``, ``feature_matching`` (each
    unweighted, for logging), ``total`` (weighted with ``weights``, for ``backward``) and the
    identity term split by pair kind (:func:`identity_by_pair_kind`, for logging).
    """
    terms = {
        "adversarial": adversarial_generator_loss(disc_fused),
        "identity": identity_loss(fused_embedding, source_embedding),
        "reconstruction": reconstruction_loss(fused, target, same_identity),
        "feature_matching": feature_matching_loss(disc_fused, disc_real),
    }
    total = sum(getattr(weights, name) * value for name, value in terms.items())
    split = identity_by_pair_kind(fused_embedding.detach(), source_embedding, same_identity)
    return {**terms, "total": total, **split}


PAIR_KIND_SUMS = ("identity_same_sum", "same_pairs", "identity_cross_sum", "cross_pairs")
"""The identity term's sums and pair counts by pair kind, as :func:`generator_loss` returns
them: summed over steps and ranks, each sum divided by its count gives the mean."""


def identity_by_pair_kind(
    fused_embedding: Tensor, source_embedding: Tensor, same_identity: Tensor
) -> dict[str, Tensor]:
    """``1 - cosine`` summed over the same-identity pairs and over the cross-identity pairs,
    with the number of each (no gradient: for logging). The mean identity loss hides whether
    identity moves: a same-identity pair scores well by reconstructing its target, which
    carries the source's identity already; the cross-identity mean is the one to watch."""
    with torch.no_grad():
        distance = 1.0 - identity_cosine(fused_embedding, source_embedding)
        same = same_identity.to(distance.dtype)
        return {
            "identity_same_sum": (distance * same).sum(),
            "same_pairs": same.sum(),
            "identity_cross_sum": (distance * (1.0 - same)).sum(),
            "cross_pairs": (1.0 - same).sum(),
        }
