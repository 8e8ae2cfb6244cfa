"""Review decisions on registered versions: approve (to ``champion``), reject, and a listing.

Every decision is recorded on the version as tags (who, when, why), so the registry itself is
the review log; aliases say which version is in use (``champion``) and which awaits review
(``challenger``).
"""

from __future__ import annotations

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
    version_by_alias,
)
from ffjobs.registry.model_card import KEY_METRICS


@dataclass(frozen=True)
class Review:
    """Who decided, why, and when (UTC)."""

    reviewer: str
    reason: str
    at: str = ""

    def __post_init__(self) -> None:
        if not self.reason.strip():
            raise UserError("--reason: say why (it is recorded on the version for later readers)")
        if not self.at:
            object.__setattr__(self, "at", datetime.now(UTC).isoformat(timespec="seconds"))

    def tags(self, status: str) -> dict[str, str]:
        return {
            STATUS_TAG: status,
            "reviewed_by": self.reviewer,
            "reviewed_at": self.at,
            "review_reason": self.reason.strip(),
        }


def approve(client: Any, name: str, version: str, review: Review, *, force: bool = False) -> dict:
    """Make ``version`` the champion. The previous champion is tagged ``replaced_by`` and
    ``replaced_at``; ``challenger`` is removed if it pointed here. A rejected version needs
    ``force``; its rejection is then kept in the tag ``previous_review``."""
    chosen = model_version(client, name, version)
    status = chosen.tags.get(STATUS_TAG)
    if status == REJECTED and not force:
        raise UserError(
            f"{name} version {version} was rejected by {chosen.tags.get('reviewed_by', '?')} "
            f"({chosen.tags.get('review_reason', 'no reason recorded')}); approve it anyway "
            "with --force"
        )
    if status == REJECTED:
        _set_tags(client, name, version, {"previous_review": _review_summary(chosen.tags)})
    previous = version_by_alias(client, name, CHAMPION)
    if previous is not None and previous.version != chosen.version:
        replaced = {"replaced_by": chosen.version, "replaced_at": review.at}
        _set_tags(client, name, previous.version, replaced)
    client.set_registered_model_alias(name, CHAMPION, chosen.version)
    _set_tags(client, name, version, review.tags(APPROVED))
    _drop_alias_if_here(client, name, CHALLENGER, chosen.version)
    return {
        "name": name,
        "version": chosen.version,
        "status": APPROVED,
        "replaced": previous.version if previous and previous.version != chosen.version else None,
    }


def reject(client: Any, name: str, version: str, review: Review) -> dict:
    """Record ``version`` as rejected and drop ``challenger`` from it; ``champion`` is never
    touched (the champion itself cannot be rejected: approve its successor instead)."""
    chosen = model_version(client, name, version)
    champion = version_by_alias(client, name, CHAMPION)
    if champion is not None and champion.version == chosen.version:
        raise UserError(
            f"{name} version {version} is the champion; approve the version that should "
            "replace it instead (rejecting it would leave the champion alias on a rejected model)"
        )
    _set_tags(client, name, version, review.tags(REJECTED))
    _drop_alias_if_here(client, name, CHALLENGER, chosen.version)
    return {"name": name, "version": chosen.version, "status": REJECTED}


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


def _review_summary(tags: dict[str, str]) -> str:
    return (
        f"{tags.get(STATUS_TAG)} by {tags.get('reviewed_by', '?')} at "
        f"{tags.get('reviewed_at', '?')}: {tags.get('review_reason', '')}"
    )


def _iso(millis: int | None) -> str | None:
    if not millis:
        return None
    return datetime.fromtimestamp(millis / 1000, UTC).isoformat(timespec="seconds")
