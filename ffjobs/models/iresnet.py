"""Face-recognition backbone whose ``state_dict`` matches insightface's arcface_torch iresnet.

Keys and shapes equal ``recognition/arcface_torch/backbones/iresnet.py`` at ``width=1.0``,
``input_size=112`` and ``embedding_dim=512``, so released ArcFace weights load with
``load_state_dict(strict=True)``. Input: RGB ``(N, 3, S, S)`` already normalised as
``(x - 0.5) / 0.5`` with ``x`` in ``[0, 1]`` (which is exactly ffjobs' ``[-1, 1]`` images).
Output: ``(N, embedding_dim)`` un-normalised embeddings.

``width < 1`` scales every channel count down; with it the project trains a quick encoder of its
own on CPU (``ffjobs models train-identity``). It then no longer loads released weights.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

STAGE_BLOCKS = {
    "iresnet18": (2, 2, 2, 2),
    "iresnet34": (3, 4, 6, 3),
    "iresnet50": (3, 4, 14, 3),
    "iresnet100": (3, 13, 30, 3),
}
STAGE_PLANES = (64, 128, 256, 512)
BN_EPS = 1e-5


class IBasicBlock(nn.Module):
    """Pre-activation-style block: BN, conv3x3, BN, PReLU, conv3x3 (strided), BN, + skip."""

    def __init__(self, in_ch: int, out_ch: int, stride: int, downsample: nn.Module | None):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_ch, eps=BN_EPS)
        self.conv1 = nn.Conv2d(in_ch, out_ch, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_ch, eps=BN_EPS)
        self.prelu = nn.PReLU(out_ch)
        self.conv2 = nn.Conv2d(out_ch, out_ch, 3, stride=stride, padding=1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_ch, eps=BN_EPS)
        self.downsample = downsample

    def forward(self, x: Tensor) -> Tensor:
        out = self.bn3(self.conv2(self.prelu(self.bn2(self.conv1(self.bn1(x))))))
        skip = x if self.downsample is None else self.downsample(x)
        return out + skip


class IResNet(nn.Module):
    """Stem, four stages of :class:`IBasicBlock` (each halves the size), BN, FC, BN1d."""

    def __init__(
        self,
        blocks: tuple[int, int, int, int],
        *,
        width: float = 1.0,
        input_size: int = 112,
        embedding_dim: int = 512,
        dropout: float = 0.0,
    ):
        super().__init__()
        planes = [max(8, round(p * width)) for p in STAGE_PLANES]
        self.conv1 = nn.Conv2d(3, planes[0], 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes[0], eps=BN_EPS)
        self.prelu = nn.PReLU(planes[0])
        in_ch = planes[0]
        for index, (count, out_ch) in enumerate(zip(blocks, planes, strict=True), start=1):
            setattr(self, f"layer{index}", self._stage(in_ch, out_ch, count))
            in_ch = out_ch
        self.bn2 = nn.BatchNorm2d(in_ch, eps=BN_EPS)
        self.dropout = nn.Dropout(p=dropout, inplace=True)
        final_side = input_size // 16
        self.fc = nn.Linear(in_ch * final_side * final_side, embedding_dim)
        self.features = nn.BatchNorm1d(embedding_dim, eps=BN_EPS)
        nn.init.constant_(self.features.weight, 1.0)
        self.features.weight.requires_grad = False  # as in arcface_torch: a fixed-scale BN
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.normal_(module.weight, 0, 0.1)

    @staticmethod
    def _stage(in_ch: int, out_ch: int, count: int) -> nn.Sequential:
        downsample = nn.Sequential(
            nn.Conv2d(in_ch, out_ch, 1, stride=2, bias=False),
            nn.BatchNorm2d(out_ch, eps=BN_EPS),
        )
        layers = [IBasicBlock(in_ch, out_ch, 2, downsample)]
        layers += [IBasicBlock(out_ch, out_ch, 1, None) for _ in range(count - 1)]
        return nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        x = self.prelu(self.bn1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = self.dropout(torch.flatten(self.bn2(x), 1))
        return self.features(self.fc(x))


def iresnet(
    arch: str, *, width: float = 1.0, input_size: int = 112, embedding_dim: int = 512
) -> IResNet:
    """Build ``iresnet18/34/50/100`` (``width=1``, 112, 512: the arcface_torch layout)."""
    if arch not in STAGE_BLOCKS:
        raise ValueError(f"unknown identity architecture {arch!r}; one of {sorted(STAGE_BLOCKS)}")
    if input_size % 16:
        raise ValueError(f"input_size must be a multiple of 16, got {input_size}")
    return IResNet(
        STAGE_BLOCKS[arch], width=width, input_size=input_size, embedding_dim=embedding_dim
    )
