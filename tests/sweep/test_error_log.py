"""The log a failed trial's ``log_path`` (and the baseline's "Log: ...") names: the one holding
the line its reason quotes. pytorch/examples' scripts print their traceback on stderr and may
print nothing on stdout, so "Log: .../stdout.log" pointed at an empty file."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.core.outcome import explain
from autotune.sweep.measure import error_log

TRACEBACK = (
    "Traceback (most recent call last):\n  File 'main.py', line 9\n"
    "\x1b[1mRuntimeError: boom at step 3\x1b[0m\n"
)


@pytest.mark.parametrize(
    ("stdout", "stderr", "log"),
    [
        ("", TRACEBACK, "stderr.log"),  # the case swept: nothing on stdout
        ("epoch 1 loss 2.3\n", TRACEBACK, "stderr.log"),  # the reason quotes stderr's line
        ("epoch 1 loss 2.3\n" + TRACEBACK, "a warning\n", "stdout.log"),  # stdout holds it
        ("", "", "stdout.log"),  # nothing anywhere: the default
        ("ready\n", "", "stdout.log"),
        ("step 1\n", "".join(f"[rank0]: {line}\n" for line in TRACEBACK.splitlines()), "stderr.log"),
    ],
    ids=["stdout empty", "stderr holds it", "stdout holds it", "both empty", "stderr empty", "rank prefix"],
)
def test_a_failed_trial_names_the_log_holding_its_error(
    tmp_path: Path, stdout: str, stderr: str, log: str
) -> None:
    out, err = tmp_path / "stdout.log", tmp_path / "stderr.log"
    out.write_text(stdout)
    err.write_text(stderr)
    reason = explain(
        1, None, timed_out=False, stalled=False, interrupted=False, output=stdout + stderr, metrics=None
    ).reason
    assert error_log(out, err, reason).name == log


def test_a_reason_quoting_no_line_names_stderr_only_when_it_holds_all_there_is(tmp_path: Path) -> None:
    out, err = tmp_path / "stdout.log", tmp_path / "stderr.log"
    err.write_text("Segmentation fault\n")
    out.write_text("")
    reason = "killed by SIGKILL with no traceback: most likely the kernel's OOM killer (host RAM)"
    assert error_log(out, err, reason) == err
    out.write_text("step 1\n")
    assert error_log(out, err, reason) == out
    assert error_log(tmp_path / "gone.log", tmp_path / "gone-too.log", reason).name == "gone.log"
