"""Plant every defect ``ffjobs validate`` must find into a synthetic dataset, for tests and drills.

Writes the bad files beside the good ones, a ``manifest.jsonl`` (with splits, one leaking
identity, a traversal path and a missing file) that makes the manifest the dataset's layout,
and ``planted.json``: ``{check: [paths or identities]}`` of what was planted where.
"""

from __future__ import annotations

import io
import json
import os
import struct
import zlib
from pathlib import Path

import numpy as np
from PIL import Image, ImageEnhance

from ffjobs.data.faces import Identity, Variation, identity_name, render_face


def _png_chunk(kind: bytes, payload: bytes) -> bytes:
    crc = zlib.crc32(kind + payload) & 0xFFFFFFFF
    return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", crc)


def decompression_bomb_png(width: int, height: int) -> bytes:
    """A tiny PNG whose header claims ``width`` x ``height`` RGB pixels (the data is a stub)."""
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    stub = zlib.compress(b"\x00" * (1 + 3 * min(width, 1024)))
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", header)
        + _png_chunk(b"IDAT", stub)
        + _png_chunk(b"IEND", b"")
    )


def _encode(image: Image.Image, fmt: str, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def plant_defects(root: Path, identities: int, size: int, seed: int) -> dict[str, list[str]]:
    """Plant the defects into ``root`` (already holding ``identities`` identity folders)."""
    if identities < 12:
        raise ValueError("identities: --corrupt needs at least 12 identities to plant into")
    rng = np.random.default_rng([seed, 999_999])

    def face(i: int, extra: int) -> Image.Image:
        person = Identity.sample(np.random.default_rng([seed, i]))
        return render_face(
            person, Variation.sample(np.random.default_rng([seed, i, 1000 + extra])), size
        )

    def write(rel: str, data: bytes) -> str:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
        return rel

    planted: dict[str, list[str]] = {}

    def plant(check: str, rel: str) -> None:
        planted.setdefault(check, []).append(rel)

    ids = [identity_name(i) for i in range(identities)]
    good = _encode(face(0, 0), "JPEG", quality=90)
    plant("truncated", write(f"{ids[0]}/truncated.jpg", good[: len(good) * 6 // 10]))
    plant("zero_byte", write(f"{ids[1]}/empty.jpg", b""))
    plant("cannot_open", write(f"{ids[1]}/notes.jpg", b"not an image, just text\n" * 20))
    plant("extension_mismatch", write(f"{ids[2]}/really_png.jpg", _encode(face(2, 1), "PNG")))
    plant(
        "low_resolution", write(f"{ids[2]}/tiny.png", _encode(face(2, 2).resize((16, 16)), "PNG"))
    )
    wide = face(3, 3).resize((size * 3, size))
    plant("extreme_aspect", write(f"{ids[3]}/wide.png", _encode(wide, "PNG")))
    plant("non_rgb", write(f"{ids[3]}/gray.png", _encode(face(3, 4).convert("L"), "PNG")))
    plant("non_rgb", write(f"{ids[4]}/cmyk.jpg", _encode(face(4, 5).convert("CMYK"), "JPEG")))
    deep = Image.fromarray(np.asarray(face(4, 6).convert("L"), dtype=np.uint16) * 257)
    plant("non_rgb", write(f"{ids[4]}/deep16.png", _encode(deep, "PNG")))
    plant("non_rgb", write(f"{ids[5]}/alpha.png", _encode(face(5, 7).convert("RGBA"), "PNG")))
    plant("decompression_bomb", write(f"{ids[5]}/bomb.png", decompression_bomb_png(20_000, 20_000)))
    plant("unsupported_format", write(f"{ids[6]}/animated.gif", _encode(face(6, 8), "GIF")))
    broken = bytearray(_encode(face(6, 9), "PNG"))
    middle = len(broken) // 2
    broken[middle : middle + 64] = rng.integers(0, 256, 64, dtype=np.uint8).tobytes()
    plant("decode_error", write(f"{ids[6]}/broken.png", bytes(broken)))
    original = (root / ids[7] / "00.jpg").read_bytes()
    plant("exact_duplicate", write(f"{ids[7]}/copy_of_00.jpg", original))
    brighter = ImageEnhance.Brightness(Image.open(io.BytesIO(original)).convert("RGB")).enhance(
        1.08
    )
    plant("near_duplicate", write(f"{ids[8]}/near_copy.jpg", _encode(brighter, "JPEG", quality=80)))
    # near_copy.jpg is identity 8's file but looks like identity 7's 00.jpg: that is the point.
    lonely = "id_lonely"
    write(f"{lonely}/00.jpg", _encode(face(9, 10), "JPEG", quality=90))
    planted["small_identity"] = [lonely]

    outside = root.parent / f"{root.name}.outside"
    outside.mkdir(exist_ok=True)
    (outside / "secret.png").write_bytes(_encode(face(10, 11), "PNG"))
    link = root / ids[9] / "escape.jpg"
    if link.is_symlink() or link.exists():
        link.unlink()
    os.symlink(os.path.relpath(outside / "secret.png", link.parent), link)
    plant("path_escape", f"{ids[9]}/escape.jpg")
    traversal = f"../{root.name}.outside/secret.png"
    plant("path_escape", traversal)
    plant("missing_file", f"{ids[11]}/ghost.jpg")

    _write_manifest(
        root, ids, traversal, leak=ids[10], lonely=lonely, missing=f"{ids[11]}/ghost.jpg"
    )
    planted["identity_leakage"] = [ids[10]]
    (root / "planted.json").write_text(json.dumps(planted, indent=2, sort_keys=True) + "\n")
    return planted


def _write_manifest(
    root: Path, ids: list[str], traversal: str, leak: str, lonely: str, missing: str
) -> None:
    """Every image with a split by identity (every 4th identity is val), plus the planted rows."""
    rows = []
    for folder in [*ids, lonely]:
        split = "val" if folder in ids and ids.index(folder) % 4 == 3 else "train"
        for path in sorted((root / folder).iterdir()):
            rows.append({"path": f"{folder}/{path.name}", "identity": folder, "split": split})
    for row in rows:
        if row["identity"] == leak and row["path"].endswith("/00.jpg"):
            row["split"] = "val"  # one image of a train identity in val: leakage
    rows.append({"path": traversal, "identity": ids[9], "split": "train"})
    rows.append({"path": missing, "identity": ids[11], "split": "val"})
    text = "".join(json.dumps(row) + "\n" for row in rows)
    (root / "manifest.jsonl").write_text(text)
