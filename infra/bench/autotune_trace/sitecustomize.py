"""Put this folder on PYTHONPATH with AUTOTUNE_TRACE=FILE set: every Python process then records
each Triton launch-configuration benchmark Inductor runs (kernel, its cache state, how many
configurations, seconds) as one JSON line in FILE. For finding what a warm start re-tunes
(``infra/bench/gpu-h200.sh``)."""

import os

# KEEP_COMPILER_CACHE=DIR: this process's Inductor and Triton caches in DIR, whatever the
# launcher chose (``ffjobs bench train`` gives every launch empty ones)
if os.environ.get("KEEP_COMPILER_CACHE"):
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(
        os.environ["KEEP_COMPILER_CACHE"], "inductor"
    )
    os.environ["TRITON_CACHE_DIR"] = os.path.join(os.environ["KEEP_COMPILER_CACHE"], "triton")

if os.environ.get("AUTOTUNE_TRACE"):
    import json
    import time

    try:
        from torch._inductor.runtime import triton_heuristics as _th
    except Exception:  # no torch, or no Triton on this machine: nothing to trace
        _th = None
    if _th is not None:
        _original = _th.CachingAutotuner.benchmark_all_configs

        def _traced(self, *args, **kwargs):
            started = time.perf_counter()
            try:
                return _original(self, *args, **kwargs)
            finally:
                name = self.filename or ""
                folder = os.path.dirname(name)
                record = {
                    "pid": os.getpid(),
                    "kernel": getattr(self.fn, "__name__", "?"),
                    "file": name,
                    "configs": len(getattr(self, "launchers", []) or []),
                    "cache": {k: str(v) for k, v in (self.autotune_cache_info or {}).items()},
                    "best_configs_beside": (
                        sum(f.endswith(".best_config") for f in os.listdir(folder))
                        if folder and os.path.isdir(folder)
                        else None
                    ),
                    "seconds": round(time.perf_counter() - started, 4),
                }
                with open(os.environ["AUTOTUNE_TRACE"], "a") as out:
                    out.write(json.dumps(record) + "\n")

        _th.CachingAutotuner.benchmark_all_configs = _traced

# COMPILE_TIMES=PREFIX: each process writes torch._dynamo.utils.compile_times() (where its
# compilation went, aggregated) to PREFIX.<pid> when it exits
if os.environ.get("COMPILE_TIMES"):
    import atexit

    def _write_compile_times():
        try:
            import torch._dynamo.utils as dynamo_utils
        except Exception:
            return
        with open(f"{os.environ['COMPILE_TIMES']}.{os.getpid()}", "w") as out:
            out.write(dynamo_utils.compile_times(repr="str", aggregate=True))

    atexit.register(_write_compile_times)

# STACK_SAMPLES=PREFIX: a thread samples the main thread's Python stack every 5 ms during the
# process's first STACK_SAMPLE_SECONDS (default 60) and writes PREFIX.<pid>.json when it exits:
# {"stacks": [[frame, ...] root first], "samples": [[seconds since start, stack index], ...]}
# (a wall-clock picture of a start-up; a sample late because another thread held the GIL shows
# as a gap). The sampler must never keep a frame alive: a frame it holds keeps its locals'
# tensors alive, and CUDA graph recording (train.compile_mode reduce-overhead) fails when a
# tensor outlives the step it was freed in during recording ("observed an input tensor
# deallocate"). Its first version kept the last frame across its sleep and did exactly that.
if os.environ.get("STACK_SAMPLES"):
    import atexit
    import json
    import sys
    import threading
    import time

    _started = time.perf_counter()
    _main = threading.main_thread().ident
    _stacks: dict = {}
    _samples: list = []
    _limit = float(os.environ.get("STACK_SAMPLE_SECONDS", "60"))
    _stop = threading.Event()

    def _main_stack():
        frame = sys._current_frames().get(_main)
        names = []
        while frame is not None:
            code = frame.f_code
            names.append(f"{os.path.basename(code.co_filename)}:{code.co_name}:{frame.f_lineno}")
            frame = frame.f_back
        return tuple(reversed(names))  # no frame is referenced once this returns

    def _sample():
        while not _stop.is_set() and (now := time.perf_counter() - _started) < _limit:
            key = _main_stack()
            if key:
                _samples.append((round(now, 4), _stacks.setdefault(key, len(_stacks))))
            time.sleep(0.005)

    _sampler = threading.Thread(target=_sample, name="stack-sampler", daemon=True)

    def _write_samples():
        _stop.set()
        _sampler.join(timeout=1)
        with open(f"{os.environ['STACK_SAMPLES']}.{os.getpid()}.json", "w") as out:
            json.dump({"stacks": [list(k) for k in _stacks], "samples": _samples}, out)

    _sampler.start()
    atexit.register(_write_samples)
