"""The card's review state line follows the version through registration, review and the
aliases moving on, in a real registry (a sqlite store); the rest of the card stays as made."""

from __future__ import annotations

from ffjobs.registry.model_card import review_state_line
from ffjobs.registry.publish import complete_registration
from ffjobs.registry.review import Review, approve, reject

BODY = "\n\n## Data\n- Dataset: `synthetic`\n"


def _version(client, name: str, tmp_path) -> str:
    card = "# Face-swap model\n\n" + review_state_line({}, ["challenger"]) + BODY
    source = tmp_path / "model"
    source.mkdir(exist_ok=True)
    version = client.create_model_version(name, source=str(source), description=card)
    complete_registration(client, name, str(version.version))
    return str(version.version)


def _state(client, name: str, version: str) -> str:
    card = client.get_model_version(name, version).description
    assert card.startswith("# Face-swap model\n\nReview state: ") and card.endswith(BODY)
    return card.split("\n")[2]


def test_cards_follow_review_and_aliases(tmp_path):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    name = "cards"
    client.create_registered_model(name)
    first = _version(client, name, tmp_path)
    assert _state(client, name, first).startswith("Review state: **pending review** (alias `c")

    second = _version(client, name, tmp_path)  # takes the challenger alias from the first
    assert _state(client, name, first) == (
        "Review state: **pending review**, no longer the challenger (no alias: a newer "
        "version took the alias)."
    )
    approve(client, name, second, Review("ana", "sharper eyes", at="2026-01-02T03:04:05+00:00"))
    assert _state(client, name, second) == (
        "Review state: **approved** by ana on 2026-01-02T03:04:05+00:00 (alias `champion`): "
        "sharper eyes"
    )
    reject(client, name, first, Review("bo", "blurry", at="2026-01-03T00:00:00+00:00"))
    assert _state(client, name, first) == (
        "Review state: **rejected** by bo on 2026-01-03T00:00:00+00:00 (no alias): blurry"
    )

    third = _version(client, name, tmp_path)
    approve(client, name, third, Review("ana", "better", at="2026-01-04T00:00:00+00:00"))
    assert _state(client, name, second) == (
        "Review state: **approved** by ana on 2026-01-02T03:04:05+00:00 (no alias; replaced by "
        "version 3 on 2026-01-04T00:00:00+00:00): sharper eyes"
    )
