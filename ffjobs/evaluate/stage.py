"""The evaluation stage: measure the run's model on held-out identities, compare it with the
registry's champion (evaluated now, on the same set, with the same encoder) and gate it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ffjobs.config import Config
from ffjobs.errors import ExitCode
from ffjobs.runs.run import Run, StageOutcome

REPORT = "evaluation.json"
SAMPLES = "samples.png"


def evaluate_stage(config: Config, run: Run, *, model_uri: str | None = None) -> StageOutcome:
    """Evaluate the run's latest verified checkpoint (or the registered model ``model_uri``)
    into ``<run>/evaluate/`` (``evaluation.json``, ``samples.png``); ``blocked`` (exit code 1)
    when the gate blocks it: a decision, which the register stage reads and skips on.

    Facts (the register stage reads them): ``report``, ``samples`` (with ``sample_identity``,
    the identity score of each pair shown), ``step``, ``metrics``,
    ``skipped``, ``eval_set``, ``encoder``, ``champion`` (``None`` without one), ``gate`` and
    ``verdict`` (``passed`` or ``blocked``).
    """
    import torch

    from ffjobs.evaluate.champion import RegistryUnavailable, load_champion
    from ffjobs.evaluate.gate import decide
    from ffjobs.evaluate.samples import SampleRow, identity_captions, save_sample_grid
    from ffjobs.quality.encoder import describe_evaluation_encoder, load_evaluation_encoder
    from ffjobs.quality.evalset import build_evaluation_set
    from ffjobs.quality.measure import measure, swap_scores, unchanged_target_scores
    from ffjobs.quality.reference import ground_truth_swaps
    from ffjobs.quality.significance import LEVEL, describe_metrics, metric_intervals, versus_chance

    model, step, evaluated = _candidate(config, run, model_uri)
    evalset = build_evaluation_set(config, run.facts("validate").get("quarantine"))
    encoder = load_evaluation_encoder(config)
    extractors = _extractors(config)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    options = {"batch_size": config.evaluate.batch_size, "device": device}
    ours = measure(model, evalset, encoder, extractors, **options)
    unchanged = unchanged_target_scores(evalset, encoder, **options)
    truth = ground_truth_swaps(config, evalset)
    if isinstance(truth, str):
        ground_truth: dict[str, Any] = {"skipped": truth}
    else:
        best = swap_scores(truth, evalset, encoder, **options)
        ground_truth = {
            **best,
            "model_share": {k: ours.metrics[k] / v for k, v in best.items() if v > 0},
        }

    try:
        champion = load_champion(config)
    except RegistryUnavailable as exc:
        return StageOutcome("evaluate", "failed", 0.0, str(exc), exc.exit_code)
    theirs = (
        None
        if champion is None
        else measure(champion.model, evalset, encoder, extractors, **options)
    )
    vs_chance = versus_chance(ours.metrics["identity_top1"], ours.pairs, evalset.identities)
    decision = decide(
        ours.metrics,
        config.evaluate.gate,
        vs_chance=vs_chance,
        champion=None if theirs is None else theirs.metrics,
    )
    out = run.stage_dir("evaluate")
    shown = slice(0, config.evaluate.samples)
    rows = [
        SampleRow("source", evalset.images[evalset.sources][shown]),
        SampleRow("target", evalset.images[evalset.targets][shown]),
        SampleRow("fused", ours.fused[shown], identity_captions(ours.pair_identity[shown])),
    ]
    if theirs is not None:  # the champion's swaps under ours, for the reviewer
        label = f"champion v{champion.version}"
        rows.append(
            SampleRow(label, theirs.fused[shown], identity_captions(theirs.pair_identity[shown]))
        )
    samples = save_sample_grid(rows, out / SAMPLES)
    facts: dict[str, Any] = {
        "report": str(out / REPORT),
        "samples": str(samples),
        "sample_identity": [round(float(x), 4) for x in ours.pair_identity[shown]],
        "step": step,
        "model": evaluated,
        "metrics": ours.metrics,
        "skipped": extractors.skipped,
        "eval_set": evalset.size(),
        "encoder": describe_evaluation_encoder(config),
        "unchanged_target": unchanged,
        "ground_truth_swap": ground_truth,
        "chance_identity_top1": 1.0 / evalset.identities,
        "intervals": metric_intervals(ours.metrics, ours.per_pair, ours.pairs),
        "interval_level": LEVEL,
        "identity_top1_vs_chance": vs_chance,
        "champion": None
        if champion is None
        else {
            "version": champion.version,
            "model_uri": champion.model_uri,
            "metrics": theirs.metrics,
            "deltas": {
                k: v - theirs.metrics[k] for k, v in ours.metrics.items() if k in theirs.metrics
            },
        },
        "gate": decision.to_dict(),
        "verdict": "passed" if decision.passed else "blocked",
    }
    Path(facts["report"]).write_text(json.dumps(facts, indent=2) + "\n")

    measured = describe_metrics(ours.metrics, facts["intervals"], vs_chance)
    measured += f" on {evalset.identities} held-out identities"
    if "skipped" not in ground_truth:
        measured += (
            f" (a ground-truth swap: identity_top1 {ground_truth['identity_top1']:.3g}, "
            f"identity_cosine {ground_truth['identity_cosine']:.3g})"
        )
    against = (
        f"vs champion v{champion.version}"
        if champion is not None
        else f"no champion of {config.registry.model_name}: thresholds only"
    )
    metrics = {f"eval_{k}": v for k, v in ours.metrics.items()}
    metrics["eval_gate_passed"] = float(decision.passed)
    if "skipped" not in ground_truth:
        metrics.update(
            {
                f"eval_ground_truth_{k}": ground_truth[k]
                for k in ("identity_top1", "identity_cosine")
            }
        )
    outcome = dict(artifacts=[facts["report"], facts["samples"]], metrics=metrics, facts=facts)
    if not decision.passed:
        summary = f"gate blocked {evaluated}: " + "; ".join(decision.failures)
        return StageOutcome("evaluate", "blocked", 0.0, summary, ExitCode.FAILED, **outcome)
    summary = f"{evaluated}: {measured}; gate passed ({against})"
    return StageOutcome("evaluate", "passed", 0.0, summary, **outcome)


def _candidate(config: Config, run: Run, model_uri: str | None):
    """``(model, step, what it is)``: the run's newest verified checkpoint, or a registered
    model (its step: ``None``, a registry entry has no training step of this run)."""
    if model_uri is not None:
        from ffjobs.registry.swap import load_face_swap

        return load_face_swap(config.tracking, model_uri), None, model_uri
    from ffjobs.train.swap import face_swap_from_checkpoint

    model, step = face_swap_from_checkpoint(config, run.checkpoint_dir)
    return model, step, f"step {step}"


def _extractors(config: Config):
    from ffjobs.evaluate.extractors import load_extractor, skipped_reason
    from ffjobs.quality.measure import Extractors

    found = Extractors()
    for metric, setting in (("pose_error", "pose_weights"), ("fid", "fid_weights")):
        path = getattr(config.evaluate, setting)
        if path is None:
            found.skipped[metric] = skipped_reason(setting)
        else:
            module = load_extractor(setting, path, config.model.resolution)
            setattr(found, "pose" if metric == "pose_error" else "fid", module)
    return found
