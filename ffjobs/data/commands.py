"""``ffjobs data synth`` and ``ffjobs validate``."""

from __future__ import annotations

import argparse
from pathlib import Path

from ffjobs.cli import add_config_arguments, add_json_argument, config_from_args, print_json
from ffjobs.errors import ExitCode, UserError


def register(subparsers: argparse._SubParsersAction) -> None:
    data = subparsers.add_parser("data", help="dataset tools (synthetic face identity dataset)")
    actions = data.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    synth = actions.add_parser(
        "synth", help="write a deterministic synthetic face identity dataset"
    )
    add_config_arguments(synth)
    add_json_argument(synth)
    synth.add_argument("--out", help="output directory (default: data.source)")
    synth.add_argument("--identities", type=int, help="default: data.synth.identities")
    synth.add_argument("--per-identity", type=int, help="default: data.synth.per_identity")
    synth.add_argument("--size", type=int, help="image side in pixels (default: data.synth.size)")
    synth.add_argument("--seed", type=int, help="default: data.synth.seed")
    synth.add_argument("--format", choices=("jpg", "png"), default="jpg")
    synth.add_argument(
        "--corrupt",
        action="store_true",
        help="also plant every defect validation must find (for tests and drills)",
    )
    synth.set_defaults(handler=_synth)

    validate = subparsers.add_parser(
        "validate", help="check a dataset is fit to train on (exit 1 when the policy fails)"
    )
    add_config_arguments(validate)
    add_json_argument(validate)
    validate.add_argument(
        "dataset", nargs="?", help="local directory or s3://bucket/prefix (default: data.source)"
    )
    validate.add_argument("--layout", choices=("auto", "identity_folders", "flat", "manifest"))
    validate.add_argument("--manifest", help="manifest file relative to the dataset root")
    validate.add_argument(
        "--report",
        metavar="OUT.json",
        help="report path; report.md and quarantine.txt go beside it "
        "(default: data.validation.report_dir/report.json)",
    )
    validate.set_defaults(handler=_validate)


def _synth(args: argparse.Namespace) -> int:
    from ffjobs.data.synth import generate_dataset

    config = config_from_args(args).data
    options = {
        "identities": args.identities or config.synth.identities,
        "per_identity": args.per_identity or config.synth.per_identity,
        "size": args.size or config.synth.size,
        "seed": config.synth.seed if args.seed is None else args.seed,
    }
    if options["identities"] < 2 or options["per_identity"] < 1 or options["size"] < 16:
        raise UserError("--identities must be >= 2, --per-identity >= 1 and --size >= 16")
    if args.corrupt and options["identities"] < 12:
        raise UserError("--corrupt needs --identities >= 12 to plant every defect")
    out = Path(args.out or config.source)
    if str(out).startswith("s3://"):
        raise UserError(f"--out {out}: synth writes local files; upload them to S3 afterwards")
    generate_dataset(out, corrupt=args.corrupt, image_format=args.format, **options)
    result = {
        "out": str(out),
        "images": options["identities"] * options["per_identity"],
        **options,
        "corrupt": args.corrupt,
    }
    if args.json:
        print_json(result)
    else:
        print(
            f"wrote {result['images']} images of {options['identities']} identities "
            f"({options['size']} px, seed {options['seed']}) to {out}"
            + (" with planted defects (planted.json)" if args.corrupt else "")
        )
    return ExitCode.OK


def _validate(args: argparse.Namespace) -> int:
    from ffjobs.data.progress import ProgressLine
    from ffjobs.data.report import human_summary, write_report
    from ffjobs.data.validate import validate_dataset

    config = config_from_args(args)
    data = config.data
    dataset = args.dataset or data.source
    report = validate_dataset(
        dataset,
        data.validation,
        layout=args.layout or data.layout,
        manifest=args.manifest or data.manifest,
        progress=ProgressLine("validate"),
        endpoint_url=config.s3.endpoint_url,
        region=config.s3.region,
    )
    paths = write_report(report, args.report or Path(data.validation.report_dir) / "report.json")
    if args.json:
        print_json({**report.to_dict(), "report_files": {k: str(v) for k, v in paths.items()}})
    else:
        print(human_summary(report))
        print(
            f"report: {paths['json']} (markdown {paths['markdown']}, "
            f"quarantine {paths['quarantine']})"
        )
    return ExitCode.OK if report.passed else ExitCode.FAILED
