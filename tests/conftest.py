"""Fixtures shared by the test files. Helpers (the CLI's environment and runner, waits, the shared
fixture finder) live in ``tests/helpers``; the names below stay importable from here too."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import FAKES, IN_CI, REPO, shared_fixture, shared_path

# The throwaway PostgreSQL server (fixtures pg_server, pg_url) for the multi-worker tests.
pytest_plugins = ["tests.pg"]

__all__ = ["FAKES", "IN_CI", "REPO", "SHARED_LTX2"]

#: Where the real LTX-2 trainer's configs, logs and schema are (it may not exist: use the fixture).
SHARED_LTX2 = shared_path("ltx2")


@pytest.fixture
def ltx2_fixtures() -> Path:
    """The real LTX-2 trainer configs beside the checkout; skip where absent (fail under CI=true)."""
    return shared_fixture("ltx2")
