"""Facts about one file: the libjpeg-turbo fast path agrees with PIL and misses no damage."""

from __future__ import annotations

import io
import time

import numpy as np
import pytest
import simplejpeg
from PIL import Image

from ffjobs.data import inspect
from ffjobs.data.faces import Identity, Variation, render_face
from ffjobs.data.inspect import inspect_bytes, inspect_paths

FORMATS = frozenset({"JPEG", "PNG"})
LIMIT = 100_000_000


def face(seed: int, size: int = 256) -> Image.Image:
    person = Identity.sample(np.random.default_rng([seed]))
    return render_face(person, Variation.sample(np.random.default_rng([seed, 1])), size)


def encode(image: Image.Image, fmt: str, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def pil_facts(data: bytes) -> dict:
    with Image.open(io.BytesIO(data)) as image:
        return {
            "format": image.format,
            "width": image.width,
            "height": image.height,
            "mode": image.mode,
        }


def hamming(a: str, b: str) -> int:
    return bin(int(a, 16) ^ int(b, 16)).count("1")


@pytest.mark.parametrize(
    "mode, options",
    [("RGB", {}), ("RGB", {"progressive": True}), ("L", {}), ("CMYK", {})],
    ids=["baseline", "progressive", "gray", "cmyk"],
)
def test_jpeg_fast_path_reports_what_pil_reports(mode, options):
    data = encode(face(1, 200).convert(mode), "JPEG", quality=90, **options)
    facts = inspect_bytes(data, LIMIT, FORMATS)
    assert "error" not in facts
    assert {k: facts[k] for k in ("format", "width", "height", "mode")} == pil_facts(data)
    assert len(facts["dhash"]) == 64


def test_jpeg_is_decoded_reduced_and_gray(monkeypatch):
    shapes = []
    real = simplejpeg.decode_jpeg

    def spying_decode(data, **kwargs):
        out = real(data, **kwargs)
        shapes.append(out.shape)
        return out

    monkeypatch.setattr(inspect.simplejpeg, "decode_jpeg", spying_decode)
    inspect_bytes(encode(face(2, 512), "JPEG", quality=90), LIMIT, FORMATS)
    assert shapes == [(64, 64, 1)]  # 1/8 of 512: entropy-decoded in full, no full-size IDCT


def damaged(data: bytes, how: str) -> bytes:
    middle = len(data) // 2
    broken = bytearray(data)
    if how == "end marker inside":
        broken[middle : middle + 2] = b"\xff\xd9"
    else:  # "random run N". Many random runs decode without a complaint from any decoder;
        # these two are ones libjpeg notices (a bad segment end, extraneous bytes).
        broken[middle : middle + 64] = np.random.default_rng(int(how.split()[-1])).bytes(64)
    return bytes(broken)


@pytest.mark.parametrize("how", ["end marker inside", "random run 1", "random run 4"])
def test_damage_inside_a_jpeg_is_a_decode_error_even_where_pil_decodes_grey(how):
    data = damaged(encode(face(3), "JPEG", quality=90), how)
    with Image.open(io.BytesIO(data)) as image:
        image.load()  # PIL: no error, grey or garbled blocks
    facts = inspect_bytes(data, LIMIT, FORMATS)
    assert facts["error"] == "decode_error", facts
    assert facts["detail"].startswith("Corrupt JPEG data")


@pytest.mark.parametrize("keep", [0.6, 0.99])
def test_a_jpeg_cut_short_is_truncated(keep):
    data = encode(face(4), "JPEG", quality=90)
    facts = inspect_bytes(data[: int(len(data) * keep)], LIMIT, FORMATS)
    assert facts["error"] == "truncated"


def test_a_jpeg_claiming_a_huge_size_is_a_bomb_and_never_decoded(monkeypatch):
    data = bytearray(encode(face(5, 64), "JPEG", quality=90))
    frame = data.find(b"\xff\xc0")
    data[frame + 5 : frame + 9] = (60_000).to_bytes(2, "big") * 2
    monkeypatch.setattr(inspect.simplejpeg, "decode_jpeg", pytest.fail)
    facts = inspect_bytes(bytes(data), LIMIT, FORMATS)
    assert facts["error"] == "decompression_bomb"
    assert "60000x60000" in facts["detail"]


def test_a_png_and_a_jpeg_of_one_face_are_near_duplicates_and_other_faces_are_not():
    one = face(6)
    as_jpeg = inspect_bytes(encode(one, "JPEG", quality=85), LIMIT, FORMATS)["dhash"]
    as_png = inspect_bytes(encode(one, "PNG"), LIMIT, FORMATS)["dhash"]
    others = [inspect_bytes(encode(face(s), "PNG"), LIMIT, FORMATS)["dhash"] for s in (7, 8, 9)]
    assert hamming(as_jpeg, as_png) <= 12  # the default near_duplicate_distance
    assert min(hamming(as_png, other) for other in others) > 12


class SlowStore:
    """A source whose every read waits a round trip, like an object store."""

    uri = "slow://store/"
    read_threads = 16

    def __init__(self, files: dict[str, bytes], latency: float):
        self.files, self.latency = files, latency

    def read_bytes(self, path: str) -> bytes:
        time.sleep(self.latency)
        if path not in self.files:
            raise FileNotFoundError(path)
        return self.files[path]


def test_a_remote_source_keeps_its_reads_in_flight_and_results_in_order():
    good = encode(face(10, 64), "JPEG", quality=90)
    files = {f"id/{i:02d}.jpg": good for i in range(32)}
    files["id/05.jpg"] = good[: len(good) // 2]
    paths = sorted(files) + ["id/missing.jpg"]
    started = time.perf_counter()
    results = inspect_paths(SlowStore(files, latency=0.05), paths, LIMIT, FORMATS)
    elapsed = time.perf_counter() - started
    assert elapsed < 0.5  # 33 reads of 50 ms one after another would take 1.65 s
    assert [path for path, _ in results] == paths
    errors = {path: facts.get("error") for path, facts in results if facts.get("error")}
    assert errors == {"id/05.jpg": "truncated", "id/missing.jpg": "missing_file"}
