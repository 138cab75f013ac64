"""The GPU check script's dry run: its plan and environment, on a machine with no GPU (CI)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers import REPO

pytestmark = pytest.mark.process  # scripts/gpu_check.sh, a real run each


def run_check(*args: str, out: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, OUT=str(out), PYTHON=os.environ.get("PYTHON", __import__("sys").executable))
    return subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu_check.sh"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        check=False,
    )


def test_dry_run_checks_plan_and_environment(tmp_path: Path) -> None:
    proc = run_check("--dry-run", out=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "dry run: plan and environment OK" in out
    # The plan: one reference sweep per emulated card size, each with its own study and workdir.
    for size in ("24", "48"):
        assert f"--vram-gb {size} --workdir {tmp_path}/card-{size}gb --study gpu-check-{size}gb" in out
    assert "--force" in out  # 24 GB is below the LTX-2 floor: the check forces it on purpose
    assert "[ok] config valid for the reference trainer" in out
    assert "FAIL" not in out


def test_real_run_without_a_gpu_says_so_and_exits_2(tmp_path: Path) -> None:
    proc = run_check("--sizes", "24", out=tmp_path)
    assert proc.returncode == 2
    assert "[FAIL] CUDA available" in proc.stdout
    assert "not ready for the GPU check" in proc.stderr
