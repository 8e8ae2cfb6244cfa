"""``ffjobs registry approve|reject|list`` and ``ffjobs swap``: the review of registered models."""

from __future__ import annotations

import argparse
import getpass
from pathlib import Path

from ffjobs.cli import add_config_arguments, add_json_argument, print_json
from ffjobs.errors import ExitCode

REVIEW_HELP = (
    "The registry store is the config's tracking.tracking_uri when -c/--set give one, else "
    "MLFLOW_TRACKING_URI, else the embedded default (sqlite:///runs/mlflow.db)."
)


def register(subparsers: argparse._SubParsersAction) -> None:
    registry = subparsers.add_parser(
        "registry",
        help="review registered models: approve (to champion), reject, list",
        description="Review the versions the register stage leaves as 'challenger'. "
        "approve moves the alias 'champion' to a version, reject records why it is not used; "
        "both record reviewed_by, reviewed_at and review_reason on the version. " + REVIEW_HELP,
    )
    actions = registry.add_subparsers(dest="registry_command", metavar="ACTION", required=True)

    approve = actions.add_parser(
        "approve",
        help="make VERSION the champion (the previous one is tagged replaced_by)",
        description="Move the alias 'champion' to VERSION and tag it validation_status="
        "approved; the previous champion keeps replaced_by/replaced_at tags; 'challenger' is "
        "removed if it pointed to VERSION. Only the challenger is approved without --force "
        "(a rejected version or any other needs it). Each decision is appended to the "
        "version's history (tags review.1, review.2, ...); approving the champion again "
        "changes nothing. " + REVIEW_HELP,
    )
    _review_arguments(approve)
    approve.add_argument(
        "--force",
        action="store_true",
        help="approve a version that is not the challenger or was rejected before",
    )
    approve.set_defaults(handler=_decide, decision="approve")

    reject = actions.add_parser(
        "reject",
        help="record VERSION as rejected (champion is left alone)",
        description="Tag VERSION validation_status=rejected with who, when and why (appended "
        "to its history), and remove 'challenger' from it; 'champion' is never moved (the champion itself cannot "
        "be rejected: approve its successor). " + REVIEW_HELP,
    )
    _review_arguments(reject)
    reject.set_defaults(handler=_decide, decision="reject", force=False)

    listing = actions.add_parser(
        "list",
        help="versions of NAME: aliases, review state, key metrics, run key",
        description="Every version of NAME, newest first. " + REVIEW_HELP,
    )
    listing.add_argument("name", metavar="NAME", help="registered model name")
    add_config_arguments(listing)
    add_json_argument(listing)
    listing.set_defaults(handler=_list)

    swap = subparsers.add_parser(
        "swap",
        help="try a registered model: SOURCE's identity on TARGET's face, written to OUT",
        description="Load a face-swap model from the MLflow registry or a run, fuse SOURCE's "
        "identity into TARGET's pose and expression, and write the result to OUT at the "
        "model's resolution (images of any size are centre-cropped to a square and resized). "
        "Prints the identity cosine of the output to the source and to the target, measured "
        "with the model's own identity encoder. " + REVIEW_HELP,
    )
    swap.add_argument(
        "--model",
        required=True,
        metavar="URI",
        help="models:/NAME@champion, models:/NAME@challenger, models:/NAME/3 or "
        "runs:/RUN_ID/face_swap",
    )
    swap.add_argument("source", metavar="SOURCE", type=Path, help="face whose identity to keep")
    swap.add_argument(
        "target", metavar="TARGET", type=Path, help="face whose pose and lighting to keep"
    )
    swap.add_argument("out", metavar="OUT", type=Path, help="output image (.png, .jpg, ...)")
    swap.add_argument("--force", action="store_true", help="overwrite OUT if it exists")
    add_config_arguments(swap)
    add_json_argument(swap)
    swap.set_defaults(handler=_swap)


def _review_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", metavar="NAME", help="registered model name")
    parser.add_argument("version", metavar="VERSION", help="version number")
    parser.add_argument(
        "--reason", required=True, help="why (recorded on the version as review_reason)"
    )
    parser.add_argument(
        "--reviewer",
        default=None,
        help="who decides (default: the OS user, recorded as reviewed_by)",
    )
    add_config_arguments(parser)
    add_json_argument(parser)


def _client(args: argparse.Namespace):
    from ffjobs.registry.client import tracking_from_args
    from ffjobs.tracking.mlflow_logger import mlflow_client

    return mlflow_client(tracking_from_args(args))


def _review(args: argparse.Namespace):
    from ffjobs.registry.review import Review

    return Review(args.reviewer or getpass.getuser(), args.reason)


def _decide(args: argparse.Namespace) -> int:
    from ffjobs.registry.review import decide, decision_summary

    review = _review(args)
    client = _client(args)
    result = decide(client, args.name, args.version, args.decision, review, force=args.force)
    if args.json:
        print_json(result)
    else:
        print(decision_summary(result))
    return ExitCode.OK


def _list(args: argparse.Namespace) -> int:
    from ffjobs.registry.review import list_versions

    rows = list_versions(_client(args), args.name)
    if args.json:
        print_json(rows)
        return ExitCode.OK
    if not rows:
        print(f"{args.name}: no versions")
        return ExitCode.OK
    metrics = sorted({m for row in rows for m in row["metrics"]}, key=_metric_order)
    header = ["version", "aliases", "status", *metrics, "run key", "reviewed"]
    table = [
        [
            row["version"],
            ",".join(row["aliases"]) or "-",
            row["status"] + (f" (replaced by {row['replaced_by']})" if row["replaced_by"] else ""),
            *(row["metrics"].get(m, "-") for m in metrics),
            row["run_key"] or "-",
            f"{row['reviewed_by']} {row['reviewed_at']}: {row['review_reason']}"
            if row["reviewed_by"]
            else "-",
        ]
        for row in rows
    ]
    widths = [max(len(str(r[i])) for r in [header, *table]) for i in range(len(header) - 1)]
    for line in [header, *table]:
        print(
            "  ".join(f"{str(cell):<{w}}" for cell, w in zip(line, widths, strict=False))
            + "  "
            + str(line[-1])
        )
    return ExitCode.OK


def _metric_order(name: str) -> int:
    from ffjobs.registry.model_card import KEY_METRICS

    return KEY_METRICS.index(name) if name in KEY_METRICS else len(KEY_METRICS)


def _swap(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from ffjobs.registry.client import tracking_from_args
    from ffjobs.registry.swap import check_output, load_face_swap, open_image, swap_files

    # every mistake in the arguments is found before a model is downloaded
    check_output(args.out, force=args.force)
    source, target = open_image(args.source), open_image(args.target)
    model = load_face_swap(tracking_from_args(args), args.model)
    result = swap_files(model, source, target, args.out, force=args.force)
    if args.json:
        print_json({"model": args.model, **asdict(result)})
        return ExitCode.OK
    print(f"wrote {result.out} ({result.resolution}x{result.resolution}) with {args.model}")
    print(
        f"identity cosine of the output: to the source {result.cosine_to_source:.3f}, "
        f"to the target {result.cosine_to_target:.3f} "
        f"(source to target: {result.source_to_target:.3f})"
    )
    return ExitCode.OK
