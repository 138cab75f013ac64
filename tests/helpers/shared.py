"""The real trainers' outputs in ``../shared/fixtures``: found beside the checkout, read in place.

Where they are absent a test skips on a developer's machine, but FAILS under ``CI=true``, naming
the path it looked in: CI must not pass by silently skipping every test on real outputs.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers.cli import REPO

IN_CI = os.environ.get("CI") == "true"


def _fixtures_root() -> Path:
    """``AUTOTUNE_SHARED_FIXTURES``, else ``shared/fixtures`` beside the checkout or beside a folder
    above it (a git worktree nested one level deeper)."""
    if os.environ.get("AUTOTUNE_SHARED_FIXTURES"):
        return Path(os.environ["AUTOTUNE_SHARED_FIXTURES"])
    for parent in REPO.parents:
        candidate = parent / "shared" / "fixtures"
        if candidate.is_dir():
            return candidate
    return REPO.parent / "shared" / "fixtures"


def shared_path(*parts: str) -> Path:
    """Where ``../shared/fixtures/<parts>`` is (it may not exist). ``AUTOTUNE_LTX2_FIXTURES``
    overrides the LTX-2 folder alone."""
    if parts and parts[0] == "ltx2" and os.environ.get("AUTOTUNE_LTX2_FIXTURES"):
        return Path(os.environ["AUTOTUNE_LTX2_FIXTURES"], *parts[1:])
    return _fixtures_root().joinpath(*parts)


def need_shared(path: Path) -> Path:
    """``path`` when it exists; else skip the test, or fail it under ``CI=true``."""
    if not path.exists():
        message = f"real trainer output not found: looked in {path}"
        if IN_CI:
            pytest.fail(f"{message} (CI=true: the fixtures must be there; set AUTOTUNE_SHARED_FIXTURES)")
        pytest.skip(message)
    return path


def shared_fixture(*parts: str) -> Path:
    """``../shared/fixtures/<parts>``, which the test needs: skip where absent (fail under CI)."""
    return need_shared(shared_path(*parts))
