"""Nothing a trial starts outlives it or hides its memory: the cgroup and the subreaper nets.

The fake's daemon does what a hostile or sloppy trainer's daemon does (fork, ``setsid``, fork,
the middle one exits, ``execve`` with an empty environment, stdio on /dev/null, SIGTERM
ignored): it leaves the group, the tree and the environment mark at once. Each test runs with
the trial's own cgroup (where this host allows one) and with the subreaper alone
(``AUTOTUNE_CGROUP=off``, what an unprivileged container gets).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from autotune.execution import cgroup as cg
from autotune.execution.proctree import is_alive, kill_tree, read_process_file
from autotune.execution.runner import RunLimits
from tests.execution.test_runner import announced_pids, explain_of, run

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux process nets")

LIMITS = RunLimits(wall_timeout_s=30, stall_timeout_s=None, grace_s=1.0)


@pytest.fixture(params=["cgroup", "subreaper"])
def net(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "subreaper":
        monkeypatch.setenv(cg.ENV_SWITCH, "off")
    elif not cg.available():
        pytest.skip("no writable cgroup v2 here (read-only /sys/fs/cgroup or not Linux)")
    return str(request.param)


@contextlib.contextmanager
def killed_afterwards(pids: list[int]) -> Iterator[None]:
    """Whatever the test finds, leave no daemon behind on the test machine."""
    try:
        yield
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def alive(pid: int) -> bool:
    try:
        return is_alive(psutil.Process(pid))
    except psutil.NoSuchProcess:
        return False


def test_a_double_forked_daemon_with_no_environment_dies_with_its_trial(tmp_path: Path, net: str) -> None:
    result = run(tmp_path, "daemon", limits=LIMITS)
    pids = announced_pids(result)
    with killed_afterwards(list(pids.values())):
        assert result.returncode == 0, result.output_tail
        assert "daemon" in pids
        assert not alive(pids["daemon"]), f"the daemon outlived its trial ({net})"
        assert result.processes_seen >= 2
    record = read_process_file(tmp_path / "trial")
    assert record is not None
    assert cg.TrialCgroup.find(record.mark) is None  # the trial's cgroup (if it had one) is removed


def test_an_escaped_grandchilds_memory_counts_against_the_host_line(tmp_path: Path, net: str) -> None:
    """A daemon outside the tree holds 300 MB; the host line is 0.2 GB: the trial is ended for it."""
    limits = RunLimits(wall_timeout_s=30, stall_timeout_s=None, grace_s=1.0, host_ram_limit_gb=0.2)
    result = run(tmp_path, "escaped-hog", "--mb", "300", limits=limits)
    pids = announced_pids(result)
    with killed_afterwards(list(pids.values())):
        assert result.end_reason == "host ram", (result.end_reason, result.peak_host_rss_gb)
        # counted (the tree alone holds a few MB), though the trial may end before all 300 MB are in
        assert result.peak_host_rss_gb > 0.2
        assert result.wall_s < 30
        assert explain_of(result, host_over_gb=0.2).outcome.value == "host_oom"
        assert not alive(pids["daemon"])


def test_resume_ends_what_a_dead_sweep_left_in_the_trials_cgroup(tmp_path: Path) -> None:
    """No pid, no mark in its environment, not our child: found by the cgroup named by the mark."""
    if not cg.available():
        pytest.skip("no writable cgroup v2 here")
    mark = uuid.uuid4().hex
    group = cg.TrialCgroup.create(mark)
    assert group is not None
    code = "import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True: time.sleep(3600)"
    proc = subprocess.Popen(
        [sys.executable, "-c", code], env={}, start_new_session=True, preexec_fn=group.enter_hook()
    )
    group.close_hook()
    with killed_afterwards([proc.pid]):
        assert group.pids() == [proc.pid]
        ended = kill_tree(None, mark=mark, grace_s=0.2)
        assert ended == [proc.pid]
        proc.wait(timeout=5)  # (kill_tree may have reaped it: psutil waits on its own children)
        assert not alive(proc.pid)
        assert not group.path.exists()
