"""Two registrations of one model at once, in a real registry (a SQLite store): the later one's
alias and model creation meet the rows the other just made, and both still succeed.

The interleaving is forced: the other registration's write runs between this one's read and its
insert (SQLAlchemy's ``before_flush``), the window in which two ``ffjobs run`` once collided."""

from __future__ import annotations

import threading
from contextlib import contextmanager

import pytest
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from ffjobs.registry.client import CHALLENGER, set_alias
from ffjobs.registry.publish import ensure_registered_model


@contextmanager
def another_write_first(kind: type, write):
    """``write()`` runs once, in another thread (so on another connection), just before this
    thread's session inserts its first new ``kind`` row."""
    from sqlalchemy import event
    from sqlalchemy.orm import Session

    done: list[bool] = []

    def before_flush(session, _context, _instances):
        if done or not any(isinstance(row, kind) for row in session.new):
            return
        done.append(True)
        other = threading.Thread(target=write)
        other.start()
        other.join()

    event.listen(Session, "before_flush", before_flush)
    try:
        yield done
    finally:
        event.remove(Session, "before_flush", before_flush)


@pytest.fixture
def registry(tmp_path):
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    client.create_registered_model("race")
    for _ in range(2):
        client.create_model_version("race", source=str(tmp_path))
    return client


def test_an_alias_set_by_another_registration_meanwhile_is_set_again(registry):
    from mlflow.store.model_registry.dbmodels.models import SqlRegisteredModelAlias

    def other():
        registry.set_registered_model_alias("race", CHALLENGER, "1")

    # the store's own call fails on that interleaving: the race is real
    with (
        another_write_first(SqlRegisteredModelAlias, other) as raced,
        pytest.raises(MlflowException, match="UNIQUE constraint failed"),
    ):
        registry.set_registered_model_alias("race", CHALLENGER, "2")
    assert raced
    registry.delete_registered_model_alias("race", CHALLENGER)

    with another_write_first(SqlRegisteredModelAlias, other) as raced:
        set_alias(registry, "race", CHALLENGER, "2")
    assert raced
    aliases = registry.get_registered_model("race").aliases
    assert {alias: str(v) for alias, v in aliases.items()} == {CHALLENGER: "2"}  # the later one


def test_an_alias_that_fails_for_another_reason_still_fails(registry):
    with pytest.raises(MlflowException, match="not found|does not exist|Version"):
        set_alias(registry, "race", CHALLENGER, "7")  # no version 7
    assert registry.get_registered_model("race").aliases == {}


def test_a_model_another_registration_creates_meanwhile_is_taken_as_it_is(tmp_path):
    from mlflow.store.model_registry.dbmodels.models import SqlRegisteredModel

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    with (
        another_write_first(SqlRegisteredModel, lambda: client.create_registered_model("n")),
        pytest.raises(MlflowException, match="already exists"),
    ):
        client.create_registered_model("n")  # the store's own call: the race is real
    with another_write_first(
        SqlRegisteredModel, lambda: client.create_registered_model("o")
    ) as raced:
        ensure_registered_model(client, "o")
    assert raced
    assert {m.name for m in client.search_registered_models()} == {"n", "o"}
