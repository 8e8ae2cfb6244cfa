"""``ffjobs models ...``: pre-train the project's identity encoder; show model sizes and FLOPs."""

from __future__ import annotations

import argparse
import sys

from ffjobs.cli import add_config_arguments, add_json_argument, config_from_args, print_json


def register(subparsers: argparse._SubParsersAction) -> None:
    models = subparsers.add_parser("models", help="identity encoder pre-training, model sizes")
    actions = models.add_subparsers(dest="models_command", metavar="ACTION", required=True)

    train_identity = actions.add_parser(
        "train-identity",
        help="train the project's own identity encoder on an identity-folder dataset",
        description="Train model.identity_arch (at model.identity_width) as an identity "
        "classifier on data.source (the synthetic set is generated when data.source is the "
        "default and missing) and save its arcface_torch-layout state_dict to --out.",
    )
    add_config_arguments(train_identity)
    add_json_argument(train_identity)
    train_identity.add_argument(
        "--out", required=True, metavar="PATH", help="where to write the state_dict (.pt)"
    )
    train_identity.add_argument(
        "--data", default=None, metavar="DIR", help="identity-folder dataset; default: data.source"
    )
    train_identity.add_argument("--steps", type=int, default=300)
    train_identity.add_argument("--batch-size", type=int, default=32)
    train_identity.add_argument("--lr", type=float, default=2e-3)
    train_identity.set_defaults(handler=_train_identity)

    info = actions.add_parser("info", help="parameter counts and FLOPs per training image")
    add_config_arguments(info)
    add_json_argument(info)
    info.set_defaults(handler=_info)


def _train_identity(args: argparse.Namespace) -> int:
    from ffjobs.data.demo import ensure_identity_dataset
    from ffjobs.errors import UserError
    from ffjobs.models.identity_pretrain import train_identity_encoder

    for name in ("steps", "batch_size"):
        if getattr(args, name) < 1:
            raise UserError(f"--{name.replace('_', '-')}: must be >= 1, got {getattr(args, name)}")
    config = config_from_args(args)
    data = args.data if args.data is not None else ensure_identity_dataset(config)

    def progress(step: int, loss: float) -> None:
        if not args.json and (step % 25 == 0 or step == args.steps):
            print(
                f"\rstep {step}/{args.steps}  loss {loss:.3f}", end="", file=sys.stderr, flush=True
            )

    result = train_identity_encoder(
        config.model,
        data,
        args.out,
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        seed=config.train.seed,
        on_step=progress,
    )
    if args.json:
        print_json(result.to_dict())
    else:
        print(file=sys.stderr)
        print(
            f"saved {result.out} ({config.model.identity_arch}, width "
            f"{config.model.identity_width}, {config.model.identity_input_size} px, "
            f"{config.model.identity_dim}-d)"
        )
        print(
            f"held-out accuracy {result.heldout_accuracy:.1%} over {result.identities} "
            f"identities (chance {result.chance_accuracy:.1%}); same/other identity cosine "
            f"{result.heldout_same_identity_cosine:.2f}/{result.heldout_other_identity_cosine:.2f}"
            f"; {result.seconds:.0f} s"
        )
    return 0


def _info(args: argparse.Namespace) -> int:
    import torch

    from ffjobs.models import build
    from ffjobs.models.flops import training_flops_per_image

    config = config_from_args(args)
    with torch.device("meta"):  # shapes are all it counts: no weights drawn, none calibrated
        models = build(config.model, load_identity_weights=False)
    params = {
        name: sum(p.numel() for p in net.parameters())
        for name, net in zip(models._fields, models, strict=True)
    }
    flops = training_flops_per_image(config.model)
    if args.json:
        print_json(
            {
                "resolution": config.model.resolution,
                "parameters": params,
                "training_flops_per_image": flops,
            }
        )
    else:
        for name, count in params.items():
            print(f"{name:<18} {count / 1e6:8.2f} M parameters")
        print(
            f"training step       {flops / 1e9:8.1f} GFLOP per image "
            f"({config.model.resolution} px, G+D forward and backward)"
        )
    return 0
