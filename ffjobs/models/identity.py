"""The frozen identity encoder used by the identity loss, and loading its weights.

``IdentityEncoder(images) -> embeddings``: images ``(N, 3, H, W)`` in ``[-1, 1]`` at any size are
resized to the backbone's input size (bilinear, no antialiasing: cheap and differentiable)
and embedded. The encoder is frozen: its parameters never require grad and it stays in eval
mode even when a caller runs ``.train()`` on it, so batch norm uses its running statistics and
gradients still flow through it to the fused images.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ffjobs.config.model import ModelConfig
from ffjobs.errors import UserError
from ffjobs.models.iresnet import IBasicBlock, IResNet, iresnet

_SHOWN_KEYS = 5


class IdentityWeightsError(UserError):
    """An identity-encoder weight file that is missing, unreadable or of another layout."""


def fold_batchnorm(backbone: IResNet) -> IResNet:
    """Fold every batch norm that follows a conv or linear layer into it (exact in eval mode).

    Frozen, the encoder's batch norms are fixed affine maps; each is a full read and write of
    an activation in forward and again in backward. Folding leaves only the one batch norm
    per block that precedes a zero-padded conv (folding that one would change the borders).
    The module is changed in place; its state_dict no longer has the arcface_torch layout, so
    load weights before folding.
    """
    from torch.nn.utils.fusion import fuse_conv_bn_eval, fuse_linear_bn_eval

    backbone.eval()
    backbone.conv1 = fuse_conv_bn_eval(backbone.conv1, backbone.bn1)
    backbone.bn1 = nn.Identity()
    for block in backbone.modules():
        if isinstance(block, IBasicBlock):
            block.conv1 = fuse_conv_bn_eval(block.conv1, block.bn2)
            block.conv2 = fuse_conv_bn_eval(block.conv2, block.bn3)
            block.bn2 = block.bn3 = nn.Identity()
            if block.downsample is not None:
                conv, bn = block.downsample
                block.downsample = fuse_conv_bn_eval(conv, bn)
    # bn2 (per channel, before flatten) and the BatchNorm1d after fc are both affine maps
    # around fc: fold them into its weight columns and bias.
    bn = backbone.bn2
    scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
    shift = bn.bias - bn.running_mean * scale
    spatial = backbone.fc.in_features // scale.numel()
    with torch.no_grad():
        fc = nn.Linear(backbone.fc.in_features, backbone.fc.out_features).to(scale).eval()
        fc.weight.copy_(backbone.fc.weight * scale.repeat_interleave(spatial)[None, :])
        fc.bias.copy_(backbone.fc.bias + backbone.fc.weight @ shift.repeat_interleave(spatial))
    backbone.fc = fuse_linear_bn_eval(fc, backbone.features)
    backbone.bn2 = backbone.features = nn.Identity()
    return backbone


class IdentityEncoder(nn.Module):
    """Frozen iresnet behind a resize to its input size; see the module docstring."""

    def __init__(self, backbone: IResNet, input_size: int, *, fold: bool = True):
        super().__init__()
        self.backbone = fold_batchnorm(backbone) if fold else backbone
        self.input_size = input_size
        self.requires_grad_(False)
        self.eval()

    def train(self, mode: bool = True) -> IdentityEncoder:
        """Stay in eval mode whatever the caller asks: the encoder is a fixed measuring tool."""
        return super().train(False)

    def forward(self, images: Tensor) -> Tensor:
        if images.shape[-2:] != (self.input_size, self.input_size):
            images = F.interpolate(
                images,
                size=(self.input_size, self.input_size),
                mode="bilinear",
                align_corners=False,
                antialias=False,
            )
        return self.backbone(images)


def build_identity_backbone(cfg: ModelConfig) -> IResNet:
    """The iresnet ``cfg`` describes, randomly initialised."""
    return iresnet(
        cfg.identity_arch,
        width=cfg.identity_width,
        input_size=cfg.identity_input_size,
        embedding_dim=cfg.identity_dim,
    )


def _describe(keys: list[str]) -> str:
    shown = ", ".join(keys[:_SHOWN_KEYS])
    more = f" (+{len(keys) - _SHOWN_KEYS} more)" if len(keys) > _SHOWN_KEYS else ""
    return shown + more


def read_state_dict(path: str | Path, section: str = "model") -> dict[str, Tensor]:
    """Read a state_dict file with ``torch.load(weights_only=True)``; errors are one line
    (naming ``<section>.identity_weights``, the setting that points at the file)."""
    path = Path(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise IdentityWeightsError(
            f"{path}: identity encoder weights not found; set {section}.identity_weights to an "
            f"arcface_torch state_dict or create one with 'ffjobs models train-identity --out "
            f"{path}'"
        ) from None
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError, ValueError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise IdentityWeightsError(
            f"{path}: cannot load identity encoder weights with torch.load(weights_only=True) "
            f"({reason}); it must be a plain state_dict of tensors"
        ) from None
    if (
        isinstance(state, Mapping)
        and "state_dict" in state
        and isinstance(state["state_dict"], Mapping)
    ):
        state = state["state_dict"]
    if not isinstance(state, Mapping) or not all(isinstance(v, Tensor) for v in state.values()):
        raise IdentityWeightsError(
            f"{path}: expected a state_dict (mapping of names to tensors), got "
            f"{type(state).__name__}"
        )
    state = dict(state)
    if state and all(key.startswith("module.") for key in state):  # saved from a DDP wrapper
        state = {key.removeprefix("module."): value for key, value in state.items()}
    return state


def load_identity_weights(
    backbone: IResNet, path: str | Path, arch: str = "", section: str = "model"
) -> None:
    """Load ``path`` into ``backbone`` strictly; a layout mismatch names the keys, the file and
    the ``<section>.identity_*`` settings that describe the shape."""
    state = read_state_dict(path, section)
    expected = backbone.state_dict()
    # BN step counters are bookkeeping; files saved without them are still complete.
    missing = [k for k in expected if k not in state and not k.endswith("num_batches_tracked")]
    unexpected = [k for k in state if k not in expected]
    mismatched = [
        f"{k} (file {list(state[k].shape)}, model {list(expected[k].shape)})"
        for k in expected
        if k in state and state[k].shape != expected[k].shape
    ]
    if missing or unexpected or mismatched:
        problems = []
        if missing:
            problems.append(f"missing keys: {_describe(missing)}")
        if unexpected:
            problems.append(f"unexpected keys: {_describe(unexpected)}")
        if mismatched:
            problems.append(f"shape mismatch: {_describe(mismatched)}")
        raise IdentityWeightsError(
            f"{path}: does not fit the identity encoder {arch or 'iresnet'}: "
            + "; ".join(problems)
            + f"; check {section}.identity_arch, identity_width, identity_input_size and "
            "identity_dim"
        )
    for key, value in expected.items():
        state.setdefault(key, value)
    backbone.load_state_dict(state, strict=True)


def build_identity_encoder(
    cfg: ModelConfig, *, load_weights: bool = True, section: str = "model"
) -> IdentityEncoder:
    """The frozen encoder ``cfg`` describes, with ``cfg.identity_weights`` loaded if set
    (``section``: the config section those settings came from, for error messages)."""
    backbone = build_identity_backbone(cfg)
    if cfg.identity_weights is None:  # random by configuration: it stands in for a trained one
        calibrate_batchnorm(backbone, cfg.identity_input_size)
    elif load_weights:
        load_identity_weights(backbone, cfg.identity_weights, cfg.identity_arch, section)
    return IdentityEncoder(backbone, cfg.identity_input_size)


CALIBRATION_IMAGES = 16


def calibrate_batchnorm(backbone: IResNet, input_size: int) -> IResNet:
    """Give a randomly initialised backbone's batch norms the statistics of its own activations.

    Training leaves each batch norm holding the mean and variance of what reaches it; fresh
    ones hold 0 and 1, so in eval mode every block of a random iresnet50 multiplies its input
    and the embeddings reach about 1e26 (whose squares overflow float32, see
    :func:`ffjobs.models.numerics.unit_rows`): an encoder like no trained one. One forward pass
    in training mode over random images in [-1, 1] sets the statistics (cumulative averages);
    afterwards embeddings are of the order of one and those of different random images have
    cosines of about 0.2. The images come from a generator of their own, so the global random
    stream, and every weight drawn after this, are as before.
    """
    weight = next(backbone.parameters())
    if weight.device.type == "meta":  # shapes only (FLOP counts): no values to calibrate
        return backbone
    norms = [m for m in backbone.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    momenta = [m.momentum for m in norms]
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None  # a cumulative average: exactly this pass's statistics
    images = torch.rand(  # on the host, whatever the default device (the trainer builds
        # models inside `with device:`, where a host generator cannot draw): the same images
        # on every device, moved to the weights' below
        CALIBRATION_IMAGES,
        3,
        input_size,
        input_size,
        generator=torch.Generator().manual_seed(0),
        device="cpu",
    )
    backbone.train()
    with torch.no_grad():
        backbone(images.mul(2).sub(1).to(weight.device, weight.dtype))
    for norm, momentum in zip(norms, momenta, strict=True):
        norm.momentum = momentum
    return backbone.eval()
