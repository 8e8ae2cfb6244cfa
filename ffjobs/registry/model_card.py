"""The model card: a registered version's description, what a reviewer reads before approving.

Markdown, built only from what the run recorded (``run.json``: each stage's outcome and facts,
and the resolved config), so the card says what happened, not what was intended. Its review
state line is kept current by :func:`refresh_model_card` when a review decides on the version or
an alias leaves it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from ffjobs.runs.run import Run
from ffjobs.tracking.ui_links import is_link

DESCRIPTION_LIMIT = 5000
"""MLflow's SQL stores keep a version's description in a 5000-character column."""

KEY_METRICS = ("identity_top1", "identity_cosine", "psnr", "ssim", "pose_error", "fid")
LOWER_IS_BETTER = frozenset({"pose_error", "fid"})


def model_card(run: Run, *, step: int, links: Mapping[str, str | None]) -> str:
    """The card of the model built from ``run``'s checkpoint at ``step``.

    ``links``: ``mlflow_run``, ``airflow`` (``dag_id / run_id``) and ``git_commit``; missing or
    ``None`` ones are left out.
    """
    lines = [
        f"# Face-swap model of run `{run.key}`",
        "",
        review_state_line({}, ["challenger"]),
        "",
        *_data(run),
        "",
        *_training(run, step),
        "",
        *evaluation_lines(run.facts("evaluate")),
        "",
        *_links(run, links),
    ]
    return _fit("\n".join(lines) + "\n", DESCRIPTION_LIMIT)


def _stage_line(run: Run, stage: str) -> str:
    outcome = run.outcome(stage)
    if outcome is None:
        return "not run"
    return f"{outcome.get('status')}: {outcome.get('summary')}"


def _data(run: Run) -> list[str]:
    fingerprint = run.record.get("dataset_fingerprint") or run.facts("validate").get("fingerprint")
    return [
        "## Data",
        f"- Dataset: `{run.config.data.source}`, fingerprint `{fingerprint or 'unknown'}`",
        f"- Validation: {_stage_line(run, 'validate')}",
    ]


def _training(run: Run, step: int) -> list[str]:
    model, train, slurm = run.config.model, run.config.train, run.config.slurm
    devices = f"{slurm.gpus_per_node} GPU(s) per node" if slurm.gpus_per_node else "CPU"
    from ffjobs.train.attempts import attempts_file, read_attempts, run_goodput

    attempts = read_attempts(run)  # SLURM jobs and local launches alike
    recovery = (
        [
            f"- Attempts: {len(attempts)}, goodput {run_goodput(run):.1%} "
            f"(attempt log `{attempts_file(run)}`)",
            *(
                f"  - {a['number']}: {a.get('job_id') or ','.join(a.get('nodes', []))} "
                f"{a.get('summary', '')}"
                for a in attempts
            ),
        ]
        if attempts
        else ["- Attempts: none recorded"]
    )
    return [
        "## Training",
        f"- Model: {model.resolution} px; generator width {model.width} (max "
        f"{model.max_width}), {model.residual_blocks} residual block(s); identity encoder "
        f"{model.identity_arch} x{model.identity_width}, {model.identity_dim}-d, "
        f"weights `{model.identity_weights or 'random'}`",
        f"- Schedule: checkpoint step {step} of train.steps={train.steps}; batch "
        f"{train.batch_size} per rank x grad_accum {train.grad_accum}; lr {train.lr:g}; "
        f"precision {train.precision}; EMA {train.ema_decay or 'off'}",
        f"- Ranks: {slurm.nodes} node(s) x {slurm.tasks_per_node} rank(s), {devices} "
        f"({slurm.executor} executor)",
        f"- Preflight: {_stage_line(run, 'preflight')}",
        f"- Training: {_stage_line(run, 'train')}",
        *recovery,
    ]


REVIEW_STATE = "Review state: "
"""How the card's review state line starts (the line :func:`refresh_model_card` rewrites)."""


def review_state_line(tags: Mapping[str, str], aliases: Iterable[str]) -> str:
    """The card's review state line for a version with these tags and aliases."""
    from ffjobs.registry.client import APPROVED, PENDING, REJECTED, STATUS_TAG

    status = tags.get(STATUS_TAG, PENDING)
    held = ", ".join(f"`{alias}`" for alias in sorted(aliases))
    alias_text = f"alias {held}" if held else "no alias"
    by = (
        f" by {tags['reviewed_by']} on {tags.get('reviewed_at', '?')}"
        if tags.get("reviewed_by")
        else ""
    )
    why = f": {tags['review_reason']}" if tags.get("review_reason") else ""
    if status == APPROVED:
        replaced = (
            f"; replaced by version {tags['replaced_by']} on {tags.get('replaced_at', '?')}"
            if tags.get("replaced_by")
            else ""
        )
        return f"{REVIEW_STATE}**approved**{by} ({alias_text}{replaced}){why}"
    if status == REJECTED:
        return f"{REVIEW_STATE}**rejected**{by} ({alias_text}){why}"
    if "challenger" not in aliases:
        return (
            f"{REVIEW_STATE}**pending review**, no longer the challenger ({alias_text}: a newer "
            "version took the alias)."
        )
    return (
        f"{REVIEW_STATE}**pending review** ({alias_text}). Check the lines below, try it with "
        "`ffjobs swap`, then `ffjobs registry approve` or `reject` it with a reason."
    )


def refresh_model_card(client: Any, name: str, versions: Iterable[str | int]) -> None:
    """Rewrite the review state line of each version's card from its tags and aliases now
    (after a review decision, or when an alias moved away from it); the rest stays as made."""
    from ffjobs.tracking.redact import redact_text

    aliases: dict[str, list[str]] = {}
    for alias, number in (client.get_registered_model(name).aliases or {}).items():
        aliases.setdefault(str(number), []).append(alias)
    for number in dict.fromkeys(str(v) for v in versions):
        version = client.get_model_version(name, number)
        card = version.description or ""
        line = review_state_line(dict(version.tags or {}), aliases.get(number, []))
        lines = card.split("\n")
        at = next((i for i, text in enumerate(lines) if text.startswith(REVIEW_STATE)), None)
        if at is None:  # a card made by hand, without the line: left alone
            continue
        lines[at] = line
        fresh = "\n".join(lines)
        if fresh != card:
            client.update_model_version(name, number, description=redact_text(fresh))


def _number(value: Any) -> str:
    """Three significant digits: what a reviewer compares, not the float's noise."""
    return f"{value:.3g}" if isinstance(value, int | float) else str(value)


def _delta(metric: str, value: float) -> str:
    better = value < 0 if metric in LOWER_IS_BETTER else value > 0
    mark = "better" if better else ("same" if value == 0 else "worse")
    return f"{value:+.3g} ({mark})"


def _with_interval(value: float, interval: Any) -> str:
    if isinstance(interval, list | tuple) and len(interval) == 2:
        low, high = interval
        return f"{_number(value)} [{_number(low)}, {_number(high)}]"
    return _number(value)


def _skipped_line(skipped: Mapping[str, str]) -> list[str]:
    """The metrics not measured, on one line: each with the setting that would measure it."""
    if not skipped:
        return []
    named = []
    for metric, reason in skipped.items():
        setting = re.search(r"evaluate\.\w+", str(reason))
        named.append(f"{metric} (set `{setting.group()}`)" if setting else metric)
    return [f"- Not measured: {', '.join(named)}"]


def evaluation_lines(evaluation: Mapping[str, Any]) -> list[str]:
    """The card's evaluation section: the metrics table with the champion's beside them, the gate."""
    metrics = evaluation.get("metrics") or {}
    champion = evaluation.get("champion") or None
    eval_set = evaluation.get("eval_set") or {}
    scope = ", ".join(f"{n} {what}" for what, n in eval_set.items())
    intervals = evaluation.get("intervals") or {}
    level = evaluation.get("interval_level")
    shown = f"this model [{_interval_name(level)}]" if intervals else "this model"
    lines = [
        "## Evaluation",
        f"- Checkpoint step {evaluation.get('step', '?')}"
        + (f", held-out set: {scope}" if scope else "")
        + f"; identity measured by {evaluation.get('encoder', 'unknown')}",
        f"- Champion compared: {champion['version'] if champion else 'none (no champion yet)'}",
        *_chance_line(evaluation),
        *_skipped_line(evaluation.get("skipped") or {}),
        "",
        f"| metric | {shown} | champion | change |",
        "| --- | --- | --- | --- |",
    ]
    names = [m for m in KEY_METRICS if m in metrics] + sorted(set(metrics) - set(KEY_METRICS))
    for name in names:
        theirs = (champion or {}).get("metrics", {}).get(name)
        delta = (champion or {}).get("deltas", {}).get(name)
        if delta is None and theirs is not None:
            delta = metrics[name] - theirs
        lines.append(
            f"| {name} | {_with_interval(metrics[name], intervals.get(name))} | "
            f"{'-' if theirs is None else _number(theirs)} | "
            f"{'-' if delta is None else _delta(name, delta)} |"
        )
    gate = evaluation.get("gate") or {}
    lines += ["", f"Gate: **{'passed' if gate.get('passed') else 'blocked'}**"]
    lines += [f"- {reason}" for reason in gate.get("reasons", [])]
    return lines


def _interval_name(level: Any) -> str:
    if isinstance(level, int | float):
        return f"{level * 100 if level <= 1 else level:g}% interval"
    return "interval"


def _chance_line(evaluation: Mapping[str, Any]) -> list[str]:
    """What identity top-1 a guess scores: 1 / the held-out identities, when the report has
    them."""
    chance = evaluation.get("chance_identity_top1")
    identities = (evaluation.get("eval_set") or {}).get("identities")
    if chance is None and identities:
        chance = 1.0 / int(identities)
    if chance is None:
        return []
    among = f" (1 of {identities} held-out identities)" if identities else ""
    lines = [f"- Chance level of identity_top1: {_number(chance)}{among}"]
    test = evaluation.get("identity_top1_vs_chance") or {}
    if test.get("distinguishable") is False:
        lines.append(
            f"- identity_top1 is **not distinguishable from chance**: above chance at the "
            f"{test.get('alpha', 0.01):g} level needs {_number(test.get('floor', 1.0))}"
        )
    return lines


def _links(run: Run, links: Mapping[str, str | None]) -> list[str]:
    lines = ["## Links", f"- Run key: `{run.key}` (`ffjobs runs show {run.key}`)"]
    named = {"mlflow_run": "MLflow run", "airflow": "Airflow DAG run", "git_commit": "Code"}
    for key, label in named.items():
        if links.get(key):
            text = str(links[key])
            # an address in <...> is a link in any Markdown view; other text stays text
            lines.append(f"- {label}: <{text}>" if is_link(text) else f"- {label}: {text}")
    return lines


def _fit(card: str, limit: int) -> str:
    """``card``, cut to ``limit`` characters with a note where, if longer."""
    if len(card) <= limit:
        return card
    note = "\n\n(cut to fit the registry: the whole card is the run's artifact register/model_card.md)\n"
    return card[: limit - len(note)].rsplit("\n", 1)[0] + note
