"""Fixtures shared by the test files (pytest's only). Helpers to import (the CLI's environment and
runner, waits, the shared fixture finder) live in ``tests/helpers``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import shared_fixture

# The throwaway PostgreSQL server (fixtures pg_server, pg_url) for the multi-worker tests.
pytest_plugins = ["tests.pg"]


@pytest.fixture
def ltx2_fixtures() -> Path:
    """The real LTX-2 trainer configs beside the checkout; skip where absent (fail under CI=true)."""
    return shared_fixture("ltx2")
