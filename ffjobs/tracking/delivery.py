"""Sending spooled records to the MLflow run, by id: the only code that writes into a run.

Records are sent in the order they were spooled, in batches of MLflow's limits, and every
param, tag and uploaded file is redacted here (:mod:`ffjobs.tracking.redact`) on its way out.
After each batch the spool's watermark moves past it, so a delivery that stops half-way (the
server went away, the process died) resumes where it stopped.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ffjobs.tracking.redact import redact_document, redact_mapping, redact_text, redacted_copy
from ffjobs.tracking.spool import Spool, run_spools

METRIC_BATCH = 1000
"""MLflow's limit of metrics per ``log_batch`` call."""
TAG_OR_PARAM_BATCH = 100
"""MLflow's limit of params (and of tags) per ``log_batch`` call."""
PARAM_VALUE_LIMIT = 6000
"""MLflow 3's longest param value (longer values are cut)."""

Sender = Callable[[Any, str, list[dict[str, Any]]], None]


def send(client: Any, run_id: str, records: list[dict[str, Any]]) -> None:
    """Write ``records`` (spool records without ``seq``) into run ``run_id``, in order."""
    from mlflow.entities import Metric, Param, RunTag

    metrics: list[Metric] = []

    def flush_metrics() -> None:
        for i in range(0, len(metrics), METRIC_BATCH):
            client.log_batch(run_id, metrics=metrics[i : i + METRIC_BATCH])
        metrics.clear()

    for record in records:
        kind = record["kind"]
        if kind == "metrics":
            step, timestamp = int(record["step"]), int(record["timestamp"])
            metrics.extend(
                Metric(key, float(value), timestamp, step)
                for key, value in record["values"].items()
            )
            continue
        flush_metrics()
        if kind == "params":
            values = redact_mapping(record["params"])
            batch = [Param(k, v[:PARAM_VALUE_LIMIT]) for k, v in values.items()]
            for i in range(0, len(batch), TAG_OR_PARAM_BATCH):
                client.log_batch(run_id, params=batch[i : i + TAG_OR_PARAM_BATCH])
        elif kind == "tags":
            batch = [RunTag(k, v) for k, v in redact_mapping(record["tags"]).items()]
            for i in range(0, len(batch), TAG_OR_PARAM_BATCH):
                client.log_batch(run_id, tags=batch[i : i + TAG_OR_PARAM_BATCH])
        elif kind == "artifacts":
            _upload(client, run_id, record["paths"], record.get("artifact_path"))
        elif kind == "dataset":
            client.log_inputs(run_id, datasets=[_dataset_input(record)])
        else:
            raise ValueError(f"unknown tracking record kind {kind!r}")
    flush_metrics()


def _upload(client: Any, run_id: str, paths: list[str], artifact_path: str | None) -> None:
    with tempfile.TemporaryDirectory(prefix="ffjobs-redacted-") as tmp:
        for path in paths:
            if not Path(path).is_file():
                continue  # gone since it was logged (a cleaned-up log): nothing left to send
            client.log_artifact(run_id, str(redacted_copy(Path(path), Path(tmp))), artifact_path)


def _dataset_input(record: dict[str, Any]) -> Any:
    import json

    from mlflow.entities import Dataset, DatasetInput, InputTag

    dataset = Dataset(
        name=redact_text(record["name"]),
        digest=record["digest"],
        source_type=record["source_type"],
        source=json.dumps({"uri": redact_text(record["source"])}),
        profile=json.dumps(redact_document(record.get("profile") or {})),
    )
    tags = [InputTag("mlflow.data.context", record.get("context", "training"))]
    return DatasetInput(dataset=dataset, tags=tags)


def deliver(
    client: Any, run_id: str, spool: Spool, *, batch: int = 200, wait: bool = True
) -> tuple[int, int]:
    """Send ``spool``'s pending records, ``batch`` records at a time, moving its watermark
    after each; return ``(sent, left)``. Raises what the client raised (the watermark then
    stands after the last batch that went through)."""
    with spool.delivering(wait=wait) as held:
        if not held:  # another process is delivering this spool right now
            return 0, len(spool.pending())
        pending = spool.pending()
        sent = 0
        for i in range(0, len(pending), batch):
            chunk = pending[i : i + batch]
            send(client, run_id, [record for _, record in chunk])
            spool.mark_delivered(chunk[-1][0])
            sent += len(chunk)
        return sent, 0


def deliver_run(client: Any, run_id: str, directory: Path) -> tuple[int, int]:
    """Deliver every writer's spool of a run; ``(sent, left)``. Stops at the first failure."""
    sent = left = 0
    for spool in run_spools(directory):
        done, rest = deliver(client, run_id, spool)
        sent, left = sent + done, left + rest
    return sent, left
