"""Facts about one image file, read once: content hash, header, full decode, perceptual hash.

This runs in the validation worker processes. It records facts, not verdicts: whether a
fact is an error or a warning is policy (:mod:`ffjobs.data.checks`), so the facts can be
cached and re-judged under a different policy without re-reading the file.
"""

from __future__ import annotations

import functools
import hashlib
import io
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import simplejpeg
from PIL import Image, ImageFile, UnidentifiedImageError

from ffjobs.data.sources import PathEscapeError, Source

# Bump when the facts below change meaning, so cached facts are re-computed.
INSPECTOR_VERSION = 4

Facts = dict[str, Any]

JPEG_START = b"\xff\xd8\xff"


HASH_BITS = 256
"""dHash length: 16 rows x 16 horizontal gradients. 64 bits (the classic 8x8) cannot tell
thousands of aligned faces apart; 256 bits keep re-encoded copies closer than distinct faces."""


def difference_hash(image: Image.Image) -> str:
    """256-bit dHash as 64 hex digits: signs of horizontal gradients on a 17x16 gray thumbnail.

    A large image is first box-reduced by a whole factor to about 32 px (``Image.reduce``, in
    C), the block means a JPEG's DCT-scaled decode arrives as (see :data:`JPEG_DRAFT_SIZE`),
    so every format hashes alike.
    """
    factor = min(image.width // 32, image.height // 32)
    if factor > 1:
        image = image.reduce(factor)  # block means, as a JPEG's DCT-scaled decode gives
    if image.mode != "L":
        image = image.convert("L")
    small = image.resize((17, 16), Image.Resampling.BOX).tobytes()
    # frombuffer, not asarray: PIL's array interface costs more than the whole comparison.
    pixels = np.frombuffer(small, dtype=np.uint8).reshape(16, 17)
    return np.packbits(pixels[:, 1:] > pixels[:, :-1]).tobytes().hex()


def too_many_pixels(width: int, height: int, max_pixels: int) -> Facts | None:
    """The decompression-bomb facts of a header over the pixel limit, else ``None``."""
    if width * height <= max_pixels:
        return None
    detail = f"{width}x{height} = {width * height} pixels > {max_pixels}"
    return {"error": "decompression_bomb", "detail": detail}


JPEG_DRAFT_SIZE = (32, 32)
"""The smallest output a JPEG is decoded to (libjpeg's DCT scaling).

Scaling changes only the inverse DCT: libjpeg still entropy-decodes every coefficient of
every block of every component, which is where truncation and corrupt data show up, so a
scaled decode fails exactly when a full one does. The output is the image's block means
(8x8 at 1/8), all the perceptual hash needs; the full-size pixels are never needed here."""

JPEG_MODES = {"YCbCr": "RGB", "RGB": "RGB", "Gray": "L", "CMYK": "CMYK", "YCCK": "CMYK"}
"""libjpeg's colour space of a JPEG as the PIL mode the training loader would see."""


def inspect_jpeg(data: bytes, max_pixels: int) -> Facts | None:
    """Facts of a JPEG through libjpeg-turbo directly; ``None`` where PIL must diagnose.

    The fast path for the common format: PIL's header parsing alone (Python code) costs a
    third of a reduced decode. ``strict``: libjpeg's warnings ("Corrupt JPEG data",
    "Premature end of JPEG file") are errors here, where PIL would decode grey blocks.
    """
    try:
        height, width, colorspace, _ = simplejpeg.decode_jpeg_header(data)
    except ValueError:
        return None  # not a header libjpeg-turbo reads: PIL names what is wrong
    mode = JPEG_MODES.get(colorspace)
    if mode is None:
        return None
    facts: Facts = {"format": "JPEG", "width": width, "height": height, "mode": mode}
    if bomb := too_many_pixels(width, height, max_pixels):
        return {**facts, **bomb}
    min_width, min_height = JPEG_DRAFT_SIZE
    try:
        gray = simplejpeg.decode_jpeg(
            data, colorspace="GRAY", min_width=min_width, min_height=min_height, strict=True
        )
    except ValueError as exc:
        # "Premature end of JPEG file": the data stops early. "... of data segment" and the
        # other warnings: damage inside the file, which PIL would decode to grey blocks.
        kind = "truncated" if "premature end of jpeg file" in str(exc).lower() else "decode_error"
        return {**facts, "error": kind, "detail": str(exc)[:200]}
    rows, columns = gray.shape[:2]
    facts["dhash"] = difference_hash(Image.frombuffer("L", (columns, rows), gray, "raw", "L", 0, 1))
    return facts


def inspect_bytes(data: bytes, max_pixels: int, allowed_formats: frozenset[str]) -> Facts:
    """Facts about one file's bytes; the header is checked before anything is decoded."""
    if not data:
        return {"error": "zero_byte"}
    facts: Facts = {"sha256": hashlib.sha256(data).hexdigest()}
    if data[:3] == JPEG_START and "JPEG" in allowed_formats:
        jpeg = inspect_jpeg(data, max_pixels)
        if jpeg is not None:
            return {**facts, **jpeg}
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
        if bomb := too_many_pixels(width, height, max_pixels):
            return {**facts, **bomb}
        if image.format not in allowed_formats:
            return {**facts, "error": "unsupported_format", "detail": str(image.format)}
        if image.format == "JPEG":
            # Luminance only, DCT-scaled: chroma IDCT, upsampling and colour conversion
            # cannot fail, and the perceptual hash wants a small gray image anyway.
            image.draft("L" if image.mode == "RGB" else None, JPEG_DRAFT_SIZE)
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


def read_for_inspection(source: Source, path: str) -> bytes | Facts:
    """The file's bytes, or the facts of why it cannot be read."""
    try:
        return source.read_bytes(path)
    except PathEscapeError as exc:
        return {"error": "path_escape", "detail": str(exc)[:200]}
    except FileNotFoundError:
        return {"error": "missing_file"}
    except OSError as exc:
        return {"error": "cannot_open", "detail": f"read failed: {exc}"[:200]}


def inspect_paths(
    source: Source, paths: list[str], max_pixels: int, allowed_formats: frozenset[str]
) -> list[tuple[str, Facts]]:
    """Read and inspect ``paths`` in order; read failures become facts too.

    An object store answers each GET after a round trip, so a remote source's reads run on
    ``source.read_threads`` threads, that many requests in flight while this process decodes
    what has arrived. The threads live for one call: a process that forks workers later
    must have none.
    """
    threads = min(source.read_threads, len(paths))
    if threads <= 1:
        return [
            (path, _inspect(read_for_inspection(source, path), max_pixels, allowed_formats))
            for path in paths
        ]
    with ThreadPoolExecutor(threads, thread_name_prefix="ffjobs-read") as reader:
        reads = reader.map(functools.partial(read_for_inspection, source), paths)
        return [
            (path, _inspect(data, max_pixels, allowed_formats))
            for path, data in zip(paths, reads, strict=True)
        ]


def _inspect(data: bytes | Facts, max_pixels: int, allowed_formats: frozenset[str]) -> Facts:
    return data if isinstance(data, dict) else inspect_bytes(data, max_pixels, allowed_formats)
