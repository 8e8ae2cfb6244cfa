"""Fixtures of the training tests."""

from __future__ import annotations

import pytest

from .compiled_runs import ColdRun, cold_compile_of_the_run


@pytest.fixture(scope="session")
def cold_compile() -> ColdRun:
    """The compiled job's cold start, made once per test run (see :mod:`compiled_runs`): its
    folder is shared, so a test copies what it would write to."""
    return cold_compile_of_the_run()
