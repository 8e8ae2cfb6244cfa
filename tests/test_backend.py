"""One backend rule for the launcher (GPUs it expects) and each rank (GPUs it sees)."""

from __future__ import annotations

import pytest

from ffjobs.config.backend import choose_backend
from ffjobs.errors import UserError


@pytest.mark.parametrize(
    ("requested", "gpus", "backend"),
    [("auto", 0, "gloo"), ("auto", 8, "nccl"), ("nccl", 1, "nccl"), ("gloo", 8, "gloo")],
)
def test_backend_choice(requested, gpus, backend):
    assert choose_backend(requested, gpus, key="train.backend") == backend


@pytest.mark.parametrize("key", ["train.backend", "preflight.backend"])
def test_nccl_without_gpus_is_one_message_naming_the_key(key):
    with pytest.raises(UserError) as info:
        choose_backend("nccl", 0, key=key)
    assert str(info.value) == (
        f"{key}: nccl needs GPUs and none is visible here; "
        f"use --set {key}=auto (gloo without GPUs) or run on a GPU node"
    )


def test_unknown_backend_is_rejected():
    with pytest.raises(UserError, match=r"^train\.backend: must be one of auto, nccl, gloo"):
        choose_backend("mpi", 2, key="train.backend")
