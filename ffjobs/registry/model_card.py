"""The model card: a registered version's description, what a reviewer reads before approving.

Markdown, built only from what the run recorded (``run.json``: each stage's outcome and facts,
and the resolved config), so the card says what happened, not what was intended.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ffjobs.runs.run import Run

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
        "Review state: **pending review** (alias `challenger`). Check the lines below, try it "
        "with `ffjobs swap`, then `ffjobs registry approve` or `reject` it with a reason.",
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


def _number(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, int | float) else str(value)


def _delta(metric: str, value: float) -> str:
    better = value < 0 if metric in LOWER_IS_BETTER else value > 0
    mark = "better" if better else ("same" if value == 0 else "worse")
    return f"{value:+.4g} ({mark})"


def evaluation_lines(evaluation: Mapping[str, Any]) -> list[str]:
    """The card's evaluation section: the metrics table with the champion's beside them, the gate."""
    metrics = evaluation.get("metrics") or {}
    champion = evaluation.get("champion") or None
    eval_set = evaluation.get("eval_set") or {}
    scope = ", ".join(f"{n} {what}" for what, n in eval_set.items())
    lines = [
        "## Evaluation",
        f"- Checkpoint step {evaluation.get('step', '?')}"
        + (f", held-out set: {scope}" if scope else "")
        + f"; identity measured by {evaluation.get('encoder', 'unknown')}",
        f"- Champion compared: {champion['version'] if champion else 'none (no champion yet)'}",
        "",
        "| metric | this model | champion | change |",
        "| --- | --- | --- | --- |",
    ]
    names = [m for m in KEY_METRICS if m in metrics] + sorted(set(metrics) - set(KEY_METRICS))
    for name in names:
        theirs = (champion or {}).get("metrics", {}).get(name)
        delta = (champion or {}).get("deltas", {}).get(name)
        if delta is None and theirs is not None:
            delta = metrics[name] - theirs
        lines.append(
            f"| {name} | {_number(metrics[name])} | "
            f"{'-' if theirs is None else _number(theirs)} | "
            f"{'-' if delta is None else _delta(name, delta)} |"
        )
    for name, reason in (evaluation.get("skipped") or {}).items():
        lines.append(f"| {name} | skipped: {reason} | | |")
    gate = evaluation.get("gate") or {}
    lines += ["", f"Gate: **{'passed' if gate.get('passed') else 'blocked'}**"]
    lines += [f"- {reason}" for reason in gate.get("reasons", [])]
    return lines


def _links(run: Run, links: Mapping[str, str | None]) -> list[str]:
    lines = ["## Links", f"- Run key: `{run.key}` (`ffjobs runs show {run.key}`)"]
    named = {"mlflow_run": "MLflow run", "airflow": "Airflow DAG run", "git_commit": "Code"}
    for key, label in named.items():
        if links.get(key):
            lines.append(f"- {label}: {links[key]}")
    return lines


def _fit(card: str, limit: int) -> str:
    """``card``, cut to ``limit`` characters with a note where, if longer."""
    if len(card) <= limit:
        return card
    note = "\n\n(cut to fit the registry: the whole card is the run's artifact register/model_card.md)\n"
    return card[: limit - len(note)].rsplit("\n", 1)[0] + note
