"""GPU drain, the memory monitor and ending orphaned trials, with NVML faked at its seam."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path

import psutil
import pytest

from autotune.execution.launch import LaunchSpec
from autotune.execution.monitor import ResourceMonitor
from autotune.execution.proctree import MARK_VAR, is_alive, kill_tree, read_process_file
from autotune.execution.runner import RunLimits, run_trial
from autotune.gpu.drain import GpuBusyError, describe_holders, used_bytes, wait_for_drain
from autotune.gpu.nvml import GIB, DeviceInfo
from tests.helpers import FAKES

FAKE = FAKES / "fake_trainer.py"


class ScriptedNvml:
    """Used memory per device follows a script, one value per query (the last one repeats)."""

    def __init__(
        self, used: dict[int, Sequence[float]], processes: dict[int, dict[int, float]] | None = None
    ):
        self.script = {i: [int(g * GIB) for g in seq] for i, seq in used.items()}
        self.processes = {
            i: {pid: int(g * GIB) for pid, g in p.items()} for i, p in (processes or {}).items()
        }
        self.queries = 0

    def driver_version(self) -> str:
        return "550.54.15"

    def devices(self) -> list[DeviceInfo]:
        return [DeviceInfo(i, f"GPU-{i}", "NVIDIA H100 80GB HBM3", int(79.6 * GIB)) for i in self.script]

    def memory_used_bytes(self, index: int) -> int:
        self.queries += 1
        seq = self.script[index]
        return seq.pop(0) if len(seq) > 1 else seq[0]

    def process_memory_bytes(self, index: int) -> dict[int, int]:
        return dict(self.processes.get(index, {}))


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s


def test_drain_returns_once_memory_is_back_near_baseline() -> None:
    nvml = ScriptedNvml({0: [30.0, 12.0, 2.0, 0.6]})
    clock = FakeClock()
    waited = wait_for_drain(nvml, [0], {0: int(0.5 * GIB)}, 60, poll_s=0.25, clock=clock, sleep=clock.sleep)
    assert waited == pytest.approx(0.75)  # three polls over, the fourth within 512 MiB
    assert clock.sleeps == [0.25, 0.25, 0.25]


def test_drain_is_immediate_when_nothing_is_held() -> None:
    clock = FakeClock()
    nvml = ScriptedNvml({0: [0.5], 1: [0.4]})
    assert wait_for_drain(nvml, [0, 1], used_bytes(nvml, [0, 1]), 10, clock=clock, sleep=clock.sleep) == 0
    assert clock.sleeps == []


def test_drain_judges_each_device_on_its_own_baseline() -> None:
    nvml = ScriptedNvml({0: [0.5], 1: [20.0, 20.0, 1.0]})
    clock = FakeClock()
    baseline = {0: int(0.5 * GIB), 1: int(1.0 * GIB)}
    assert wait_for_drain(nvml, [0, 1], baseline, 10, poll_s=1, clock=clock, sleep=clock.sleep) == 2


def test_drain_accepts_one_total_as_baseline() -> None:
    nvml = ScriptedNvml({0: [5.0, 0.5], 1: [0.5]})
    clock = FakeClock()
    assert wait_for_drain(nvml, [0, 1], int(1.0 * GIB), 10, poll_s=1, clock=clock, sleep=clock.sleep) == 1


def test_gpu_that_never_drains_names_the_processes_holding_it() -> None:
    me = os.getpid()
    nvml = ScriptedNvml({0: [40.0]}, processes={0: {me: 39.5, 4_000_000: 0.5}})
    clock = FakeClock()
    with pytest.raises(GpuBusyError) as err:
        wait_for_drain(nvml, [0], {0: int(0.5 * GIB)}, 30, poll_s=5, clock=clock, sleep=clock.sleep)
    message = str(err.value)
    assert "did not drain within 30 s" in message
    assert "GPU 0 uses 40.00 GiB, 0.50 GiB before the trial" in message
    assert f"pid {me} {psutil.Process(me).name()} (39.50 GiB on GPU 0)" in message
    assert "pid 4000000 ? (0.50 GiB on GPU 0): not visible from here" in message
    assert "run the same sweep command again to resume" in message
    assert clock.now == 30  # bounded: it gave up at the timeout, not later
    assert GpuBusyError.exit_code == 1


def test_describe_holders_survives_a_driver_that_refuses() -> None:
    class Refusing(ScriptedNvml):
        def process_memory_bytes(self, index: int) -> dict[int, int]:
            raise RuntimeError("NVML_ERROR_NO_PERMISSION")

    assert describe_holders(Refusing({0: [1.0]}), [0]) == []


class TreeNvml(ScriptedNvml):
    """Reports ``per_process_gb`` for every descendant of the test process, plus a foreign process."""

    def __init__(self, per_process_gb: float, used: Sequence[float] = (1.0,), see_tree: bool = True):
        super().__init__({0: list(used)})
        self.per_process = int(per_process_gb * GIB)
        self.see_tree = see_tree

    def process_memory_bytes(self, index: int) -> dict[int, int]:
        usage = {4_000_000: 50 * GIB}  # someone else's job on the same card: never counted
        if self.see_tree:
            for child in psutil.Process().children(recursive=True):
                usage[child.pid] = self.per_process
        return usage


def hang_spec(tmp_path: Path, *args: str) -> LaunchSpec:
    return LaunchSpec(argv=(sys.executable, str(FAKE), *args), cwd=tmp_path)


def test_monitor_sums_nvml_per_process_memory_over_the_whole_tree(tmp_path: Path) -> None:
    monitor = ResourceMonitor(TreeNvml(3.0), [0], interval_s=0.05)
    limits = RunLimits(wall_timeout_s=1.0, stall_timeout_s=None, grace_s=0.5)
    result = run_trial(
        hang_spec(tmp_path, "grandchild", "--then", "hang"), tmp_path / "t", limits, monitor=monitor
    )
    assert result.measured_peak_vram_gb == pytest.approx(9.0)  # trainer + worker + setsid grandchild
    assert result.vram_source == "process"
    rows = [r.split(",") for r in (tmp_path / "t" / "memory.csv").read_text().splitlines()[1:]]
    assert len(rows) >= 10  # several samples a second
    assert max(float(r[1]) for r in rows) == pytest.approx(9.0)
    assert result.peak_host_rss_gb > 0


def test_monitor_falls_back_to_the_device_rise_when_no_pid_matches(tmp_path: Path) -> None:
    """In a container NVML reports host pids; then the rise over the pre-trial level stands in."""
    nvml = TreeNvml(3.0, used=[1.0, 1.0, 5.0], see_tree=False)
    monitor = ResourceMonitor(nvml, [0], interval_s=0.05)
    limits = RunLimits(wall_timeout_s=0.5, stall_timeout_s=None, grace_s=0.5)
    result = run_trial(hang_spec(tmp_path, "hang"), tmp_path / "t", limits, monitor=monitor)
    assert result.measured_peak_vram_gb == pytest.approx(4.0)
    assert result.vram_source == "device"


def start_orphan(tmp_path: Path, mark: str | None) -> tuple[subprocess.Popen[str], dict[str, int]]:
    """A trial as a dead orchestrator would leave it: own session, worker, setsid grandchild."""
    env = {**os.environ, **({MARK_VAR: mark} if mark else {})}
    proc = subprocess.Popen(
        [sys.executable, str(FAKE), "grandchild", "--then", "hang", "--ignore-term"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    assert proc.stdout is not None
    pids = {}
    for line in proc.stdout:
        if line.startswith("PID "):
            name, pid = line[4:].strip().split("=")
            pids[name] = int(pid)
        if line.strip() == "ready":
            break
    return proc, pids


@pytest.mark.parametrize("with_mark", [True, False])
def test_kill_tree_ends_an_orphaned_trial_and_all_it_started(tmp_path: Path, with_mark: bool) -> None:
    mark = uuid.uuid4().hex if with_mark else None
    proc, pids = start_orphan(tmp_path, mark)
    try:
        ended = kill_tree(pids["trainer"], mark=mark, grace_s=0.3)
        assert sorted(pids.values()) == ended
        for name, pid in pids.items():
            assert not _alive(pid), f"{name} survived"
    finally:
        proc.kill()
        proc.wait()


def test_kill_tree_with_a_mark_leaves_a_reused_pid_alone(tmp_path: Path) -> None:
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert kill_tree(other.pid, mark=uuid.uuid4().hex, grace_s=0.1) == []
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def _alive(pid: int) -> bool:
    try:
        return is_alive(psutil.Process(pid))
    except psutil.NoSuchProcess:
        return False


def test_a_trials_process_json_is_enough_to_end_its_orphans(tmp_path: Path) -> None:
    """What recovery does with a dead sweep's trial folder: read ``process.json``, end the family."""
    mark = uuid.uuid4().hex
    proc, pids = start_orphan(tmp_path, mark)
    try:
        started = psutil.Process(pids["trainer"]).create_time()
        (tmp_path / "process.json").write_text(
            json.dumps({"pid": pids["trainer"], "mark": mark, "started_at": started})
        )
        record = read_process_file(tmp_path)
        assert record is not None
        ended = kill_tree(record.pid, mark=record.mark, grace_s=0.3, started_at=record.started_at)
        assert ended == sorted(pids.values())
        assert not any(_alive(pid) for pid in pids.values())
        assert read_process_file(tmp_path / "nowhere") is None
    finally:
        proc.kill()
        proc.wait()
