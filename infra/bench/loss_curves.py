"""A short run of a preset against bf16 eager, loss by loss, in one call: are its numerics honest?

Three launches of ``--steps`` steps on ``--data memory`` (random pairs), one rank each, from
fresh checkpoint folders:

* ``preset``: as configured (on train-256: bf16, channels_last, compiled, CUDA graphs);
* ``eager``: the same with ``train.compile=false``; same seed, so the same initial weights
  and the same batches;
* ``eager, other seed``: eager with ``train.seed`` + 1, other initial weights and batches: how
  far two loss curves of the same code lie apart anyway.

For each loss, the mean over the log windows (``train.log_every`` steps each) of the preset's
distance to eager, beside the two eager runs' distance: the preset is "within noise" where its
distance is no larger. JSON on stdout (the curves too), a summary on stderr.

    python infra/bench/loss_curves.py [--config train-256] [--steps 300]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time

from ffjobs.config import load_config, resolve_preset
from ffjobs.models.prepare import ensure_demo_inputs
from ffjobs.train.launch import launch_local


def curves(config_name: str, steps: int, compile_: bool, seed_offset: int, folder: str) -> dict:
    config = load_config(resolve_preset(config_name))
    tc = config.train
    tc.steps, tc.compile, tc.seed = steps, compile_, tc.seed + seed_offset
    tc.warmup_steps = min(tc.warmup_steps, steps)
    tc.checkpoint_dir, tc.resume, tc.progress = folder, False, False
    ensure_demo_inputs(config)  # the identity encoder's weights, where the preset names them
    started = time.perf_counter()
    result = launch_local(config, 1, mode="train", data="memory", quiet_stdout=True)
    history = result["history"]
    losses = sorted(k for k in history[0] if k.startswith("loss/"))
    return {
        "seconds": time.perf_counter() - started,
        "steps": [h["step"] for h in history],
        **{name: [h[name] for h in history] for name in losses},
    }


def mean_distance(a: list[float], b: list[float]) -> float:
    return sum(abs(x - y) for x, y in zip(a, b, strict=True)) / len(a)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="train-256")
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    runs = {}
    for name, compile_, offset in (
        ("preset", True, 0),
        ("eager", False, 0),
        ("eager, other seed", False, 1),
    ):
        with tempfile.TemporaryDirectory(prefix="ffjobs-loss-curves-") as folder:
            runs[name] = curves(args.config, args.steps, compile_, offset, folder)
    names = [k for k in runs["preset"] if k.startswith("loss/")]
    compared = {
        name: {
            "preset_to_eager": mean_distance(runs["preset"][name], runs["eager"][name]),
            "eager_to_other_seed": mean_distance(
                runs["eager"][name], runs["eager, other seed"][name]
            ),
        }
        for name in names
    }
    json.dump(
        {"config": args.config, "steps": args.steps, "runs": runs, "compared": compared}, sys.stdout
    )
    for name, c in compared.items():
        verdict = "within noise" if c["preset_to_eager"] <= c["eager_to_other_seed"] else "OUTSIDE"
        print(
            f"{name}: preset vs eager {c['preset_to_eager']:.4f}, eager vs other seed "
            f"{c['eager_to_other_seed']:.4f} (mean over {len(runs['preset']['steps'])} windows): {verdict}",
            file=sys.stderr,
        )


if __name__ == "__main__":
    main()
