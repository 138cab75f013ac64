"""The trial-side hook, injected into a plain PyTorch script that knows nothing of it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FAKES, REPO

HOOK_DIR = REPO / "trials" / "hook"
SCRIPT = FAKES / "plain_torch_train.py"

pytest.importorskip("torch")
pytestmark = pytest.mark.torch


def train(
    *args: str, hook_file: str | None, extra_path: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("AUTOTUNE_HOOK_FILE", "PYTHONPATH")}
    paths = [str(HOOK_DIR)] + ([str(extra_path)] if extra_path else [])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    if hook_file is not None:
        env["AUTOTUNE_HOOK_FILE"] = hook_file
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_reports_every_step_and_the_exit_and_changes_nothing_else(tmp_path: Path) -> None:
    # Another sitecustomize later on the path (a distro's, a venv's) must still run.
    other = tmp_path / "site"
    other.mkdir()
    marker = tmp_path / "marker"
    (other / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n", encoding="utf-8")
    hook_file = tmp_path / "hook.jsonl"
    hooked = train("5", hook_file=str(hook_file), extra_path=other)
    assert hooked.returncode == 0, hooked.stderr
    assert marker.read_text(encoding="utf-8") == "ran"
    records = events(hook_file)
    steps = [r for r in records if r["event"] == "step"]
    assert [r["step"] for r in steps] == [1, 2, 3, 4, 5]
    assert all(r["step_time_s"] > 0 for r in steps)
    assert [r["t"] for r in steps] == sorted(r["t"] for r in steps)
    # On CPU there is no CUDA memory to report: the fields are there, and null.
    assert all(r["max_memory_reserved_gb"] is None and r["max_memory_allocated_gb"] is None for r in steps)
    assert records[-1]["event"] == "exit"
    assert records[-1]["steps"] == 5
    assert records[-1]["exception"] is None
    plain = train("5", hook_file=None)
    assert (hooked.stdout, hooked.stderr) == (plain.stdout, plain.stderr)
    assert plain.stdout.splitlines()[-1] == "done"


def test_crash_is_recorded_and_the_traceback_left_as_it_was(tmp_path: Path) -> None:
    hook_file = tmp_path / "hook.jsonl"
    proc = train("5", "--crash-at", "3", hook_file=str(hook_file))
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == "RuntimeError: deliberate crash at step 3"
    records = events(hook_file)
    assert [r["step"] for r in records if r["event"] == "step"] == [1, 2]
    assert records[-1]["event"] == "exit"
    assert records[-1]["steps"] == 2
    assert records[-1]["exception"] == "builtins.RuntimeError: deliberate crash at step 3"


@pytest.mark.parametrize(
    "target",
    [
        "{tmp}/no/such/folder/hook.jsonl",  # cannot be opened: the hook never installs
        "/dev/full",  # opens, but every write fails: the hook turns itself off at the first step
    ],
)
def test_broken_hook_does_not_break_the_script(tmp_path: Path, target: str) -> None:
    proc = train("3", hook_file=target.format(tmp=tmp_path))
    assert proc.returncode == 0
    assert proc.stdout.splitlines()[-1] == "done"
    assert proc.stderr == ""


def test_without_the_variable_the_hook_does_nothing(tmp_path: Path) -> None:
    """Not importing torch, not writing anything: a plain Python start-up stays plain."""
    env = {k: v for k, v in os.environ.items() if k != "AUTOTUNE_HOOK_FILE"}
    env["PYTHONPATH"] = str(HOOK_DIR)
    code = "import sys; print('torch' in sys.modules, len(sys.meta_path))"
    hooked = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    env["AUTOTUNE_HOOK_FILE"] = str(tmp_path / "hook.jsonl")
    armed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert hooked.stdout.split()[0] == armed.stdout.split()[0] == "False"
    assert int(armed.stdout.split()[1]) == int(hooked.stdout.split()[1]) + 1  # only the import watcher
    assert not (tmp_path / "hook.jsonl").exists()
