"""Compiled regions: captured once, saved, and run by a later process without tracing again.

Every call here is a real ahead-of-time capture (Dynamo + Inductor on CPU), so each test
compiles a tiny network; the saved captures travel between real processes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import warnings

import pytest
import torch
from torch import nn

from ffjobs.train.compile.regions import CompiledRegion, offer_all

# one process's run of a region: bf16 autocast as in training, a no-grad call and a grad
# call (two captures), the outputs and weight gradients written as JSON
_RUN = """
import json, sys, torch
from torch import nn
from ffjobs.train.compile.regions import CompiledRegion, offer_all

mode, path = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.LeakyReLU(0.2), nn.Conv2d(8, 3, 3, padding=1))
region = CompiledRegion("net", net, "default")
if mode == "load":
    def no_capture(args):
        raise AssertionError("traced again")
    region._capture = no_capture
    # loaded on the loader thread, under the autocast of the calls below
    offer_all([region], {"net": open(path, "rb").read()}, path,
              lambda: torch.autocast("cpu", dtype=torch.bfloat16))
x = torch.randn(2, 3, 16, 16)
with torch.autocast("cpu", dtype=torch.bfloat16):
    with torch.no_grad():
        first = region(x)
    second = region(x.clone().requires_grad_())
second.float().square().mean().backward()
if mode == "save":
    open(path, "wb").write(region.save())
print(json.dumps({
    "outputs": [first.float().tolist(), second.float().tolist()],
    "grads": [p.grad.tolist() for p in net.parameters()],
    "captures": len(region._captures),
    "loaded": region.loaded,
}))
"""


REGION_RUN_S = 240
"""One process compiling (or loading) a one-layer region on CPU: seconds on a quiet machine."""


def _run(mode: str, path) -> dict:
    env = {**os.environ, "PYTHONPATH": os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run(
        [sys.executable, "-c", _RUN, mode, str(path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=REGION_RUN_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.LeakyReLU(0.2))


@pytest.mark.slow  # four CPU compiles
def test_a_saved_region_runs_in_a_new_process_without_tracing(tmp_path):
    saved = tmp_path / "net.bin"
    first = _run("save", saved)
    assert first["captures"] == 2 and first["loaded"] == 0  # no-grad and grad: two contexts
    again = _run("load", saved)  # tracing would raise in this process
    assert again["captures"] == 2 and again["loaded"] == 2
    # the same compiled code on the same inputs and weights, on one machine: bit for bit
    assert again["outputs"] == first["outputs"]
    assert again["grads"] == first["grads"]


@pytest.mark.slow  # three CPU compiles
def test_a_loaded_capture_that_does_not_fit_is_replaced_and_saved(tmp_path):
    region = CompiledRegion("net", _net(), "default")
    region(torch.randn(2, 3, 8, 8))
    saved = region.save()

    restarted = CompiledRegion("net", _net(), "default")
    offer_all([restarted], {"net": saved}, "the test")
    x = torch.randn(3, 3, 8, 8)  # another batch size: the loaded guards reject it
    with pytest.warns(UserWarning, match="no loaded capture fits this call"):
        out = restarted(x)
    torch.testing.assert_close(out, _net()(x))
    assert restarted.loaded == 1 and len(restarted._captures) == 2
    assert restarted.save() is not None  # the next restart gets the capture that fits


def test_saved_captures_that_do_not_load_are_captured_again():
    region = CompiledRegion("net", _net(), "default")
    offer_all([region], {"net": b"not a capture"}, "run/compile-cache.regions.bin")
    x = torch.randn(2, 3, 8, 8)
    with pytest.warns(UserWarning, match="net from run/compile-cache.regions.bin not loaded"):
        out = region(x)
    torch.testing.assert_close(out, _net()(x))
    assert region.loaded == 0 and len(region._captures) == 1


def test_saved_captures_load_in_the_background_in_call_order(monkeypatch):
    """offer_all returns at once; one loader thread deserialises the regions in the order
    given, each inside the context it was handed; a region's first call waits for its own."""
    from ffjobs.train.compile import regions

    release = threading.Event()
    loaded = []

    def slow_deserialize(module, mode, data, context):
        with context():
            release.wait(timeout=60)
            loaded.append((data, threading.current_thread().name, torch.is_autocast_enabled("cpu")))
        raise ValueError("not a capture")  # each region then captures as without saved ones

    monkeypatch.setattr(regions, "_deserialize", slow_deserialize)
    first, second = (
        CompiledRegion("first", _net(), "default"),
        CompiledRegion("second", _net(), "default"),
    )
    offer_all(
        [first, second],
        {"second": b"2", "first": b"1"},
        "the test",
        lambda: torch.autocast("cpu", dtype=torch.bfloat16),
    )
    assert loaded == []  # nothing waited for the loads
    release.set()
    with pytest.warns(UserWarning, match="first from the test not loaded"):
        first(torch.randn(2, 3, 8, 8))  # it captures, after every load has ended
    with pytest.warns(UserWarning, match="second from the test not loaded"):
        second.save()  # takes its load's outcome too
    assert [data for data, _, _ in loaded] == [b"1", b"2"]  # in the order given
    assert all(name.startswith("ffjobs-region-loader") and autocast for _, name, autocast in loaded)


class _GraphBreak(nn.Module):
    def forward(self, x):
        if x.sum().item() > 0:  # data-dependent Python control flow: no full graph
            return x * 2
        return x - 1


def test_a_module_that_cannot_be_captured_is_compiled_lazily():
    region = CompiledRegion("breaks", _GraphBreak(), "default")
    x = torch.ones(4)
    with pytest.warns(UserWarning, match="breaks: ahead-of-time capture failed"):
        assert torch.equal(region(x), x * 2)
    # warned once; later calls go to the lazy compile (other libraries' warnings while it
    # compiles, such as a deprecated attribute Inductor touches in a module another test
    # imported, are not this region's)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert torch.equal(region(-x), -x - 1)
    assert [str(w.message) for w in caught if "breaks:" in str(w.message)] == []
    assert region.save() is None


def test_the_fingerprint_follows_the_settings():
    from ffjobs.train.compile.regions import fingerprint

    assert fingerprint({"precision": "bf16"}) == fingerprint({"precision": "bf16"})
    assert fingerprint({"precision": "bf16"}) != fingerprint({"precision": "fp32"})


def test_the_compiler_is_imported_on_the_calling_thread_before_any_other_starts():
    # CUDA graph trees keep per-thread state, made by the thread that imports them: the main
    # thread must be the one (torch 2.11 fails a CUDA graph run on the main thread otherwise)
    code = (
        "import torch; from ffjobs.train.compile.regions import import_compiler; "
        "import_compiler(torch.device('cpu')); "
        "print(torch._C._is_key_in_tls('tree_manager_containers'))"
    )
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == "True"


def test_the_compiler_warm_up_runs_on_its_own_thread_and_never_fails_the_start(monkeypatch):
    import torch._inductor.codecache

    from ffjobs.train.compile.regions import import_compiler

    warm_up = import_compiler(torch.device("cpu"))
    assert warm_up.name == "ffjobs-compiler-warm-up" and warm_up.daemon
    warm_up.join(timeout=120)
    assert not warm_up.is_alive()

    def broken() -> bytes:
        raise OSError("source folder unreadable")

    monkeypatch.setattr(torch._inductor.codecache, "torch_key", broken)
    errors = []
    monkeypatch.setattr(threading, "excepthook", errors.append)
    import_compiler(torch.device("cpu")).join(timeout=120)
    assert errors == []  # the first compiled load computes it, and reports what fails


def test_a_compiled_trainer_compiles_the_encoder_g_and_d_but_not_ds_pass_for_gs_loss(tmp_path):
    # compiled, D's pass with frozen weights steered G's identity loss away from eager's and
    # fp32's over 200 steps on one H200 (dev/README.md, numerics): it stays the plain module
    from ffjobs.train.data import RandomPairs
    from ffjobs.train.distributed import DistEnv
    from ffjobs.train.trainer import Trainer

    from .helpers import tiny_config

    config = tiny_config(tmp_path, "train.compile=true", "train.deterministic=false")
    dataset = RandomPairs(4, config.model.resolution, seed=0)
    env = DistEnv(0, 1, 0, "127.0.0.1", 0, "single")
    trainer = Trainer(config, env, torch.device("cpu"), dataset)
    assert [region.name for region in trainer.compilation.regions] == [
        "identity_encoder",
        "generator",
        "discriminator",
    ]
    assert trainer.frozen_discriminator is trainer.d_module
