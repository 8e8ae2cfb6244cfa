"""Compiled regions whose Dynamo capture is saved with the run, so a restart does not trace.

A warm start that loads only the compiler's caches (:mod:`ffjobs.train.compile.cache`) still
runs Dynamo over every region again (bytecode tracing and fake-tensor propagation of G, D and
the identity encoder with and without grad), a large part of a warm first step. A
:class:`CompiledRegion` captures its module ahead of time, on its first call in each calling
context, with ``torch._dynamo.aot_compile`` (one full graph per context: grad mode, autocast and
which inputs need grad are its guards), and the capture serialises with its compiled forward and
backward. A later job loads it and calls the compiled code directly: no tracing, no fake
tensors. A loaded capture whose guards reject a call is replaced by a new capture, with a
warning that gives the guard's reason, and saved again.

This rides on torch's ahead-of-time compile (``torch._dynamo.aot_compile``: experimental, the
same API in torch 2.11 and 2.14), so everything that can fail falls back with a warning: a
module that cannot be captured is compiled lazily, a capture that does not serialise is not
saved, a saved one that does not load is captured again.
Only modules that are not wrapped in DDP become regions (:func:`ffjobs.train.ddp.wrap`): a
DDP module's Dynamo graph is split at its gradient buckets, which the capture does not do.

The saved captures are keyed by :func:`fingerprint` (torch version, the networks' source code,
the model and training settings that shape the graphs): a capture of other code never runs.
Loading them is a large part of a warm start, so :func:`offer_all` deserialises them on one
background thread, in the order the step first calls the regions, while the main thread builds
the rest of the trainer, waits for its first batch and runs the regions already loaded; a
region's first call waits for its own captures only. The loads run inside the calls' autocast
(``context``): the guards built on loading record the thread's dispatch state, and loaded
outside autocast they reject every call under it. Each load holds Dynamo's compile lock (it
patches Inductor's process-wide settings, as a lazy compile on the main thread does), and a
region that has to capture on the main thread first waits for every load.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
import warnings
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

MAX_CAPTURES = 4
"""Calling contexts per region (the training step has at most two): past it, a region whose
guards keep failing is compiled lazily rather than captured again and again."""


@dataclass
class _Offer:
    """Saved captures being loaded on the loader thread (:func:`offer_all`)."""

    captures: Future  # of the loaded AOTCompiledFunctions
    where: str  # where they were read, for messages


class CompiledRegion(nn.Module):
    """``module`` compiled in ``mode``, captured ahead of time on its first call per context.

    An ``nn.Module`` so that it sits where ``torch.compile(module)`` did (``.train()``, hooks
    and ``state_dict`` reach the module itself through ``_orig_mod``).
    """

    def __init__(self, name: str, module: nn.Module, mode: str):
        super().__init__()
        self.name = name
        self._orig_mod = module
        self.mode = mode
        self._captures: list[Any] = []  # torch._dynamo.aot_compile.AOTCompiledFunction
        self._lazy: nn.Module | None = None  # the lazy compile, once capturing has failed
        self.loaded = 0
        """Captures loaded from a saved region (0: compiled in this process)."""
        self._missed = False  # a call fitting no loaded capture was reported
        self._offered: _Offer | None = None  # saved captures being loaded
        self._loads: list[Future] = []  # every load of the loader: none runs while one traces
        self._captured_here = 0
        # torch's intra-op thread count is one of the captures' guards, and it changed within
        # a cold GPU run after the trainer's start (every saved capture then rejected the
        # restart; what changed it was not found): each call runs with the count the region
        # was built under, which is the launcher's on every start
        self._threads = torch.get_num_threads()

    def forward(self, *args: torch.Tensor) -> Any:
        if self._lazy is not None:
            return self._lazy(*args)
        if torch.get_num_threads() != self._threads:
            torch.set_num_threads(self._threads)
        self._take_offered()
        module = self._orig_mod
        for capture in self._captures:
            if capture.guard_check(module, *args):
                return capture(module, *args)
        if self.loaded and not self._missed:
            self._missed = True
            warnings.warn(
                f"compiled region {self.name}: no loaded capture fits this call "
                f"({_guard_failure(self._captures[0], module, args)}); capturing it again",
                stacklevel=2,
            )
        wait_for(self._loads)  # no capture is deserialised while this thread traces
        try:
            if len(self._captures) >= MAX_CAPTURES:
                raise RuntimeError(f"{MAX_CAPTURES} captures, and a call that fits none")
            capture = self._capture(args)
        except Exception as exc:  # the lazy compile of the same module, as without regions
            warnings.warn(
                f"compiled region {self.name}: ahead-of-time capture failed ({exc}); "
                "compiling it lazily (a restart traces it again)",
                stacklevel=2,
            )
            self._lazy = torch.compile(module, mode=self.mode)
            return self._lazy(*args)
        self._captures.append(capture)
        self._captured_here += 1
        return capture(module, *args)

    def _capture(self, args: tuple[torch.Tensor, ...]) -> Any:
        from torch._dynamo.aot_compile import ModelInput, aot_compile_module
        from torch._dynamo.hooks import Hooks

        backend = torch._TorchCompileInductorWrapper(self.mode, None, None)
        with warnings.catch_warnings():
            # the guards' record of a non-leaf input reads its .grad: noise, not a problem
            warnings.filterwarnings("ignore", message="The .grad attribute of a Tensor")
            compiled = aot_compile_module(
                self._orig_mod, [ModelInput(args=args, kwargs={}, contexts=[])], Hooks(), backend
            )
        (capture,) = compiled.compiled_results
        capture.disable_guard_check()  # forward checks the guards before every call
        return capture

    def save(self) -> bytes | None:
        """This region's captures, serialised, if any was made in this process (``None``:
        nothing new to save; captures loaded and still fitting are saved along)."""
        self._take_offered()
        if self._lazy is not None or not self._captured_here:
            return None
        from torch._dynamo.aot_compile import AOTCompiledModel

        return AOTCompiledModel(self._orig_mod, self._captures).serialize()

    def _take_offered(self) -> None:
        """Wait for this region's saved captures, if any were offered and not yet taken, and
        use them (or warn why not)."""
        offer, self._offered = self._offered, None
        if offer is None:
            return
        try:
            captures = offer.captures.result()
        except Exception as exc:  # captured again, as in a job without saved captures
            warnings.warn(
                f"compiled region {self.name} from {offer.where} not loaded ({exc}); "
                "capturing it again",
                stacklevel=3,
            )
            return
        for capture in captures:
            capture.disable_guard_check()
        self._captures = list(captures)
        self.loaded = len(captures)


def _deserialize(
    module: nn.Module, mode: str, data: bytes, context: Callable[[], Any]
) -> list[Any]:
    """The captures in ``data`` of ``module``, built inside ``context()`` (on the loader
    thread), with the Inductor settings of ``mode`` that compiling them had."""
    from torch._dynamo.aot_compile import AOTCompiledModel
    from torch._dynamo.convert_frame import compile_lock

    with (
        context(),
        compile_lock,
        torch._inductor.config.patch(_inductor_mode_options(mode)),
    ):
        return AOTCompiledModel.deserialize(module, data).compiled_results


def _guard_failure(capture: Any, module: nn.Module, args: tuple) -> str:
    """Why ``capture``'s guards reject ``module(*args)``, in one line."""
    try:
        f_locals = capture.prepare_f_locals(module, *args)
        failure = capture._artifacts.guard_manager.check_verbose(f_locals)
        return " ".join(str(part) for part in failure.verbose_code_parts)[:300]
    except Exception as exc:  # the reason is a courtesy; the warning is what matters
        return f"reason not available: {exc}"


def _inductor_mode_options(mode: str) -> dict[str, Any]:
    """Inductor settings of ``torch.compile``'s ``mode`` (CUDA graphs for reduce-overhead):
    the ones loading a capture must see, as compiling it did."""
    from torch._inductor import list_mode_options

    return {k: v for k, v in list_mode_options(mode).items() if k != "triton.cudagraph_trees"}


def import_compiler(device: torch.device) -> threading.Thread:
    """Import torch's compiler stack now (seconds), as part of the process's start, rather
    than inside the first compiled call; and start, on a thread of its own,
    what the first compiled graph loaded on ``device`` would otherwise do first (returned)."""
    import torch._dynamo.aot_compile  # noqa: F401
    import torch._inductor.compile_fx  # noqa: F401

    # on this thread, before any other starts: importing it sets up the CUDA graph trees'
    # per-thread state in the importing thread only, and on torch 2.11 a CUDA graph then run
    # on the main thread fails (``assert torch._C._is_key_in_tls``) when another thread (the
    # warm-up, the region loader) imported it first
    import torch._inductor.cudagraph_trees  # noqa: F401

    warm_up = threading.Thread(
        target=_first_use_of_compiler, args=(device,), name="ffjobs-compiler-warm-up", daemon=True
    )
    warm_up.start()
    return warm_up


def _first_use_of_compiler(device: torch.device) -> None:
    """Once per process, ahead of the first load of a compiled graph (otherwise part of the
    warm start's first step): hash torch's and Triton's sources (the caches' keys), and on a
    GPU build Triton's CUDA helper with the C compiler and ask the device's
    target; the results are cached in the process, and a load that comes first does it all
    itself. The thread's current device is the rank's: asking another device would open a
    context on it."""
    try:
        from torch._inductor.codecache import torch_key

        torch_key()
        if device.type == "cuda":
            from torch.utils._triton import triton_hash_with_backend

            with torch.cuda.device(device):
                triton_hash_with_backend()
    except Exception:  # a head start, nothing more: the first load reports what fails
        return


def summary(regions: list[CompiledRegion]) -> str:
    """``"4 compiled regions, 5 captures (5 loaded)"``: what the first step ran on."""
    captures = sum(len(region._captures) for region in regions)
    loaded = sum(region.loaded for region in regions)
    return f"{len(regions)} compiled regions, {captures} captures ({loaded} loaded)"


def save_all(regions: list[CompiledRegion]) -> dict[str, bytes]:
    """``{region name: its saved captures}`` of the regions that have some to save."""
    saved = {}
    for region in regions:
        try:
            data = region.save()
        except Exception as exc:  # not saved: the next job captures it again
            warnings.warn(f"compiled region {region.name} not saved: {exc}", stacklevel=2)
            continue
        if data is not None:
            saved[region.name] = data
    return saved


def offer_all(
    regions: list[CompiledRegion],
    saved: dict[str, bytes],
    where: str,
    context: Callable[[], Any] = contextlib.nullcontext,
) -> None:
    """Start loading each region's captures from ``saved`` (read from ``where``) on one
    background thread, in the order of ``regions`` (put first the region a step calls first),
    each inside ``context()``: the autocast the regions will be called under."""
    offered = [region for region in regions if region.name in saved]
    if not offered:
        return
    loader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ffjobs-region-loader")
    loads = [
        loader.submit(_deserialize, region._orig_mod, region.mode, saved[region.name], context)
        for region in offered
    ]
    loader.shutdown(wait=False)  # its thread ends after the last load
    for region, load in zip(offered, loads, strict=True):
        region._offered = _Offer(load, where)
        region._loads = loads


def fingerprint(settings: dict[str, Any]) -> str:
    """What the captures depend on besides their guards: torch, the networks' code and
    ``settings`` (the model config and the training settings that shape the graphs)."""
    digest = hashlib.sha256(torch.__version__.encode())
    models = Path(__file__).resolve().parent.parent / "models"
    for source in sorted(models.rglob("*.py")):
        digest.update(source.name.encode())
        digest.update(source.read_bytes())
    digest.update(json.dumps(settings, sort_keys=True, default=str).encode())
    return digest.hexdigest()
