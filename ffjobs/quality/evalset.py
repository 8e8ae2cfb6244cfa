"""The evaluation set: the held-out identities' images and their fixed (source, target) pairs.

The held-out identities are the ones training never saw (``data.val_fraction``, split as the
trainer splits, by identity). Each evaluated image is the target of one swap whose source is
an image of another held-out identity; the choice is :class:`FacePairDataset`'s, seeded by
``evaluate.seed``, so the same config always gives the same pairs.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import torch
from torch import Tensor

from ffjobs.config import Config
from ffjobs.errors import UserError


@dataclass
class EvaluationSet:
    images: Tensor
    """``(N, 3, S, S)`` floats in [-1, 1] at the model's resolution."""
    labels: Tensor
    """Identity label of each image."""
    sources: Tensor
    """Image index of each pair's source (another identity than the target's)."""
    targets: Tensor
    """Image index of each pair's target."""
    identities: int
    paths: list[str] = field(default_factory=list)
    """Each image's path in the dataset (relative to ``data.source``)."""

    def size(self) -> dict[str, int]:
        """The stage's ``eval_set`` fact."""
        return {
            "identities": self.identities,
            "images": len(self.images),
            "pairs": len(self.targets),
        }


def held_out_index(config: Config, quarantine: str | None = None):
    """The identities training left out, as an index (quarantined files excluded)."""
    from ffjobs.data.index import index_from_config, split_identities

    index = index_from_config(config.data, quarantine=quarantine, s3=config.s3)
    _, held_out = split_identities(index, config.data.val_fraction, config.data.synth.seed)
    if len(held_out.identities) < 2:
        raise UserError(
            f"data.val_fraction: the held-out split of {config.data.source} has "
            f"{len(held_out.identities)} identities (val_fraction {config.data.val_fraction}, "
            f"{len(index.identities)} identities in all); evaluation needs at least 2 identities "
            "training never saw: raise data.val_fraction or add a val split to the manifest"
        )
    return held_out


def build_evaluation_set(config: Config, quarantine: str | None = None) -> EvaluationSet:
    """Load the held-out images (at most ``evaluate.max_pairs``, a seeded choice) and pair
    each one, as a target, with a source of another identity."""
    from ffjobs.data.dataset import FacePairDataset, to_model_images

    pairs = FacePairDataset(
        held_out_index(config, quarantine),
        image_size=config.model.resolution,
        same_identity_prob=0.0,
        seed=config.evaluate.seed,
    )
    chosen = list(range(len(pairs)))
    if len(chosen) > config.evaluate.max_pairs:
        chosen = sorted(
            random.Random(config.evaluate.seed).sample(chosen, config.evaluate.max_pairs)
        )
    sources = [pairs.pick_source(target)[0] for target in chosen]
    needed = sorted(set(chosen) | set(sources))  # each image decoded once, in index order
    position = {image: i for i, image in enumerate(needed)}
    images = to_model_images(torch.stack([pairs.load(i) for i in needed]))
    labels = torch.tensor([pairs.labels[pairs.index[i].identity] for i in needed])
    return EvaluationSet(
        images=images,
        labels=labels,
        sources=torch.tensor([position[i] for i in sources]),
        targets=torch.tensor([position[i] for i in chosen]),
        identities=len(labels.unique()),
        paths=[pairs.index[i].path for i in needed],
    )
