"""A script whose ``torch.load`` fails under torch >= 2.6's ``weights_only=True`` default, swept
through the real ``autotune sweep --cmd``: the baseline stops the sweep, and its message names the
exception line (``_pickle.UnpicklingError: Weights only load failed...``, raised at
torch/serialization.py:1609 @ 2.13), not the prose line the message ends in (:1441-1444), and the
log that holds it (stderr.log; stdout.log is empty)."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import autotune_argv, cli_env

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.torch, pytest.mark.process, pytest.mark.untimed, pytest.mark.timeout(300)]

SCRIPT = """\
import argparse, sys
import torch
torch.save({"args": argparse.Namespace(lr=1.0)}, sys.argv[1])  # as pytorch/examples save args
torch.load(sys.argv[1])
"""


def test_a_weights_only_failure_names_its_exception_and_its_log(tmp_path: Path) -> None:
    if tuple(int(p) for p in torch.__version__.split(".")[:2]) < (2, 6):
        pytest.skip("weights_only defaults to True from torch 2.6")
    script = tmp_path / "load.py"
    script.write_text(SCRIPT)
    template = (
        f"{shlex.quote(sys.executable)} {shlex.quote(str(script))} {tmp_path / 'ckpt.pt'} {{batch_size}}"
    )
    done = subprocess.run(
        [*autotune_argv("sweep"), "--workdir", str(tmp_path / "runs"), "--cmd", template, "--vram-gb", "1",
         "--max-trials", "2"],
        cwd=tmp_path, env=cli_env(drop=("AUTOTUNE_",), keep_pythonpath=False), capture_output=True,
        text=True, timeout=240,
    )  # fmt: skip
    error = [ln for ln in done.stderr.splitlines() if ln.startswith("error: ")]
    assert done.returncode != 0 and len(error) == 1, done.stdout + done.stderr
    assert "crash: crashed with exit code 1: _pickle.UnpicklingError: Weights only load failed." in error[0]
    assert "Check the documentation of torch.load" not in error[0]
    log = Path(error[0].rsplit("Log: ", 1)[1])
    assert log.name == "stderr.log" and "UnpicklingError" in log.read_text()
    assert (log.parent / "stdout.log").read_text() == ""
