"""The near-duplicate search finds exactly what comparing every pair would find."""

from __future__ import annotations

import random

import pytest

from ffjobs.data.checks import near_duplicates


def brute_force(dhashes: dict[str, str | None], max_distance: int, exclude=()) -> dict[str, str]:
    paths = sorted(p for p in dhashes if dhashes[p] and p not in set(exclude))
    values = [int(dhashes[p], 16) for p in paths]
    found = {}
    for later in range(len(paths)):
        for earlier in range(later):
            if bin(values[later] ^ values[earlier]).count("1") <= max_distance:
                found[paths[later]] = paths[earlier]
                break
    return found


@pytest.fixture(scope="module")
def hashes() -> dict[str, str | None]:
    rng = random.Random(7)
    base = [rng.getrandbits(256) for _ in range(40)]
    # Mostly one background: the first bands of these share values, which makes big buckets.
    background = [rng.getrandbits(64) for _ in range(3)]
    hashes: dict[str, str | None] = {}
    for i in range(400):
        value = rng.choice(base)
        for _ in range(rng.randrange(0, 40)):
            value ^= 1 << rng.randrange(256)
        if i % 3 == 0:
            value = (value & ~((1 << 64) - 1)) | rng.choice(background)
        hashes[f"id_{i % 17:02d}/{i:03d}.jpg"] = f"{value:064x}"
    hashes["flat/a.png"] = "00" * 32
    hashes["flat/b.png"] = "00" * 32
    hashes["gray/none.png"] = None
    return hashes


@pytest.mark.parametrize("distance", [0, 1, 3, 12, 30, 64])
def test_near_duplicates_match_every_pair_compared(hashes, distance):
    exclude = [p for p in sorted(hashes) if p.startswith("id_")][::11]
    expected = brute_force(hashes, distance, exclude)
    assert near_duplicates(hashes, distance, exclude) == expected
    assert expected  # flat/b.png at least


def test_near_duplicates_with_short_hashes():
    rng = random.Random(3)
    short = {f"{i:03d}": f"{rng.getrandbits(40):010x}" for i in range(300)}
    for distance in (2, 6, 9):
        assert near_duplicates(short, distance) == brute_force(short, distance)
