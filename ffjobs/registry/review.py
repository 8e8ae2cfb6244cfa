"""Review decisions on registered versions: approve (to ``champion``), reject, and a listing.

:func:`decide` is the one way a decision is applied, whoever makes it: ``ffjobs registry
approve|reject`` and the pipeline's review task in Airflow record it identically. Each
decision also rewrites the review state line of the cards it changed (the version's, and the
replaced champion's).

Every decision is appended to the version's history (tags ``review.1``, ``review.2``, ...: who,
when, why), never overwriting an earlier one, so the registry itself is the review log; the
tags ``validation_status``, ``reviewed_by``, ... show the latest for display. Aliases say which
version is in use (``champion``) and which awaits review (``challenger``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ffjobs.errors import UserError
from ffjobs.registry.client import (
    APPROVED,
    CHALLENGER,
    CHAMPION,
    PENDING,
    REJECTED,
    STATUS_TAG,
    model_version,
    registered_model,
    set_alias,
    version_by_alias,
)
from ffjobs.registry.model_card import KEY_METRICS, refresh_model_card

REVIEW_TAG_PREFIX = "review."
"""Each decision is the tag ``review.<n>`` (1, 2, ...): a JSON record appended, never rewritten."""

APPROVE, REJECT = "approve", "reject"
"""The two decisions :func:`decide` applies."""

REASON_LIMIT = 1000
"""Characters of a reason: a record must fit MLflow's 5000-character tag value."""


@dataclass(frozen=True)
class Review:
    """Who decided, why, and when (UTC)."""

    reviewer: str
    reason: str
    at: str = ""

    def __post_init__(self) -> None:
        if not self.reason.strip():
            raise UserError("--reason: say why (it is recorded on the version for later readers)")
        if len(self.reason.strip()) > REASON_LIMIT:
            raise UserError(
                f"--reason: {len(self.reason.strip())} characters; keep it under {REASON_LIMIT} "
                "(link to a longer write-up)"
            )
        if not self.at:
            object.__setattr__(self, "at", datetime.now(UTC).isoformat(timespec="seconds"))

    def tags(self, status: str) -> dict[str, str]:
        """The version's current-state tags, for display; the history is :func:`append_review`'s."""
        return {
            STATUS_TAG: status,
            "reviewed_by": self.reviewer,
            "reviewed_at": self.at,
            "review_reason": self.reason.strip(),
        }

    def record(self, status: str, **extra: str) -> str:
        """This decision as one history entry (a JSON object)."""
        entry = {"decision": status, "by": self.reviewer, "at": self.at, **extra}
        return json.dumps({**entry, "reason": self.reason.strip()}, sort_keys=False)


def decide(
    client: Any, name: str, version: str, decision: str, review: Review, *, force: bool = False
) -> dict:
    """Apply a reviewer's ``decision`` (:data:`APPROVE` or :data:`REJECT`) to ``version`` with
    who, when and why from ``review``: :func:`approve` (``force``: see there) or :func:`reject`.
    Returns what changed (``name``, ``version``, ``status``, ``changed``, ``replaced``)."""
    if decision == APPROVE:
        return approve(client, name, version, review, force=force)
    if decision == REJECT:
        return {**reject(client, name, version, review), "replaced": None}
    raise ValueError(f"decision {decision!r}: one of {APPROVE!r}, {REJECT!r}")


def decision_summary(result: dict) -> str:
    """One line saying what :func:`decide` did, as a reviewer reads it."""
    name, version = result["name"], result["version"]
    if result["status"] == REJECTED:
        return f"{name} version {version} is rejected; the champion is unchanged"
    if not result["changed"]:
        return (
            f"{name} version {version} is the champion already (approved by "
            f"{result.get('reviewed_by') or '?'} at {result.get('reviewed_at') or '?'}); "
            "nothing changed"
        )
    replaced = f" (replaces version {result['replaced']})" if result.get("replaced") else ""
    return f"{name} version {version} is the champion{replaced}"


def earlier_decision(client: Any, name: str, version: str) -> dict[str, str] | None:
    """The decision already recorded on ``version`` (``status``, ``reviewed_by``,
    ``reviewed_at``, ``review_reason``), or None while it is pending review."""
    tags = model_version(client, name, version).tags or {}
    status = tags.get(STATUS_TAG, PENDING)
    if status == PENDING:
        return None
    keys = ("reviewed_by", "reviewed_at", "review_reason")
    return {"status": status, **{key: tags.get(key, "?") for key in keys}}


def approve(client: Any, name: str, version: str, review: Review, *, force: bool = False) -> dict:
    """Make ``version`` the champion. The previous champion is tagged ``replaced_by`` and
    ``replaced_at``; ``challenger`` is removed if it pointed here. Only the challenger is
    approved without ``force`` (a rejected version, or one that is not the challenger, needs
    it). The decision is appended to the version's history; approving the champion again
    writes nothing (``changed`` is False)."""
    chosen = model_version(client, name, version)
    status = chosen.tags.get(STATUS_TAG)
    previous = version_by_alias(client, name, CHAMPION)
    if previous is not None and previous.version == chosen.version:
        # a lost connection may have left the challenger alias here: finish that approval
        _drop_alias_if_here(client, name, CHALLENGER, chosen.version)
        return _result(name, chosen.version, APPROVED, changed=False, by=chosen.tags)
    if not force:
        _check_approvable(client, name, chosen, status)
    extra = {"forced_over": status or PENDING} if force and status != PENDING else {}
    append_review(client, name, chosen.version, review.record(APPROVED, **extra))
    if previous is not None:
        replaced = {"replaced_by": chosen.version, "replaced_at": review.at}
        _set_tags(client, name, previous.version, replaced)
    _set_tags(client, name, version, review.tags(APPROVED))
    set_alias(client, name, CHAMPION, chosen.version)
    _drop_alias_if_here(client, name, CHALLENGER, chosen.version)
    replaced = [previous.version] if previous is not None else []
    refresh_model_card(client, name, [chosen.version, *replaced])
    result = _result(name, chosen.version, APPROVED, changed=True)
    return {**result, "replaced": previous.version if previous is not None else None}


def reject(client: Any, name: str, version: str, review: Review) -> dict:
    """Record ``version`` as rejected (appended to its history) and drop ``challenger`` from
    it; ``champion`` is never touched (the champion itself cannot be rejected: approve its
    successor instead)."""
    chosen = model_version(client, name, version)
    champion = version_by_alias(client, name, CHAMPION)
    if champion is not None and champion.version == chosen.version:
        raise UserError(
            f"{name} version {version} is the champion; approve the version that should "
            "replace it instead (rejecting it would leave the champion alias on a rejected model)"
        )
    append_review(client, name, chosen.version, review.record(REJECTED))
    _set_tags(client, name, version, review.tags(REJECTED))
    _drop_alias_if_here(client, name, CHALLENGER, chosen.version)
    refresh_model_card(client, name, [chosen.version])
    return _result(name, chosen.version, REJECTED, changed=True)


def append_review(client: Any, name: str, version: str, record: str) -> str:
    """Add ``record`` to the version's history as the next ``review.<n>`` tag; returns the key."""
    from ffjobs.tracking.redact import redact_text

    tags = client.get_model_version(name, str(version)).tags or {}
    key = f"{REVIEW_TAG_PREFIX}{len(review_history(tags)) + 1}"
    while key in tags:  # a record is never overwritten, whatever the numbering holds
        key = f"{REVIEW_TAG_PREFIX}{int(key.removeprefix(REVIEW_TAG_PREFIX)) + 1}"
    client.set_model_version_tag(name, str(version), key, redact_text(record))
    return key


def review_history(tags: dict[str, str]) -> list[dict[str, Any]]:
    """The version's review records, oldest first (an unreadable one kept as its text)."""
    numbered = []
    for key, value in tags.items():
        number = key.removeprefix(REVIEW_TAG_PREFIX)
        if key.startswith(REVIEW_TAG_PREFIX) and number.isdigit():
            try:
                entry = json.loads(value)
            except ValueError:
                entry = {"text": value}
            numbered.append((int(number), entry if isinstance(entry, dict) else {"text": value}))
    return [entry for _, entry in sorted(numbered, key=lambda pair: pair[0])]


def _check_approvable(client: Any, name: str, chosen: Any, status: str | None) -> None:
    version = chosen.version
    if status == REJECTED:
        raise UserError(
            f"{name} version {version} was rejected by {chosen.tags.get('reviewed_by', '?')} "
            f"({chosen.tags.get('review_reason', 'no reason recorded')}); approve it anyway "
            "with --force"
        )
    challenger = version_by_alias(client, name, CHALLENGER)
    if challenger is None or challenger.version != version:
        which = (
            f"the challenger is version {challenger.version}"
            if challenger is not None
            else "no version is the challenger"
        )
        raise UserError(
            f"{name} version {version} is not the challenger ({which}; it is "
            f"{status or PENDING}); approve it anyway with --force"
        )


def _result(name: str, version: str, status: str, *, changed: bool, by: Any = None) -> dict:
    result = {"name": name, "version": version, "status": status, "changed": changed}
    if not changed:
        result["reviewed_by"] = (by or {}).get("reviewed_by")
        result["reviewed_at"] = (by or {}).get("reviewed_at")
        result["replaced"] = None
    return result


def list_versions(client: Any, name: str) -> list[dict[str, Any]]:
    """Every version of ``name``, newest first: aliases, review state, key metrics, run key."""
    model = registered_model(client, name)
    aliases: dict[str, list[str]] = {}
    for alias, version in (model.aliases or {}).items():
        aliases.setdefault(str(version), []).append(alias)
    rows = []
    for v in client.search_model_versions(f"name='{name}'"):
        tags = dict(v.tags or {})
        rows.append(
            {
                "version": v.version,
                "aliases": sorted(aliases.get(str(v.version), [])),
                "status": tags.get(STATUS_TAG, PENDING),
                "reviewed_by": tags.get("reviewed_by"),
                "reviewed_at": tags.get("reviewed_at"),
                "review_reason": tags.get("review_reason"),
                "replaced_by": tags.get("replaced_by"),
                "reviews": review_history(tags),
                "metrics": {m: tags[f"eval.{m}"] for m in KEY_METRICS if f"eval.{m}" in tags},
                "run_key": tags.get("run_key"),
                "run_id": v.run_id,
                "created": _iso(v.creation_timestamp),
            }
        )
    return sorted(rows, key=lambda row: int(row["version"]), reverse=True)


def _set_tags(client: Any, name: str, version: str, tags: dict[str, str]) -> None:
    for key, value in tags.items():
        client.set_model_version_tag(name, str(version), key, str(value))


def _drop_alias_if_here(client: Any, name: str, alias: str, version: str) -> None:
    current = version_by_alias(client, name, alias)
    if current is not None and current.version == version:
        client.delete_registered_model_alias(name, alias)


def _iso(millis: int | None) -> str | None:
    if not millis:
        return None
    return datetime.fromtimestamp(millis / 1000, UTC).isoformat(timespec="seconds")
