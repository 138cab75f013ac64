"""The test helpers hold their promises: a missing shared fixture skips here but fails under CI,
the wait says why it gave up, the CLI environment finds this checkout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import tests.helpers.shared as shared
from tests.helpers import REPO, cli_env, need_shared, run_cli, shared_fixture, wait_for


def test_a_missing_shared_fixture_skips_naming_where_it_looked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shared, "IN_CI", False)  # a developer's machine, also when CI runs this
    with pytest.raises(pytest.skip.Exception, match=str(tmp_path / "gone")):
        need_shared(tmp_path / "gone")


def test_a_missing_shared_fixture_fails_under_ci(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shared, "IN_CI", True)
    with pytest.raises(pytest.fail.Exception, match=str(tmp_path / "gone")):
        need_shared(tmp_path / "gone")


def test_the_fixtures_root_can_be_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "ltx2").mkdir()
    monkeypatch.setenv("AUTOTUNE_SHARED_FIXTURES", str(tmp_path))
    monkeypatch.delenv("AUTOTUNE_LTX2_FIXTURES", raising=False)
    assert shared_fixture("ltx2") == tmp_path / "ltx2"


def test_wait_for_ends_when_a_watched_process_exits() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"], text=True)
    proc.wait()
    with pytest.raises(AssertionError, match="the child exited waiting for never; it said nothing"):
        wait_for(
            lambda: False, "never", 60, processes={"the child": proc}, explain=lambda: "; it said nothing"
        )


def test_wait_for_times_out_and_returns_once_true() -> None:
    with pytest.raises(AssertionError, match=r"timed out after 0\.1s waiting for never"):
        wait_for(lambda: False, "never", 0.1)
    calls = iter([False, False, True])
    wait_for(lambda: next(calls), "the third look", 5)


def test_cli_env_puts_the_checkout_first_and_drops_what_it_is_told(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWEEP_FAKE_X", "1")
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    env = cli_env(drop=("SWEEP_FAKE_",), EXTRA="2")
    assert (
        env["PYTHONPATH"] == f"{REPO}{os.pathsep}/elsewhere"
        and "SWEEP_FAKE_X" not in env
        and env["EXTRA"] == "2"
    )
    assert cli_env(keep_pythonpath=False)["PYTHONPATH"] == str(REPO)


@pytest.mark.process
def test_run_cli_runs_this_checkouts_autotune(tmp_path: Path) -> None:
    done = run_cli("--version", cwd=tmp_path, env=cli_env(keep_pythonpath=False))
    assert done.returncode == 0 and "autotune" in done.stdout + done.stderr
