"""Shared test helpers. Fixtures from ``../shared/`` are read in place, never copied."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# The throwaway PostgreSQL server (fixtures pg_server, pg_url) for the multi-worker tests.
pytest_plugins = ["tests.pg"]

REPO = Path(__file__).resolve().parent.parent


def _find_shared_ltx2() -> Path:
    """``../shared/fixtures/ltx2`` beside the checkout (or beside a folder above it, for git
    worktrees nested one level deeper); ``AUTOTUNE_LTX2_FIXTURES`` overrides."""
    if os.environ.get("AUTOTUNE_LTX2_FIXTURES"):
        return Path(os.environ["AUTOTUNE_LTX2_FIXTURES"])
    for parent in REPO.parents:
        candidate = parent / "shared" / "fixtures" / "ltx2"
        if candidate.is_dir():
            return candidate
    return REPO.parent / "shared" / "fixtures" / "ltx2"


SHARED_LTX2 = _find_shared_ltx2()
FAKES = Path(__file__).resolve().parent / "fakes"
IN_CI = os.environ.get("CI") == "true"


@pytest.fixture
def ltx2_fixtures() -> Path:
    """The real LTX-2 trainer configs beside the checkout; skip where they are absent."""
    if not SHARED_LTX2.is_dir():
        pytest.skip(f"LTX-2 fixture configs not found at {SHARED_LTX2}")
    return SHARED_LTX2
