"""Pre-train the project's own small identity encoder on an identity-folder dataset.

ffjobs downloads nothing, so demos and tests get their identity encoder from here: a narrow
iresnet (``ModelConfig.identity_width``) trained as a classifier of the dataset's identities
with a CosFace head (normalised embeddings, additive cosine margin), which makes the cosine
between embeddings a meaningful identity similarity. The saved file holds only the backbone's
state_dict in the arcface_torch layout, loadable with ``torch.load(weights_only=True)``.

Accuracy is measured on held-out images (the last ``heldout_per_identity`` images of every
identity), by nearest class centre (the head's weights) in cosine.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Collection
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch import Tensor, nn

from ffjobs.config.model import ModelConfig
from ffjobs.errors import UserError
from ffjobs.models.identity import build_identity_backbone
from ffjobs.shared_inputs import temporary_sibling

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp")


@dataclass
class IdentityPretrainResult:
    out: str
    identities: int
    train_images: int
    heldout_images: int
    steps: int
    seconds: float
    final_loss: float
    train_accuracy: float
    heldout_accuracy: float
    chance_accuracy: float
    heldout_same_identity_cosine: float
    """Mean cosine between held-out embeddings of the same identity."""
    heldout_other_identity_cosine: float
    """Mean cosine between held-out embeddings of different identities."""

    def to_dict(self) -> dict:
        return asdict(self)


def load_identity_folders(
    root: str | Path, size: int, identities: Collection[str] | None = None
) -> tuple[Tensor, Tensor, list[str]]:
    """Read ``root/<identity>/<image>`` into ``(images in [-1, 1], labels, identity names)``;
    only the folders named in ``identities`` when it is given."""
    root = Path(root)
    if not root.is_dir():
        raise UserError(
            f"{root}: dataset directory not found; generate it with "
            f"'ffjobs data synth' or pass --data DIR with identity folders"
        )
    names = sorted(
        p.name
        for p in root.iterdir()
        if p.is_dir() and (identities is None or p.name in identities)
    )
    images, labels = [], []
    for label, name in enumerate(names):
        files = sorted(p for p in (root / name).iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        for file in files:
            with Image.open(file) as image:
                rgb = image.convert("RGB").resize((size, size), Image.Resampling.BILINEAR)
            images.append(np.asarray(rgb, dtype=np.uint8))
            labels.append(label)
    if len(names) < 2 or not images:
        raise UserError(
            f"{root}: need at least 2 identity folders with images, found "
            f"{len(names)} folders and {len(images)} images"
        )
    batch = torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).float() / 127.5 - 1.0
    return batch.contiguous(), torch.tensor(labels), names


def split_heldout_images(labels: Tensor, heldout_per_identity: int) -> tuple[Tensor, Tensor]:
    """Indices of training and held-out images: the last images of each identity are held out."""
    train, heldout = [], []
    for label in labels.unique():
        members = (labels == label).nonzero().flatten()
        keep = max(1, len(members) - heldout_per_identity)
        train.append(members[:keep])
        heldout.append(members[keep:])
    return torch.cat(train), torch.cat(heldout)


class CosFaceHead(nn.Module):
    """Logits ``scale * (cos(embedding, class centre) - margin * onehot)``."""

    def __init__(self, embedding_dim: int, classes: int, scale: float = 16.0, margin: float = 0.2):
        super().__init__()
        self.centres = nn.Parameter(torch.randn(classes, embedding_dim) * 0.01)
        self.scale, self.margin = scale, margin

    def cosines(self, embeddings: Tensor) -> Tensor:
        return F.normalize(embeddings, dim=1) @ F.normalize(self.centres, dim=1).t()

    def forward(self, embeddings: Tensor, labels: Tensor) -> Tensor:
        cosines = self.cosines(embeddings)
        margin = F.one_hot(labels, cosines.shape[1]).to(cosines.dtype) * self.margin
        return F.cross_entropy(self.scale * (cosines - margin), labels)


def _augment(images: Tensor, generator: torch.Generator) -> Tensor:
    """Random horizontal flip and a shift of up to 1/16 of the side (zero-filled)."""
    flip = torch.rand(len(images), generator=generator) < 0.5
    images = torch.where(flip[:, None, None, None], images.flip(-1), images)
    side = images.shape[-1]
    limit = max(1, side // 16)
    dx, dy = (int(v) for v in torch.randint(-limit, limit + 1, (2,), generator=generator))
    padded = F.pad(images, (limit, limit, limit, limit), value=-1.0)
    return padded[..., limit + dy : limit + dy + side, limit + dx : limit + dx + side]


@torch.no_grad()
def _evaluate(backbone: nn.Module, head: CosFaceHead, images: Tensor, labels: Tensor):
    backbone.eval()
    device = next(backbone.parameters()).device
    embeddings = torch.cat([backbone(chunk.to(device)).cpu() for chunk in images.split(64)])
    head = head.cpu()
    accuracy = float((head.cosines(embeddings).argmax(1) == labels).float().mean())
    normed = F.normalize(embeddings, dim=1)
    cosines = normed @ normed.t()
    same = labels[:, None] == labels[None, :]
    off_diagonal = ~torch.eye(len(labels), dtype=torch.bool)
    same_cos = float(cosines[same & off_diagonal].mean()) if (same & off_diagonal).any() else 0.0
    other_cos = float(cosines[~same].mean()) if (~same).any() else 0.0
    return accuracy, same_cos, other_cos


def train_identity_encoder(
    cfg: ModelConfig,
    data_root: str | Path,
    out: str | Path,
    *,
    steps: int = 300,
    batch_size: int = 32,
    lr: float = 2e-3,
    seed: int = 0,
    heldout_per_identity: int = 2,
    identities: Collection[str] | None = None,
    on_step: Callable[[int, float], None] | None = None,
) -> IdentityPretrainResult:
    """Train ``cfg``'s identity backbone as an identity classifier of ``identities`` (default:
    every identity folder of ``data_root``), on the GPU when there is one; save its
    state_dict (CPU tensors) at ``out``."""
    started = time.perf_counter()
    torch.manual_seed(seed)
    images, labels, names = load_identity_folders(data_root, cfg.identity_input_size, identities)
    train_idx, heldout_idx = split_heldout_images(labels, heldout_per_identity)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # 256 px presets
    # channels_last: the convolutions, batch norms and PReLUs of a step take about a fifth less
    # time on the CPU than in NCHW (dev/README.md)
    backbone = build_identity_backbone(cfg).to(device, memory_format=torch.channels_last)
    head = CosFaceHead(cfg.identity_dim, len(names)).to(device)
    params = [p for p in backbone.parameters() if p.requires_grad] + list(head.parameters())
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=5e-4)
    warmup = max(1, steps // 20)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda s: (
            min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps))
        ),
    )
    sampler = torch.Generator().manual_seed(seed)
    loss = torch.zeros(())
    for step in range(steps):
        backbone.train()
        pick = train_idx[torch.randint(len(train_idx), (batch_size,), generator=sampler)]
        batch = _augment(images[pick], sampler).to(
            device, memory_format=torch.channels_last, non_blocking=True
        )
        loss = head(backbone(batch), labels[pick].to(device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
        if on_step is not None:
            on_step(step + 1, loss.item())

    train_accuracy, _, _ = _evaluate(backbone, head, images[train_idx], labels[train_idx])
    heldout_accuracy, same_cos, other_cos = _evaluate(
        backbone, head, images[heldout_idx], labels[heldout_idx]
    )
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    temporary = temporary_sibling(out)  # unique: two trainings into one file do not mix
    try:
        weights = {k: v.cpu().contiguous() for k, v in backbone.state_dict().items()}
        torch.save(weights, temporary)
        temporary.replace(out)
    finally:
        temporary.unlink(missing_ok=True)
    return IdentityPretrainResult(
        out=str(out),
        identities=len(names),
        train_images=len(train_idx),
        heldout_images=len(heldout_idx),
        steps=steps,
        seconds=round(time.perf_counter() - started, 2),
        final_loss=loss.item(),
        train_accuracy=train_accuracy,
        heldout_accuracy=heldout_accuracy,
        chance_accuracy=1.0 / len(names),
        heldout_same_identity_cosine=same_cos,
        heldout_other_identity_cosine=other_cos,
    )
