"""Fixtures of the training tests."""

from __future__ import annotations

import pytest

from .compiled_runs import ColdRun, cold_compiled_run


@pytest.fixture(scope="session")
def cold_compile(tmp_path_factory: pytest.TempPathFactory) -> ColdRun:
    """The compiled job's cold start, made once per test run (see :mod:`compiled_runs`)."""
    return cold_compiled_run(tmp_path_factory.mktemp("cold-compile"))
