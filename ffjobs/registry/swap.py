"""Try a registered model on two face images: ``ffjobs swap --model URI SOURCE TARGET OUT``.

Images of any size are centre-cropped to a square and resized to the model's resolution; the
fused face is written at that resolution, and its identity is compared (with the model's own
identity encoder) to the source's and the target's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ffjobs.config.tracking import TrackingConfig
from ffjobs.errors import UserError


def load_face_swap(tracking: TrackingConfig, uri: str) -> Any:
    """The :class:`~ffjobs.models.swap.FaceSwap` at ``uri`` (``models:/NAME@ALIAS``,
    ``models:/NAME/V``, ``runs:/RUN_ID/face_swap``), on the CPU: its files downloaded, its
    recorded config read as data, the module built by ffjobs and the weights loaded as
    tensors only (:func:`~ffjobs.registry.weights.read_face_swap`); nothing is unpickled."""
    import tempfile

    import mlflow.artifacts
    from mlflow.exceptions import MlflowException

    from ffjobs.registry.client import fluent_tracking, is_not_found
    from ffjobs.registry.weights import read_face_swap
    from ffjobs.tracking.mlflow_logger import mlflow_client

    mlflow_client(tracking)  # the same quiet-stdout and sqlite-folder set-up as every client
    with tempfile.TemporaryDirectory(prefix="ffjobs-model-") as tmp:
        try:
            with fluent_tracking(tracking.tracking_uri):
                folder = mlflow.artifacts.download_artifacts(
                    artifact_uri=uri,
                    dst_path=tmp,
                    tracking_uri=tracking.tracking_uri,
                    registry_uri=tracking.tracking_uri,
                )
        except MlflowException as exc:
            what = "not found" if is_not_found(exc) else str(exc).splitlines()[0]
            raise UserError(
                f"--model {uri}: {what} (tracking store {tracking.tracking_uri})"
            ) from None
        except OSError as exc:  # a runs:/ path without a model in it
            raise UserError(f"--model {uri}: no model there ({exc.strerror or exc})") from None
        if not Path(folder).is_dir():
            raise UserError(f"--model {uri}: a single file, not a model folder")
        return read_face_swap(Path(folder), uri)


def open_image(path: Path) -> Any:
    """``path`` as an RGB PIL image; a UserError naming the file if it cannot be read."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as opened:
            return opened.convert("RGB")
    except FileNotFoundError:
        raise UserError(f"{path}: no such image file") from None
    except IsADirectoryError:
        raise UserError(f"{path}: is a folder, not an image file") from None
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise UserError(f"{path}: not a readable image ({exc})") from None


def face_tensor(image: Any, resolution: int) -> Any:
    """A PIL image as a ``(1, 3, R, R)`` float tensor in [-1, 1]: its centre square, resized."""
    import numpy as np
    import torch
    from PIL import Image

    from ffjobs.data.dataset import to_model_images

    side = min(image.size)
    left, top = (image.width - side) // 2, (image.height - side) // 2
    square = image.crop((left, top, left + side, top + side))
    if side != resolution:
        square = square.resize((resolution, resolution), Image.Resampling.BICUBIC)
    pixels = torch.from_numpy(np.asarray(square).copy()).permute(2, 0, 1)
    return to_model_images(pixels[None])


def read_face(path: Path, resolution: int) -> Any:
    """:func:`open_image` then :func:`face_tensor`."""
    return face_tensor(open_image(path), resolution)


def to_uint8(images: Any) -> Any:
    """``[-1, 1]`` floats to 0..255 bytes, as an image file stores them."""
    import torch

    return ((images.clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)


def check_output(out: Path, *, force: bool) -> None:
    """Refuse an OUT that would overwrite a file (unless ``force``) or has no folder."""
    from PIL import Image

    if out.suffix.lower() not in Image.registered_extensions():
        raise UserError(f"{out}: unknown image type {out.suffix or '(none)'}; use .png or .jpg")
    if out.is_dir():
        raise UserError(f"{out}: is a folder; give a file name such as {out / 'fused.png'}")
    if out.exists() and not force:
        raise UserError(f"{out}: exists; pass --force to overwrite it")
    if not out.parent.is_dir():
        raise UserError(f"{out.parent}: no such folder for the output")


@dataclass(frozen=True)
class SwapResult:
    out: str
    resolution: int
    cosine_to_source: float
    """Identity cosine of the written output to the source image."""
    cosine_to_target: float
    source_to_target: float
    """The same between the two inputs: how alike the two identities already were."""


def swap_files(model: Any, source: Any, target: Any, out: Path, *, force: bool) -> SwapResult:
    """Fuse ``source``'s identity into ``target`` (PIL images), write it to ``out``, and
    compare the identity of what was written with both inputs'."""
    import torch
    from PIL import Image

    from ffjobs.data.dataset import to_model_images
    from ffjobs.models.losses import identity_cosine

    check_output(out, force=force)
    resolution = model.resolution
    source_image, target_image = face_tensor(source, resolution), face_tensor(target, resolution)
    with torch.no_grad():
        written = to_uint8(model(source_image, target_image))
        Image.fromarray(written[0].permute(1, 2, 0).numpy()).save(out)
        # the identity of what was written (8-bit), not of the float output before it
        encoder = model.identity_encoder
        fused, src, tgt = (
            encoder(x) for x in (to_model_images(written), source_image, target_image)
        )
    return SwapResult(
        str(out),
        resolution,
        identity_cosine(fused, src).item(),
        identity_cosine(fused, tgt).item(),
        identity_cosine(src, tgt).item(),
    )
