"""A trial folder (or the study folder above it) planted as a symbolic link is refused, exit 2:
nothing of the trial is written through it, outside the workdir."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from autotune.cli import main
from autotune.execution.launch import LaunchSpec
from autotune.execution.runner import RunLimits, run_trial

CMD = f"{sys.executable} -c pass"


@pytest.mark.parametrize("planted", ["study/trial-0000", "study"])
def test_a_symlinked_trial_or_study_folder_is_refused(
    planted: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    work, outside = tmp_path / "work", tmp_path / "outside"
    outside.mkdir()
    link = work / planted
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(outside, target_is_directory=True)
    argv = [
        "sweep",
        "--cmd",
        CMD,
        "--workdir",
        str(work),
        "--study",
        "study",
        "--max-trials",
        "1",
        "--vram-gb",
        "24",
    ]
    rc = main(argv)
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert rc == 2, err
    assert last.startswith("error: the trial folder ") and "symbolic link" in last and "--workdir" in last, (
        err
    )
    assert list(outside.iterdir()) == []  # nothing written through the link


def test_the_runner_itself_refuses_a_symlinked_trial_folder(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "trial").symlink_to(outside)
    spec = LaunchSpec(argv=(sys.executable, "-c", "pass"), cwd=tmp_path)
    with pytest.raises(Exception, match="symbolic link") as err:
        run_trial(spec, tmp_path / "trial", RunLimits(wall_timeout_s=10, stall_timeout_s=None))
    assert getattr(err.value, "exit_code", None) == 2
    assert list(outside.iterdir()) == []
