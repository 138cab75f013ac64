"""A trial folder that fills up or turns read-only: the trial ends, nothing is left running,
and the error says what, where and what to do (real filesystems where this machine allows;
see ``tests/faultfs.py`` for the fallbacks)."""

from __future__ import annotations

import errno
import os
import sys
import time
from pathlib import Path

import psutil
import pytest

from autotune.errors import TrialOutputError
from autotune.execution.launch import LaunchSpec
from autotune.execution.runner import RunLimits, run_trial
from tests.faultfs import read_only, small_tmpfs

LIMITS = RunLimits(wall_timeout_s=60, stall_timeout_s=60, grace_s=1)
# Prints 4 MB in 1 kB lines, then sleeps: only a failed write can end it early.
CHATTY = "import sys, time\nfor i in range(4000): print('x' * 1000, flush=True)\ntime.sleep(60)\n"


def _spec(tmp: Path) -> LaunchSpec:
    return LaunchSpec(argv=(sys.executable, "-c", CHATTY), cwd=tmp)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_full_disk_while_logs_are_written_ends_the_trial_with_a_clear_error(tmp_path: Path) -> None:
    folder = tmp_path / "small"
    with small_tmpfs(folder, 1024) as mounted:
        trial_dir = folder / "trial-0000"
        if not mounted:  # emulate: the log is /dev/full, where every write fails with ENOSPC
            trial_dir.mkdir(parents=True)
            (trial_dir / "stdout.log").symlink_to("/dev/full")
        t0 = time.monotonic()
        with pytest.raises(TrialOutputError) as info:
            run_trial(_spec(tmp_path), trial_dir, LIMITS)
        assert time.monotonic() - t0 < 30  # ended at once, not at the trainer's own pace
        err = info.value
        assert err.errno == errno.ENOSPC
        text = str(err)
        assert "No space left on device" in text and "stdout.log" in text
        assert "Make room" in text and "run the same command again" in text
        pid = int((trial_dir / "process.json").read_text().split('"pid": ')[1].split(",")[0])
        assert _gone(pid)


def test_read_only_trial_folder_is_a_clear_error(tmp_path: Path) -> None:
    folder = tmp_path / "study"
    folder.mkdir()
    with read_only(folder) as how:
        if how == "none":
            pytest.skip("cannot make a folder read-only here: root without mount rights")
        with pytest.raises(TrialOutputError) as info:
            run_trial(_spec(tmp_path), folder / "trial-0000", LIMITS)
    assert info.value.errno in (errno.EROFS, errno.EACCES)
    assert "trial-0000" in str(info.value) and "writable" in str(info.value)
    assert not (folder / "trial-0000").exists()


@pytest.mark.process
def test_the_memory_timeline_gives_way_on_a_full_disk(tmp_path: Path) -> None:
    """memory.csv is written from a thread: a full disk there stops the timeline, not the trial."""
    from autotune.execution.monitor import ResourceMonitor
    from autotune.execution.proctree import ProcessTree

    monitor = ResourceMonitor(interval_s=0.01)
    csv = tmp_path / "memory.csv"
    csv.symlink_to("/dev/full")
    monitor.start(ProcessTree(os.getpid()), csv)
    deadline = time.monotonic() + 30
    while monitor._samples < 400 and time.monotonic() < deadline:  # > one 8 kB buffer of rows
        time.sleep(0.01)
    summary = monitor.stop()
    assert summary.samples >= 400 and summary.peak_host_rss_gb > 0


def test_stop_ends_a_setsid_grandchild_without_waiting_out_the_grace(tmp_path: Path) -> None:
    """A grandchild in its own session is found once its parent dies: it gets SIGTERM then, not
    SIGKILL at the end of the grace period (Ctrl-C used to take the whole grace, 10 s)."""
    import json
    import threading

    from tests.helpers import FAKES

    trial_dir = tmp_path / "trial-0000"
    spec = LaunchSpec(argv=(sys.executable, str(FAKES / "family_trainer.py"), str(trial_dir)), cwd=tmp_path)
    stop = threading.Event()
    family_file = trial_dir / "family.json"
    stopped_at: list[float] = []

    def press_ctrl_c() -> None:
        deadline = time.monotonic() + 60
        while not family_file.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        stopped_at.append(time.monotonic())
        stop.set()

    threading.Thread(target=press_ctrl_c, daemon=True).start()
    result = run_trial(
        spec, trial_dir, RunLimits(wall_timeout_s=120, stall_timeout_s=120, grace_s=30), stop=stop
    )
    assert result.interrupted
    assert time.monotonic() - stopped_at[0] < 10  # not the 30 s grace
    family = json.loads(family_file.read_text())
    assert all(_gone(pid) for pid in family.values()), family
