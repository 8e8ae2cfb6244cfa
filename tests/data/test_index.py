"""Layouts, manifests, identity splits, quarantine and fingerprints."""

from __future__ import annotations

import shutil

import pytest

from ffjobs.data.index import ManifestError, build_index, split_identities


def test_identity_folders_layout(clean_dataset, tmp_path):
    index = build_index(clean_dataset, cache_dir=tmp_path)
    assert index.layout == "identity_folders"
    assert len(index) == 192 and len(index.identities) == 24
    assert index[0].path == "id_0000/00.jpg" and index[0].identity == "id_0000"
    assert len(index.fingerprint) == 16


def test_flat_layout_makes_each_image_an_identity(clean_dataset, tmp_path):
    flat = tmp_path / "flat"
    flat.mkdir()
    for path in sorted(clean_dataset.glob("id_000[01]/*.jpg")):
        shutil.copy(path, flat / f"{path.parent.name}_{path.name}")
    index = build_index(flat, cache_dir=tmp_path / "cache")
    assert index.layout == "flat"
    assert len(index.identities) == len(index) == 16


def test_csv_manifest_and_split_column(clean_dataset, tmp_path):
    rows = [
        "path,identity,split",
        "id_0000/00.jpg,alice,train",
        "id_0000/01.jpg,alice,train",
        "id_0001/00.jpg,bob,val",
    ]
    (tmp_path / "m.csv").write_text("\n".join(rows) + "\n")
    index = build_index(clean_dataset, manifest=str(tmp_path / "m.csv"), cache_dir=tmp_path)
    assert index.layout == "manifest" and index.identities == ["alice", "bob"]
    train, val = split_identities(index, val_fraction=0.5, seed=0)
    assert [r.identity for r in val] == ["bob"] and len(train) == 2


def test_malformed_manifest_names_file_and_line(clean_dataset, tmp_path):
    (tmp_path / "m.jsonl").write_text('{"path": "id_0000/00.jpg", "identity": "a"}\n{oops\n')
    with pytest.raises(ManifestError, match=r"m.jsonl:2"):
        build_index(clean_dataset, manifest=str(tmp_path / "m.jsonl"), cache_dir=tmp_path)


def test_split_identities_has_no_leakage_and_is_seeded(clean_dataset, tmp_path):
    index = build_index(clean_dataset, cache_dir=tmp_path)
    train, val = split_identities(index, val_fraction=0.25, seed=3)
    assert not set(train.identities) & set(val.identities)
    assert len(val.identities) == 6 and len(train) + len(val) == len(index)
    again = split_identities(index, val_fraction=0.25, seed=3)[1]
    assert again.identities == val.identities
    assert split_identities(index, 0.25, seed=4)[1].identities != val.identities


def test_quarantine_is_honoured(clean_dataset, tmp_path):
    quarantine = tmp_path / "quarantine.txt"
    quarantine.write_text("# header\nid_0000/00.jpg\nid_0005/03.jpg\n")
    full = build_index(clean_dataset, cache_dir=tmp_path)
    index = build_index(clean_dataset, quarantine=quarantine, cache_dir=tmp_path)
    assert len(index) == len(full) - 2
    assert "id_0000/00.jpg" not in {r.path for r in index}
    assert index.fingerprint != full.fingerprint
