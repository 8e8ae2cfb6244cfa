"""Face-swap metrics as pure functions on tensors.

Images are ``(N, 3, H, W)`` floats in ``[-1, 1]`` (the models' convention); embeddings and
features are ``(N, D)``. Per-image values are averaged over images, so a number does not
depend on how a caller batched the images.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

BETTER_WHEN_HIGHER: dict[str, bool] = {
    "identity_top1": True,
    "identity_cosine": True,
    "psnr": True,
    "ssim": True,
    "pose_error": False,
    "fid": False,
}
"""Every metric an evaluation reports, and whether a larger value is better."""


def identity_gallery(embeddings: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
    """``(centres, identities)``: the mean normalised embedding of each identity (normalised
    again), one row per identity in ``identities`` (sorted labels)."""
    identities = labels.unique(sorted=True)
    normed = F.normalize(embeddings.double(), dim=1)
    centres = torch.stack([normed[labels == label].mean(0) for label in identities])
    return F.normalize(centres, dim=1), identities


def identity_top1(
    queries: Tensor, query_labels: Tensor, centres: Tensor, identities: Tensor
) -> float:
    """Fraction of queries whose nearest gallery centre (cosine) is their own identity."""
    cosines = F.normalize(queries.double(), dim=1) @ centres.t()
    return float((identities[cosines.argmax(1)] == query_labels).double().mean())


def identity_cosine(a: Tensor, b: Tensor) -> float:
    """Mean cosine between the rows of ``a`` and ``b`` (fused vs source embeddings)."""
    return float(F.cosine_similarity(a.double(), b.double(), dim=1).mean())


def _unit_range(images: Tensor) -> Tensor:
    # generator outputs can leave [-1, 1] slightly; clamping matches what an 8-bit image shows
    return ((images.double() + 1) / 2).clamp(0, 1)


def psnr_per_image(fused: Tensor, real: Tensor) -> Tensor:
    """PSNR in dB of each image against its reference, on the [0, 1] range."""
    from torchmetrics.functional.image import peak_signal_noise_ratio

    return peak_signal_noise_ratio(
        _unit_range(fused), _unit_range(real), data_range=1.0, reduction="none", dim=(1, 2, 3)
    )


def ssim_per_image(fused: Tensor, real: Tensor) -> Tensor:
    """SSIM of each image against its reference (11 px Gaussian window), on [0, 1]."""
    from torchmetrics.functional.image import structural_similarity_index_measure

    return structural_similarity_index_measure(
        _unit_range(fused), _unit_range(real), data_range=1.0, reduction="none"
    )


def pose_error(fused_pose: Tensor, target_pose: Tensor) -> float:
    """Mean Euclidean distance between the fused faces' poses and their targets'."""
    return float((fused_pose.double() - target_pose.double()).norm(dim=1).mean())


def frechet_distance(real: Tensor, fake: Tensor, extractor: nn.Module) -> float:
    """FID of ``fake`` images against ``real`` ones in ``extractor``'s feature space
    (torchmetrics' estimator, float64 statistics)."""
    from torchmetrics.image.fid import FrechetInceptionDistance

    # with a custom extractor, torchmetrics passes images through as given; normalize=True only
    # makes its one shape probe a float image instead of a uint8 one
    fid = FrechetInceptionDistance(
        feature=extractor, normalize=True, input_img_size=tuple(real.shape[1:])
    )
    for chunk in real.split(64):
        fid.update(chunk, real=True)
    for chunk in fake.split(64):
        fid.update(chunk, real=False)
    return float(fid.compute())
