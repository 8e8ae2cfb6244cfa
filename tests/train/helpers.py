"""Tiny, deterministic training configs that run in seconds on CPU with gloo, and float64
training steps on real ranks for the DDP-equivalence tests."""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing
from torch import Tensor
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import default_collate

from ffjobs.config import Config, load_config
from ffjobs.local_ranks import free_loopback_port, rank_environment
from ffjobs.models import FusionModels, build
from ffjobs.train.data import RandomPairs
from ffjobs.train.distributed import DistEnv, compute_cleanup, compute_init

TINY_MODEL = [
    "model.width=8",
    "model.max_width=16",
    "model.residual_blocks=1",
    "model.discriminator_width=8",
    "model.discriminator_layers=2",
    "model.identity_width=0.25",
    "model.identity_input_size=32",
    "model.identity_dim=32",
]


def tiny_identity_weights() -> str:
    """An identity encoder of the tiny model's shape, pre-trained once per test run (shared by
    its processes through the run's folder, ``FFJOBS_TEST_RUN_DIR`` of tests/conftest.py).

    The local demo's encoder (300 steps on the default 24x8 synthetic identities), as training
    really uses. With a random or barely trained encoder the embeddings are near-degenerate and
    the identity loss's cosine gradients are large and noisy: the 2-rank vs 1-rank comparison
    then drifts by 1e-5 to 3e-4 after 3 steps instead of staying below 1e-6.
    """
    from ffjobs.shared_inputs import make_once

    out = Path(os.environ["FFJOBS_TEST_RUN_DIR"]) / "tiny-identity.pt"
    if not out.exists():  # this test makes it or waits for the process making it
        allow_more_time(PRETRAIN_S)

    def pretrain(path: Path) -> None:
        from ffjobs.data.synth import generate_dataset
        from ffjobs.models.identity_pretrain import train_identity_encoder

        model = load_config("local", TINY_MODEL).model
        with tempfile.TemporaryDirectory() as tmp:
            data = generate_dataset(Path(tmp) / "faces", identities=24, per_identity=8, size=64)
            train_identity_encoder(model, data, path)

    make_once(out, pretrain, what="the tiny identity encoder")
    return str(out)


LOCAL_ENCODERS = ("runs/models/identity.pt", "runs/models/identity-eval.pt")
"""Where ``configs/local.yaml`` keeps its training and evaluation identity encoders."""


def place_local_encoders(workdir: Path) -> None:
    """Both identity encoders of ``configs/local.yaml``, pre-trained once per test run as a
    first ``ffjobs run`` on the embedded default makes them, copied to where the preset looks
    for them under ``workdir``:
    a pipeline test then spends its time on what it checks. Pre-training inside the pipeline
    has its own test (tests/integration/test_concurrent_runs.py)."""
    import shutil

    from ffjobs.models.prepare import encoder_record

    for made, wanted in zip(_local_encoders(), LOCAL_ENCODERS, strict=True):
        if not (workdir / wanted).exists():
            (workdir / wanted).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(encoder_record(made), encoder_record(workdir / wanted))
            shutil.copyfile(made, workdir / wanted)


def _local_encoders() -> list[Path]:
    """Both encoders, made by the pipeline's own functions as a first run on the embedded
    default makes them, in the test run's folder (once: they wait for each other)."""
    from ffjobs.models.prepare import ensure_demo_inputs
    from ffjobs.quality.encoder import ensure_evaluation_encoder

    folder = Path(os.environ["FFJOBS_TEST_RUN_DIR"]) / "local"
    made = [folder / path for path in LOCAL_ENCODERS]
    if not all(path.exists() for path in made):
        allow_more_time(2 * PRETRAIN_S)
        folder.mkdir(exist_ok=True)
        with contextlib.chdir(folder):  # where the preset's relative paths point
            config = load_config("local")
            ensure_demo_inputs(config)
            ensure_evaluation_encoder(config)
    return made


PRETRAIN_S = 900
"""The tiny encoder's pre-training (300 steps on 192 images), on top of the test's own limit:
more than 4 minutes of CPU, so 2 to 3 minutes on a quiet 2-core machine; 900 s leaves room for
a loaded one."""


def allow_more_time(seconds: float) -> None:
    """Extend the running test's time limit by ``seconds``, for work done once per test run
    that lands in whichever test needs it first. pytest-timeout's signal method (the one
    configured) is an ITIMER_REAL alarm in the main thread."""
    if threading.current_thread() is threading.main_thread():
        left, interval = signal.getitimer(signal.ITIMER_REAL)
        if left > 0:
            signal.setitimer(signal.ITIMER_REAL, left + seconds, interval)


def tiny_config(tmp_path: Path, *overrides: str) -> Config:
    """64 px model, fp32, deterministic kernels, no tracking, checkpoints under ``tmp_path``."""
    return load_config(
        "local",
        [
            *TINY_MODEL,
            "train.batch_size=2",
            "train.steps=4",
            "train.log_every=2",
            "train.checkpoint_every=2",
            "train.deterministic=true",
            "train.precision=fp32",
            # a run extended by a resume (train.steps 3 -> 6) trains as one of 6 from the start
            # only at a constant rate: a cosine decay is laid over train.steps
            "train.lr_schedule=constant",
            f"train.checkpoint_dir={tmp_path / 'ckpt'}",
            f"model.identity_weights={tiny_identity_weights()}",
            "train.progress=false",
            "tracking.enabled=false",
            *overrides,
        ],
    )


def final_weights(checkpoint_dir: Path) -> dict[str, dict[str, torch.Tensor]]:
    """Generator, discriminator and EMA weights of the newest checkpoint in ``checkpoint_dir``."""
    newest = sorted(Path(checkpoint_dir).glob("step-*.pt"))[-1]
    state = torch.load(newest, weights_only=True)
    return {
        "step": state["step"],
        "generator": state["generator"],
        "discriminator": state["discriminator"],
        "ema": state["ema"],
    }


# ----------------------------------------------------------------------------- float64 ranks


def run_ranks(world_size: int, program: Callable[..., Any], *args: Any) -> Any:
    """``program(env, device, *args)`` on ``world_size`` spawned ranks (gloo, loopback).

    Returns rank 0's return value; a rank's exception fails the call with its traceback.
    ``program`` must be a module-level function (it is pickled into the ranks).
    """
    with tempfile.TemporaryDirectory(prefix="ffjobs-ranks-") as tmp:
        out = Path(tmp) / "rank0.pt"
        port = free_loopback_port()
        torch.multiprocessing.start_processes(
            _rank_main,
            args=(world_size, port, program, args, out),
            nprocs=world_size,
            start_method="spawn",
        )
        return torch.load(out, weights_only=True)


def _rank_main(
    rank: int, world_size: int, port: int, program: Callable[..., Any], args: tuple, out: Path
) -> None:
    os.environ.update(rank_environment(rank, world_size, port))
    # the variable alone is read at torch's import, which already happened in this process
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    env, device = compute_init("gloo")
    try:
        result = program(env, device, *args)
        if rank == 0:
            torch.save(result, out)
    finally:
        compute_cleanup()


def _inputs_to_float64(_module: torch.nn.Module, args: tuple) -> tuple:
    return tuple(a.double() if isinstance(a, Tensor) and a.is_floating_point() else a for a in args)


def float64_models(config: Config) -> FusionModels:
    """The config's three networks (initialised as the trainer would) in float64.

    Each casts its floating-point inputs to float64 on the way in: the trainer feeds float32
    images (exact in float64), and hooks leave the state-dict keys as they are.
    """
    torch.manual_seed(config.train.seed)
    models = build(config.model)
    for network in models:
        network.double().register_forward_pre_hook(_inputs_to_float64)
    return models


def _summing_hook(_state, bucket):  # no annotations: DDP checks them and ours are strings
    """A broken gradient average: all-reduce each bucket without dividing by the world size."""
    work = dist.all_reduce(bucket.buffer(), async_op=True)
    return work.get_future().then(lambda future: future.value()[0])


@contextlib.contextmanager
def summing_all_reduce() -> Iterator[None]:
    """While active, every DDP registers :func:`_summing_hook` instead of the hook it is given."""
    register = DistributedDataParallel.register_comm_hook

    def register_summing(self: DistributedDataParallel, state: Any, _hook: Any) -> None:
        register(self, state, _summing_hook)

    DistributedDataParallel.register_comm_hook = register_summing  # type: ignore[method-assign]
    try:
        yield
    finally:
        DistributedDataParallel.register_comm_hook = register  # type: ignore[method-assign]


def rank_micro_batches(
    dataset: RandomPairs, step: int, env: DistEnv, batch_size: int, grad_accum: int
) -> list[dict[str, Tensor]]:
    """This rank's micro-batches of global batch ``step`` (items in order, split by rank)."""
    per_rank = batch_size * grad_accum
    first = (step * env.world_size + env.rank) * per_rank
    return [
        default_collate([dataset[i] for i in range(start, start + batch_size)])
        for start in range(first, first + per_rank, batch_size)
    ]


def _networks(trainer: Any) -> dict[str, dict[str, Tensor]]:
    state = trainer.state_dict()
    return {
        net: {key: value.detach().clone() for key, value in state[net].items()}
        for net in ("generator", "discriminator", "ema")
    }


def float64_training(
    env: DistEnv, device: torch.device, runs: dict[str, tuple[Config, bool]], steps: int
) -> dict[str, dict[str, Any]]:
    """Rank program: each of ``runs`` (name: config, summing all-reduce?) trains ``steps``
    float64 steps on the same global batches, one run after the other.

    Per run: ``grads`` (each network's gradients after step 1: the averaged ones under DDP),
    ``one_step`` and ``final`` (generator, discriminator and EMA weights after step 1 and the
    last step) and ``world_size``.
    """
    from ffjobs.train.trainer import Trainer

    results = {}
    for name, (config, summing) in runs.items():
        tc = config.train
        dataset = RandomPairs(64, config.model.resolution, seed=tc.seed)
        assert steps * tc.batch_size * tc.grad_accum * env.world_size <= len(dataset)
        with summing_all_reduce() if summing else contextlib.nullcontext():
            trainer = Trainer(config, env, device, dataset, models=float64_models(config))
        record: dict[str, Any] = {"world_size": env.world_size}
        for step in range(steps):
            trainer.train_step(rank_micro_batches(dataset, step, env, tc.batch_size, tc.grad_accum))
            if step == 0:
                record["grads"] = {
                    net: {k: p.grad.detach().clone() for k, p in module.named_parameters()}
                    for net, module in (
                        ("generator", trainer.g_module),
                        ("discriminator", trainer.d_module),
                    )
                }
                record["one_step"] = _networks(trainer)
        record["final"] = _networks(trainer)
        results[name] = record
    return results


FLOAT64_U = 2.0**-53
"""Unit roundoff of float64."""

GRAD_RTOL = 2**20 * FLOAT64_U  # ~1.2e-10
"""Gradients of two float64 runs that differ only in how sums are split and ordered (ranks and
the all-reduce, micro-batches, compiled kernels), relative to a network's largest gradient.

Reordering a sum of n terms moves it by at most about n * u of the terms' magnitude. The longest
sums here (a conv weight gradient over 4 images of 64 x 64 pixels: 2^14 terms), chained through
about 2^5 layers of G, D and the identity encoder, give n ~ 2^19; 2^20 leaves a factor 2.
A summing all-reduce is off by 1.0 (twice the average), 10^10 times more.
"""

STEPS_RTOL = 2**-30  # ~9.3e-10
"""Weights after three float64 steps, relative to a network's largest weight.

Each step carries the last one's rounding into the next (Adam divides by |g|, G and D train on
each other's outputs), a linear amplification whatever the precision: float32 runs of these
steps differed by up to 1.3e-4 (Intel AMX), 2^11 times float32's unit roundoff 2^-24. The same
amplification of float64's 2^-53 is 2^-42; 2^-30 leaves a factor 4096, and is still 10^5 below
the 3e-4 by which a summing all-reduce moves the weights.
"""


def max_relative_diff(actual: dict[str, Tensor], expected: dict[str, Tensor]) -> float:
    """Largest ``|actual - expected|`` over a network's tensors, relative to its largest
    ``|expected|`` (one scale per network: gradients that are mathematically zero are rounding
    noise, so a per-tensor scale would compare noise with noise)."""
    assert actual.keys() == expected.keys()
    return max((actual[key] - expected[key]).abs().max().item() for key in expected) / _scale(
        expected
    )


def _scale(tensors: dict[str, Tensor]) -> float:
    return max(value.abs().max().item() for value in tensors.values())


def _assert_within(actual: dict[str, Tensor], expected: dict[str, Tensor], rtol: float, what: str):
    diff = max_relative_diff(actual, expected)
    assert diff <= rtol, f"{what}: off by {diff:.2e} of its largest value (allowed {rtol:.1e})"


def assert_same_gradients(actual: dict[str, Any], expected: dict[str, Any]) -> None:
    """Both networks' (averaged) gradients of step 1 agree to :data:`GRAD_RTOL`."""
    for net, grads in expected["grads"].items():
        _assert_within(actual["grads"][net], grads, GRAD_RTOL, f"{net} gradients of step 1")


def first_step_rtol(expected: dict[str, Any], config: Config, net: str) -> float:
    """How far two runs' weights after step 1 may differ when their gradients agree to
    :data:`GRAD_RTOL`, relative to the network's largest weight.

    Adam's first step moves a weight by ``lr * g / (|g| + eps)`` (after bias correction the
    moments are ``g`` and ``g^2``, whatever the betas), whose slope in ``g`` is at most
    ``1 / eps``; the schedule only lowers ``lr``. The EMA is a convex mix of the initial and
    updated generator weights, so it moves no more. Plus a few roundings of the update itself.
    """
    tc = config.train
    lr = tc.lr_discriminator if net == "discriminator" else tc.lr
    grads = expected["grads"]["discriminator" if net == "discriminator" else "generator"]
    weight_shift = lr / tc.adam_eps * GRAD_RTOL * _scale(grads)
    return weight_shift / _scale(expected["one_step"][net]) + 8 * FLOAT64_U


def assert_same_first_step(actual: dict[str, Any], expected: dict[str, Any], config: Config):
    """Generator, discriminator and EMA weights after step 1 agree to :func:`first_step_rtol`."""
    for net, weights in expected["one_step"].items():
        rtol = first_step_rtol(expected, config, net)
        _assert_within(actual["one_step"][net], weights, rtol, f"{net} after step 1")


def assert_same_final_weights(actual: dict[str, Any], expected: dict[str, Any]) -> None:
    """Generator, discriminator and EMA weights after the last step agree to :data:`STEPS_RTOL`."""
    for net, weights in expected["final"].items():
        _assert_within(actual["final"][net], weights, STEPS_RTOL, f"{net} after the last step")


def assert_same_training(actual: dict[str, Any], expected: dict[str, Any], config: Config):
    """Two :func:`float64_training` records agree: gradients, the first step, the last step."""
    assert actual["final"].keys() == expected["final"].keys()
    assert_same_gradients(actual, expected)
    assert_same_first_step(actual, expected, config)
    assert_same_final_weights(actual, expected)
