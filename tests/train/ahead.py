"""The test run's shared inputs made ahead: in a background process at the lowest priority
(started by tests/conftest.py once the tests are collected), while the first tests leave cores
idle waiting on the mini-cluster and Airflow. Each input is made as the first test needing it
would make it, through the same lock (:func:`ffjobs.shared_inputs.make_once`): a test that
needs one sooner waits for it and leaves its core to the maker."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

NEEDED_BY = {
    "tiny": lambda item: (
        hasattr(item.module, "tiny_config") or hasattr(item.module, "tiny_identity_weights")
    ),
    "local": lambda item: hasattr(item.module, "place_local_encoders"),
    "cold-compile": lambda item: "cold_compile" in item.fixturenames,
}
"""Each input, and how a collected test shows it needs it: its module imports the helper that
makes it, or it uses the fixture. In the order they are made: the tiny encoder first (seconds,
and most training tests need it), the two encoders of the embedded default, the cold compile."""


def inputs_needed(items: Iterable[pytest.Item]) -> list[str]:
    """Which of :data:`NEEDED_BY` the collected ``items`` will use."""
    tests = [item for item in items if isinstance(item, pytest.Function)]
    return [name for name, needs in NEEDED_BY.items() if any(needs(item) for item in tests)]


def make_ahead(names: Iterable[str]) -> None:
    from .compiled_runs import cold_compile_of_the_run
    from .helpers import local_encoders, tiny_identity_weights

    makers = {
        "tiny": tiny_identity_weights,
        "local": local_encoders,
        "cold-compile": cold_compile_of_the_run,
    }
    for name in names:
        makers[name]()
