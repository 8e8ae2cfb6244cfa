"""Loss terms: values on known inputs, which pairs they use, and batch-split invariance."""

from __future__ import annotations

import pytest
import torch

from ffjobs.models import DiscriminatorOutput, LossWeights
from ffjobs.models.losses import (
    PAIR_KIND_SUMS,
    discriminator_loss,
    feature_matching_loss,
    generator_loss,
    identity_by_pair_kind,
    identity_loss,
    reconstruction_loss,
)


def _outputs(*logit_values: float, feature: torch.Tensor | None = None):
    feature = feature if feature is not None else torch.zeros(2, 4, 2, 2)
    return [DiscriminatorOutput(torch.full((2, 1, 3, 3), v), [feature]) for v in logit_values]


def test_hinge_discriminator_loss_values():
    losses = discriminator_loss(disc_real=_outputs(2.0, 0.5), disc_fused=_outputs(-3.0, 0.0))
    # real: relu(1-2)=0, relu(1-0.5)=0.5 -> 0.25; fused: relu(1-3)=0, relu(1+0)=1 -> 0.5
    assert losses["d_real"].item() == pytest.approx(0.25)
    assert losses["d_fused"].item() == pytest.approx(0.5)
    assert losses["total"].item() == pytest.approx(0.75)


def test_identity_loss_is_one_minus_cosine():
    a = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    assert identity_loss(a, a * 3).item() == pytest.approx(0.0)
    assert identity_loss(a, -a).item() == pytest.approx(2.0)
    assert identity_loss(a, a.flip(1)).item() == pytest.approx(1.0)


def test_identity_loss_holds_for_embeddings_whose_squares_overflow():
    # A frozen iresnet50 with random weights embeds at about 1e26: squared, past float32's
    # 3.4e38, where a plain normalisation returns zeros and the loss is 1 with no gradient.
    torch.manual_seed(0)
    fused = torch.randn(4, 16, requires_grad=True)
    source = torch.randn(4, 16)
    plain = identity_loss(fused, source)
    (plain_grad,) = torch.autograd.grad(plain, fused)
    huge = (fused.detach() * 1e26).requires_grad_()
    loss = identity_loss(huge, source * 1e26)
    (huge_grad,) = torch.autograd.grad(loss, huge)
    # Scaling by 1e26 rounds each entry once (relative 6e-8) and the cosine of 16-entry rows
    # sums 16 products: 1e-5 is two orders above what float32 rounding can move it.
    assert loss.item() == pytest.approx(plain.item(), abs=1e-5)
    # d loss / d(s x) = (d loss / d x) / s: the gradient scales back exactly, up to rounding
    torch.testing.assert_close(huge_grad * 1e26, plain_grad, rtol=1e-4, atol=1e-6)
    assert identity_loss(torch.zeros(2, 16), source[:2]).item() == 1.0  # zero rows stay zero


def test_reconstruction_uses_same_identity_pairs_only():
    target = torch.zeros(2, 3, 4, 4)
    fused = torch.zeros(2, 3, 4, 4)
    fused[1] = 5.0  # a different-identity pair: its error must not count
    same = torch.tensor([True, False])
    assert reconstruction_loss(fused, target, same).item() == 0.0
    fused[0] = 1.0
    assert reconstruction_loss(fused, target, same).item() == pytest.approx(0.5)  # 1 / batch 2


def test_losses_split_over_ranks_average_to_the_whole_batch():
    # DDP averages gradients over ranks; that equals the big batch only with fixed denominators.
    torch.manual_seed(0)
    fused, target = torch.randn(4, 3, 4, 4), torch.randn(4, 3, 4, 4)
    same = torch.tensor([True, True, True, False])
    whole = reconstruction_loss(fused, target, same)
    halves = (
        reconstruction_loss(fused[:2], target[:2], same[:2])
        + reconstruction_loss(fused[2:], target[2:], same[2:])
    ) / 2
    torch.testing.assert_close(whole, halves)


def test_feature_matching_pulls_fused_features_only():
    real_feature = torch.ones(2, 4, 2, 2, requires_grad=True)
    fused_feature = torch.zeros(2, 4, 2, 2, requires_grad=True)
    loss = feature_matching_loss(
        _outputs(0.0, feature=fused_feature), _outputs(0.0, feature=real_feature)
    )
    loss.backward()
    assert loss.item() == pytest.approx(1.0)
    assert real_feature.grad is None and fused_feature.grad.abs().sum() > 0


def test_generator_total_is_the_weighted_sum():
    torch.manual_seed(0)
    fused = torch.randn(2, 3, 4, 4, requires_grad=True)
    kwargs = dict(
        fused=fused,
        target=torch.randn(2, 3, 4, 4),
        same_identity=torch.tensor([1, 0]),
        source_embedding=torch.randn(2, 8),
        fused_embedding=torch.randn(2, 8),
        disc_fused=_outputs(0.3, -0.2, feature=torch.randn(2, 4, 2, 2)),
        disc_real=_outputs(1.0, 1.0),
    )
    weights = LossWeights(adversarial=1.0, identity=10.0, reconstruction=5.0, feature_matching=2.0)
    losses = generator_loss(**kwargs, weights=weights)
    expected = (
        losses["adversarial"]
        + 10 * losses["identity"]
        + 5 * losses["reconstruction"]
        + 2 * losses["feature_matching"]
    )
    torch.testing.assert_close(losses["total"], expected)
    assert losses["adversarial"].item() == pytest.approx(-0.05)  # -(0.3 - 0.2) / 2
    losses["total"].backward()
    assert fused.grad.abs().sum() > 0


def test_the_identity_term_split_by_pair_kind_sums_each_kinds_distances():
    source = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    fused = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, -1.0]])  # distances 0, 1, 2
    split = identity_by_pair_kind(fused, source, torch.tensor([True, False, False]))
    assert {k: v.item() for k, v in split.items()} == {
        "identity_same_sum": 0.0,
        "same_pairs": 1.0,
        "identity_cross_sum": 3.0,  # 1 + 2: a mean of 1.5 where the overall mean is 1.0
        "cross_pairs": 2.0,
    }
    assert set(split) == set(PAIR_KIND_SUMS)
    # the per-kind means weight each pair once, whatever the batch and rank it came from
    total = identity_loss(fused, source) * 3
    torch.testing.assert_close(total, split["identity_same_sum"] + split["identity_cross_sum"])
