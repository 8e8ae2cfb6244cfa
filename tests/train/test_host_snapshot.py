"""The asynchronous checkpoint's host snapshot: a copy that training cannot change afterwards."""

from __future__ import annotations

import pytest
import torch

from ffjobs.train.checkpoint.snapshot import HostSnapshot, decode, encode


def _state(device: str) -> dict:
    weight = torch.randn(4, 3, 2, 2, device=device).to(memory_format=torch.channels_last)
    return {"net": {"weight": weight}, "steps": [torch.tensor(3, device=device)], "name": "g"}


def _check_snapshot(device: str) -> None:
    snapshot = HostSnapshot()
    state = _state(device)
    copy = snapshot.take(state)
    expected = state["net"]["weight"].cpu().clone()
    state["net"]["weight"].add_(1.0)  # training goes on in place
    assert copy["net"]["weight"].device.type == "cpu"
    assert torch.equal(copy["net"]["weight"], expected)
    assert copy["name"] == "g" and int(copy["steps"][0]) == 3
    # the next snapshot reuses the buffers and sees the new values
    again = snapshot.take(state)
    assert torch.equal(again["net"]["weight"], state["net"]["weight"].cpu())


def test_cpu_state_is_copied_not_aliased():
    _check_snapshot("cpu")


def test_snapshot_is_one_shared_buffer_that_crosses_as_offsets():
    snapshot = HostSnapshot()
    state = {**_state("cpu"), "half": torch.arange(5, dtype=torch.float16), "none": None}
    copy = snapshot.take(state)
    buffer = snapshot.buffer
    assert buffer is not None and buffer.is_shared()
    for tensor in (copy["net"]["weight"], copy["steps"][0], copy["half"]):
        assert tensor.untyped_storage().data_ptr() == buffer.untyped_storage().data_ptr()
    rebuilt = decode(encode(snapshot, copy), buffer)
    assert rebuilt["name"] == "g" and rebuilt["none"] is None
    assert rebuilt["half"].dtype == torch.float16 and torch.equal(rebuilt["half"], state["half"])
    assert torch.equal(rebuilt["net"]["weight"], state["net"]["weight"])
    # each tensor has a storage of its own bytes: saving one does not write the whole buffer
    assert rebuilt["half"].untyped_storage().nbytes() == 10
    # a state of another shape gets a new buffer
    snapshot.take({"w": torch.zeros(3)})
    assert snapshot.buffer is not buffer


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_state_lands_in_reused_pinned_buffers():
    _check_snapshot("cuda")
    snapshot = HostSnapshot()
    state = _state("cuda")
    first = snapshot.take(state)["net"]["weight"]
    second = snapshot.take(state)["net"]["weight"]
    assert first.is_pinned() and first.data_ptr() == second.data_ptr()
