"""``ffjobs data synth`` and ``ffjobs validate``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ffjobs.cli import add_config_arguments, add_json_argument, config_from_args, print_json
from ffjobs.errors import ExitCode, UserError
from ffjobs.runs.cli import add_run_arguments, run_single_stage


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
        "validate",
        help="check a dataset is fit to train on, as a new run (exit 1 when the policy fails)",
    )
    add_run_arguments(validate)
    validate.add_argument(
        "dataset", nargs="?", help="local directory or s3://bucket/prefix (default: data.source)"
    )
    validate.add_argument("--layout", choices=("auto", "identity_folders", "flat", "manifest"))
    validate.add_argument("--manifest", help="manifest file relative to the dataset root")
    validate.add_argument(
        "--report",
        metavar="OUT.json",
        help="also write the report here (report.md and quarantine.txt beside it); it is always "
        "in the run directory's validation/",
    )
    validate.set_defaults(handler=_validate)


def _synth(args: argparse.Namespace) -> int:
    from ffjobs.data.synth import generate_dataset, mark_complete, unmark_complete

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
    if out.is_dir():
        unmark_complete(out)  # incomplete while its files are rewritten
    generate_dataset(out, corrupt=args.corrupt, image_format=args.format, **options)
    images = options["identities"] * options["per_identity"]
    mark_complete(out, {**options, "images": images, "image_format": args.format})
    result = {
        "out": str(out),
        "images": images,
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
    from ffjobs.config import load_config
    from ffjobs.data.report import human_summary, write_report
    from ffjobs.data.validate import ValidationReport

    chosen = {"data.source": args.dataset, "data.layout": args.layout}
    chosen["data.manifest"] = args.manifest
    overrides = [f"{key}={json.dumps(value)}" for key, value in chosen.items() if value]
    config = load_config(args.config, [*args.overrides, *overrides])
    run, outcome = run_single_stage(args, "validate", config=config)
    report_path = Path(outcome.facts["report"])
    report = ValidationReport.from_dict(json.loads(report_path.read_text()))
    paths = {"json": report_path, "markdown": report_path.with_suffix(".md")}
    paths["quarantine"] = Path(outcome.facts["quarantine"])
    if args.report:
        paths = write_report(report, args.report)
    if args.json:
        files = {k: str(v) for k, v in paths.items()}
        print_json({**report.to_dict(), "run_key": run.key, "report_files": files})
    else:
        print(human_summary(report))
        print(
            f"report: {paths['json']} (markdown {paths['markdown']}, "
            f"quarantine {paths['quarantine']}); run {run.key}"
        )
    return int(outcome.exit_code)
