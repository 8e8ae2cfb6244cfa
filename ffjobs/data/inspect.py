"""Facts about one image file, read once: content hash, header, full decode, perceptual hash.

This runs in the validation worker processes. It records facts, not verdicts: whether a
fact is an error or a warning is policy (:mod:`ffjobs.data.checks`), so the facts can be
cached and re-judged under a different policy without re-reading the file.
"""

from __future__ import annotations

import hashlib
import io
import json
import warnings
from typing import Any

import numpy as np
from PIL import Image, ImageFile, UnidentifiedImageError

from ffjobs.data.sources import PathEscapeError, Source

# Bump when the facts below change meaning, so cached facts are re-computed.
INSPECTOR_VERSION = 3

Facts = dict[str, Any]


HASH_BITS = 256
"""dHash length: 16 rows x 16 horizontal gradients. 64 bits (the classic 8x8) cannot tell
thousands of aligned faces apart; 256 bits keep re-encoded copies closer than distinct faces."""


def difference_hash(image: Image.Image) -> str:
    """256-bit dHash as 64 hex digits: signs of horizontal gradients on a 17x16 gray thumbnail.

    The thumbnail averages a 68x64 point grid instead of every pixel: the image has just been
    fully decoded, and averaging all of it again would cost a third of the decode.
    """
    grid = image.resize((68, 64), Image.Resampling.NEAREST).convert("L")
    small = grid.resize((17, 16), Image.Resampling.BOX).tobytes()
    # frombuffer, not asarray: PIL's array interface costs more than the whole comparison.
    pixels = np.frombuffer(small, dtype=np.uint8).reshape(16, 17)
    return np.packbits(pixels[:, 1:] > pixels[:, :-1]).tobytes().hex()


def inspect_bytes(data: bytes, max_pixels: int, allowed_formats: frozenset[str]) -> Facts:
    """Facts about one file's bytes; the header is checked before anything is decoded."""
    if not data:
        return {"error": "zero_byte"}
    facts: Facts = {"sha256": hashlib.sha256(data).hexdigest()}
    ImageFile.LOAD_TRUNCATED_IMAGES = False
    with warnings.catch_warnings():
        # Our own pixel limit decides; PIL's warning would only add noise.
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            image = Image.open(io.BytesIO(data))
        except Image.DecompressionBombError as exc:
            return {**facts, "error": "decompression_bomb", "detail": str(exc)[:200]}
        except UnidentifiedImageError as exc:
            return {**facts, "error": "cannot_open", "detail": str(exc)[:200]}
        except (OSError, SyntaxError, ValueError) as exc:
            # A header that ends early is a truncated image, not an unknown format.
            kind = "truncated" if "truncat" in str(exc).lower() else "cannot_open"
            return {**facts, "error": kind, "detail": str(exc)[:200]}
        width, height = image.size
        facts.update(format=image.format, width=width, height=height, mode=image.mode)
        if width * height > max_pixels:
            return {
                **facts,
                "error": "decompression_bomb",
                "detail": f"{width}x{height} = {width * height} pixels > {max_pixels}",
            }
        if image.format not in allowed_formats:
            return {**facts, "error": "unsupported_format", "detail": str(image.format)}
        if image.format == "JPEG" and image.mode == "RGB":
            # libjpeg still entropy-decodes every block of every component (where truncation
            # and corrupt data show up) but emits luminance only: chroma IDCT, upsampling and
            # colour conversion cannot fail, and the perceptual hash wants gray anyway.
            image.draft("L", image.size)
        try:
            image.load()
        except OSError as exc:
            kind = "truncated" if "truncat" in str(exc).lower() else "decode_error"
            return {**facts, "error": kind, "detail": str(exc)[:200]}
        except (SyntaxError, ValueError, EOFError) as exc:
            return {**facts, "error": "decode_error", "detail": str(exc)[:200]}
    try:
        facts["dhash"] = difference_hash(image)
    except (OSError, ValueError):
        facts["dhash"] = None  # a mode PIL cannot reduce to grayscale; not a defect in itself
    return facts


def inspect_file(
    source: Source, path: str, max_pixels: int, allowed_formats: frozenset[str]
) -> Facts:
    """Read one file through its source and inspect it; read failures become facts too."""
    try:
        data = source.read_bytes(path)
    except PathEscapeError as exc:
        return {"error": "path_escape", "detail": str(exc)[:200]}
    except FileNotFoundError:
        return {"error": "missing_file"}
    except OSError as exc:
        return {"error": "cannot_open", "detail": f"read failed: {exc}"[:200]}
    return inspect_bytes(data, max_pixels, allowed_formats)


# --------------------------------------------------------------------------- worker processes

_worker: dict[str, Any] = {}


def init_worker(source: Source, max_pixels: int, allowed_formats: frozenset[str]) -> None:
    """Process-pool initializer: the source and limits travel once per worker, not per file."""
    _worker.update(source=source, max_pixels=max_pixels, allowed_formats=allowed_formats)


def inspect_chunk(paths: list[str]) -> list[tuple[str, Facts, str]]:
    """Inspect a chunk of paths in a worker set up by :func:`init_worker`.

    Each result carries its facts already JSON-encoded for the cache: the parent shares the
    cores with the workers, so whatever it does per file slows the whole pool.
    """
    source, limit, formats = _worker["source"], _worker["max_pixels"], _worker["allowed_formats"]
    results = []
    for path in paths:
        facts = inspect_file(source, path, limit, formats)
        results.append((path, facts, json.dumps(facts)))
    return results
