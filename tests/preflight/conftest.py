"""Shared paths and helpers for the preflight tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from ffjobs.config import load_config

DATA = Path(__file__).resolve().parent / "data"
SHARED_FIXTURES = Path(__file__).resolve().parents[2] / ".." / "shared" / "fixtures" / "h200x2"


@pytest.fixture
def shared_fixtures() -> Path:
    """The recorded outputs from the 2xH200 machine; tests using them skip when absent."""
    if not SHARED_FIXTURES.is_dir():
        pytest.skip(f"shared fixtures not found at {SHARED_FIXTURES}")
    return SHARED_FIXTURES


@pytest.fixture
def nvlink_profile():
    """The preflight section of the 2xH200 NVLink cluster profile."""
    return load_config("h200x2-nvlink").preflight
