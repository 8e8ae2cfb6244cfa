"""Measure one face-swap model on an evaluation set: run it, then compute every metric.

Identity is measured by the evaluation recogniser (:mod:`ffjobs.quality.encoder`): the
gallery is the mean embedding of each held-out identity's real images; a fused face is a
correct retrieval when its nearest gallery identity is its source's. Reconstruction is the
self-swap (source == target == the image). Pose error and FID need the user's networks
(:mod:`ffjobs.evaluate.extractors`) and are otherwise reported as skipped.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ffjobs.quality import metrics as m
from ffjobs.quality.evalset import EvaluationSet


@dataclass
class Extractors:
    """The optional networks; ``None`` where the user gave none (with the reason why)."""

    pose: nn.Module | None = None
    fid: nn.Module | None = None
    skipped: dict[str, str] = field(default_factory=dict)


@dataclass
class Measurement:
    metrics: dict[str, float]
    fused: Tensor
    """The swaps' outputs, one per pair of the set (for the sample grid)."""
    pair_identity: Tensor
    """Each fused face's cosine to its source's real embedding (the grid's caption)."""
    per_pair: dict[str, list[float]] = field(default_factory=dict)
    """The per-pair values behind each mean metric (``identity_cosine``, ``psnr``, ``ssim``),
    for their intervals."""
    pairs: int = 0
    """How many pairs were measured (the trials behind ``identity_top1``)."""


@torch.no_grad()
def run_swaps(
    model: nn.Module, sources: Tensor, targets: Tensor, batch_size: int, device: torch.device
) -> Tensor:
    """``model(source, target)`` for every row, in batches, on the CPU afterwards; a model of
    another resolution gets its inputs resized and its output resized back."""
    size = targets.shape[-1]
    resolution = getattr(model, "resolution", size)
    out = []
    for source, target in zip(sources.split(batch_size), targets.split(batch_size), strict=True):
        source, target = source.to(device), target.to(device)
        if resolution != size:
            source, target = (_resize(x, resolution) for x in (source, target))
        fused = model(source, target)
        out.append((_resize(fused, size) if resolution != size else fused).float().cpu())
    return torch.cat(out)


def _per_image(metric, fused: Tensor, real: Tensor, device: torch.device) -> Tensor:
    """``metric(fused, real)`` of each image, computed on ``device`` 8 images at a time."""
    slices = zip(fused.split(8), real.split(8), strict=True)
    return torch.cat([metric(a.to(device), b.to(device)).cpu() for a, b in slices])


@torch.no_grad()
def embed(encoder: nn.Module, images: Tensor, batch_size: int, device: torch.device) -> Tensor:
    return torch.cat([encoder(x.to(device)).cpu() for x in images.split(batch_size)])


def measure(
    model: nn.Module,
    evalset: EvaluationSet,
    encoder: nn.Module,
    extractors: Extractors,
    *,
    batch_size: int,
    device: torch.device,
) -> Measurement:
    """Every metric of ``model`` on ``evalset``; deterministic for a given model and set."""
    model, encoder = model.to(device).eval(), encoder.to(device).eval()
    images = evalset.images
    sources, targets = images[evalset.sources], images[evalset.targets]
    fused = run_swaps(model, sources, targets, batch_size, device)
    real = images[evalset.targets]
    reconstructed = run_swaps(model, real, real, batch_size, device)

    gallery = embed(encoder, images, batch_size, device)
    centres, identities = m.identity_gallery(gallery, evalset.labels)
    fused_embeddings = embed(encoder, fused, batch_size, device)
    pair_identity = F.cosine_similarity(
        fused_embeddings.double(), gallery[evalset.sources].double(), dim=1
    )
    # per image, on the device, in slices: torchmetrics' SSIM holds about 350 MB per 256 px image
    # while it works (64 images: 22 GB), so the 256 px preset's held-out set at once was killed
    # for memory on a 128 GB machine; 8 at a time stay under 3 GB at any set size
    psnr, ssim = (
        _per_image(m.psnr_per_image, reconstructed, real, device),
        _per_image(m.ssim_per_image, reconstructed, real, device),
    )
    results = {
        "identity_top1": m.identity_top1(
            fused_embeddings, evalset.labels[evalset.sources], centres, identities
        ),
        "identity_cosine": m.identity_cosine(fused_embeddings, gallery[evalset.sources]),
        "psnr": float(psnr.mean()),
        "ssim": float(ssim.mean()),
    }
    per_pair = {
        "identity_cosine": pair_identity.tolist(),
        "psnr": psnr.double().tolist(),
        "ssim": ssim.double().tolist(),
    }
    if extractors.pose is not None:
        pose = extractors.pose.to(device)
        results["pose_error"] = m.pose_error(
            embed(pose, fused, batch_size, device), embed(pose, targets, batch_size, device)
        )
    if extractors.fid is not None:
        results["fid"] = m.frechet_distance(images, fused, extractors.fid.cpu())
    return Measurement(results, fused, pair_identity.float(), per_pair, len(evalset.sources))


@torch.no_grad()
def swap_scores(
    swapped: Tensor,
    evalset: EvaluationSet,
    encoder: nn.Module,
    *,
    batch_size: int,
    device: torch.device,
) -> dict[str, float]:
    """The identity metrics of given swaps, one image per pair of ``evalset``: the target
    unchanged (the floor a model must rise above to have moved any identity) or the ground
    truth (:mod:`ffjobs.quality.reference`, the most it can reach)."""
    encoder = encoder.to(device).eval()
    gallery = embed(encoder, evalset.images, batch_size, device)
    centres, identities = m.identity_gallery(gallery, evalset.labels)
    embedded = embed(encoder, swapped, batch_size, device)
    return {
        "identity_top1": m.identity_top1(
            embedded, evalset.labels[evalset.sources], centres, identities
        ),
        "identity_cosine": m.identity_cosine(embedded, gallery[evalset.sources]),
    }


def unchanged_target_scores(
    evalset: EvaluationSet, encoder: nn.Module, *, batch_size: int, device: torch.device
) -> dict[str, float]:
    """:func:`swap_scores` of returning each target unchanged."""
    targets = evalset.images[evalset.targets]
    return swap_scores(targets, evalset, encoder, batch_size=batch_size, device=device)


def _resize(images: Tensor, size: int) -> Tensor:
    return F.interpolate(images, size=(size, size), mode="bilinear", antialias=True)
