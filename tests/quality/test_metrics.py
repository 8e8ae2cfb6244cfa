"""The metrics as pure functions: known answers on tensors built for them."""

from __future__ import annotations

import math

import pytest
import torch

from ffjobs.quality import metrics


def test_retrieval_finds_the_identity_whose_centre_is_nearest():
    # two identities along the axes; queries near one axis or the other
    gallery = torch.tensor([[1.0, 0.1], [0.9, -0.1], [0.0, 1.0], [0.1, 0.8]])
    labels = torch.tensor([3, 3, 7, 7])
    centres, identities = metrics.identity_gallery(gallery, labels)
    assert identities.tolist() == [3, 7]
    queries = torch.tensor([[2.0, 0.0], [0.0, 5.0], [1.0, 0.2], [0.2, 1.0]])
    assert metrics.identity_top1(queries, torch.tensor([3, 7, 7, 7]), centres, identities) == 0.75


def test_identity_cosine_is_the_mean_row_cosine():
    a = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    b = torch.tensor([[3.0, 0.0], [2.0, 0.0]])
    assert metrics.identity_cosine(a, b) == pytest.approx(0.5, abs=1e-12)


def test_psnr_and_ssim_of_images_in_minus_one_to_one():
    real = torch.zeros(2, 3, 16, 16)
    # an error of 0.25 in [-1, 1] (exact in float32) is 0.125 on [0, 1]: PSNR = 20 log10(8) dB;
    # torchmetrics takes log10 of data_range as a float32 tensor, hence relative 1e-6
    shifted = real + 0.25
    expected = 20 * math.log10(8)
    assert metrics.psnr_per_image(shifted, real).tolist() == pytest.approx([expected] * 2, rel=1e-6)
    same = torch.rand(2, 3, 32, 32) * 2 - 1
    assert metrics.ssim_per_image(same, same).tolist() == pytest.approx([1.0, 1.0], abs=1e-9)
    noisy = (same + 0.5 * torch.randn_like(same)).clamp(-1, 1)
    assert (metrics.ssim_per_image(noisy, same) < 0.9).all()


def test_pose_error_is_the_mean_euclidean_distance():
    fused = torch.tensor([[3.0, 4.0, 0.0], [0.0, 0.0, 0.0]])
    target = torch.zeros(2, 3)
    assert metrics.pose_error(fused, target) == 2.5


def test_frechet_distance_of_shifted_features_is_the_squared_shift():
    # features = the image's mean colour; the same set shifted by d has FID |d|^2 (covariances
    # equal, so the trace term is 0 up to eigenvalue rounding; returned in the features'
    # float32, so relative 1e-6)
    class MeanColour(torch.nn.Module):
        def forward(self, images):
            return images.mean(dim=(2, 3))

    real = torch.randn(64, 3, 8, 8, generator=torch.Generator().manual_seed(0)) * 0.3
    fake = real + torch.tensor([0.1, -0.2, 0.2])[None, :, None, None]
    fid = metrics.frechet_distance(real, fake, torch.jit.script(MeanColour()))
    assert fid == pytest.approx(0.09, rel=1e-6)
    assert math.isfinite(fid)
