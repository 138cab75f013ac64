"""The trial runner against fake trainers that really run (tests/fakes/fake_trainer.py)."""

from __future__ import annotations

import json
import math
import os
import re
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from autotune.core.metrics import TrialMetrics
from autotune.core.outcome import Outcome, OutcomeReason, explain, parse_oom
from autotune.errors import LaunchError
from autotune.execution.launch import LaunchSpec
from autotune.execution.proctree import is_alive
from autotune.execution.runner import TAIL_BYTES, RunLimits, RunResult, run_trial
from tests.helpers import FAKES

FAKE = FAKES / "fake_trainer.py"
QUICK = RunLimits(wall_timeout_s=20, stall_timeout_s=10, grace_s=1.0, oom_grace_s=1.0)


def spec(*args: str, env: dict[str, str] | None = None, tmp: Path | None = None) -> LaunchSpec:
    return LaunchSpec(argv=(sys.executable, str(FAKE), *args), cwd=tmp or FAKES, env=env or {})


def run(tmp_path: Path, *args: str, limits: RunLimits = QUICK, **kw: object) -> RunResult:
    metrics_file = tmp_path / "trial" / "metrics-out.json"
    env = {"AUTOTUNE_METRICS_FILE": str(metrics_file), "PYTHONUNBUFFERED": "1"}
    return run_trial(spec(*args, env=env), tmp_path / "trial", limits, **kw)  # type: ignore[arg-type]


def read_metrics(result: RunResult) -> TrialMetrics | None:
    """What a metrics reader would make of AUTOTUNE_METRICS_FILE (never raises)."""
    path = result.stdout_path.parent / "metrics-out.json"
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
        loss = data.get("loss")
        return TrialMetrics(
            step_time_s=data.get("step_time_s"),
            samples_per_s=data.get("samples_per_s"),
            losses=[] if loss is None else [float(loss)],
        )
    except (ValueError, AttributeError):
        return TrialMetrics()


def outcome_of(result: RunResult) -> Outcome:
    return explain_of(result, host_over_gb=None).outcome


def explain_of(result: RunResult, host_over_gb: float | None) -> OutcomeReason:
    return explain(
        result.returncode,
        result.signal,
        timed_out=result.timed_out,
        stalled=result.stalled,
        interrupted=result.interrupted,
        output=result.output_tail,
        metrics=read_metrics(result),
        host_over_gb=host_over_gb if result.end_reason == "host ram" else None,
    )


def announced_pids(result: RunResult) -> dict[str, int]:
    text = result.stdout_path.read_text()
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^PID (\w+)=(\d+)$", text, re.M)}


def assert_all_gone(pids: dict[str, int]) -> None:
    for name, pid in pids.items():
        try:
            proc = psutil.Process(pid)
        except psutil.NoSuchProcess:
            continue
        assert not is_alive(proc), f"{name} (pid {pid}) outlived the trial"


FAKES_AND_OUTCOMES = [
    (("succeed",), Outcome.OK),
    (("oom", "--oom-text", "torch"), Outcome.OOM),
    (("oom", "--oom-text", "rank0"), Outcome.OOM),
    (("oom", "--oom-text", "hip"), Outcome.OOM),
    (("oom", "--oom-text", "xpu"), Outcome.OOM),
    (("oom", "--oom-text", "cuda-error"), Outcome.OOM),
    (("oom", "--oom-text", "cublas"), Outcome.OOM),
    (("oom", "--oom-text", "cudnn"), Outcome.OOM),
    (("oom", "--oom-text", "cpu-alloc"), Outcome.HOST_OOM),
    (("sigkill-self",), Outcome.HOST_OOM),
    (("nan",), Outcome.NAN),
    (("config-error",), Outcome.CONFIG_ERROR),
    (("argparse-error",), Outcome.CONFIG_ERROR),
    (("garbage-metrics",), Outcome.CRASH),
    (("crash",), Outcome.CRASH),
    (("grandchild",), Outcome.OK),
]


@pytest.mark.parametrize(
    ("args", "expected"), FAKES_AND_OUTCOMES, ids=[" ".join(a) for a, _ in FAKES_AND_OUTCOMES]
)
def test_every_fake_ends_with_the_right_outcome(
    tmp_path: Path, args: tuple[str, ...], expected: Outcome
) -> None:
    result = run(tmp_path, *args)
    assert outcome_of(result) is expected, result.output_tail[-2000:]
    assert result.end_reason is None  # each of these ends by itself
    assert_all_gone(announced_pids(result))


def test_wall_timeout_ends_a_hang_and_says_so(tmp_path: Path) -> None:
    limits = RunLimits(wall_timeout_s=1.0, stall_timeout_s=None, grace_s=1.0)
    result = run(tmp_path, "hang", limits=limits)
    assert result.timed_out and result.end_reason == "wall timeout"
    assert result.signal is not None
    assert outcome_of(result) is Outcome.TIMEOUT
    assert result.wall_s < 1.0 + 1.0 + 1.0


def test_a_trial_past_the_host_ram_line_is_ended_as_a_host_oom(tmp_path: Path) -> None:
    limits = RunLimits(wall_timeout_s=30, stall_timeout_s=None, grace_s=1.0, host_ram_limit_gb=0.2)
    result = run(tmp_path, "host-hog", "--mb", "400", limits=limits)
    assert result.end_reason == "host ram"
    assert result.peak_host_rss_gb > 0.2
    assert result.wall_s < 30  # ended for its RSS, not by the wall clock
    why = explain_of(result, host_over_gb=0.2)
    assert why.outcome is Outcome.HOST_OOM and "host line" in why.reason


def test_stall_timeout_ends_a_silent_trial(tmp_path: Path) -> None:
    limits = RunLimits(wall_timeout_s=30, stall_timeout_s=1.0, grace_s=1.0)
    result = run(tmp_path, "hang", limits=limits)
    assert result.stalled and not result.timed_out
    assert outcome_of(result) is Outcome.STALLED
    assert result.wall_s < 1.0 + 1.0 + 1.0


def test_steady_output_does_not_count_as_a_stall(tmp_path: Path) -> None:
    limits = RunLimits(wall_timeout_s=30, stall_timeout_s=0.6, grace_s=1.0)
    result = run(tmp_path, "tick", "--seconds", "1.5", "--every", "0.1", limits=limits)
    assert not result.stalled
    assert outcome_of(result) is Outcome.OK


@pytest.mark.process
def test_sigterm_ignorer_and_setsid_grandchild_end_within_timeout_grace_and_1s(tmp_path: Path) -> None:
    """The bound from the issue: timeout + grace + 1 s, and no descendant left alive."""
    limits = RunLimits(wall_timeout_s=1.0, stall_timeout_s=None, grace_s=1.0)
    started = time.monotonic()
    result = run(tmp_path, "grandchild", "--then", "hang", "--ignore-term", limits=limits)
    elapsed = time.monotonic() - started
    pids = announced_pids(result)
    assert set(pids) == {"trainer", "worker", "grandchild"}
    assert_all_gone(pids)
    assert result.end_reason == "wall timeout"
    assert result.processes_seen >= 3
    assert elapsed < 1.0 + 1.0 + 1.0, f"took {elapsed:.2f} s"
    assert result.survivors == ()


@pytest.mark.process
def test_hang_ignoring_sigterm_is_killed(tmp_path: Path) -> None:
    limits = RunLimits(wall_timeout_s=1.0, stall_timeout_s=None, grace_s=1.0)
    started = time.monotonic()
    result = run(tmp_path, "hang-ignore-term", limits=limits)
    elapsed = time.monotonic() - started
    assert result.signal == 9  # SIGTERM was ignored; SIGKILL ended it
    assert outcome_of(result) is Outcome.TIMEOUT
    assert_all_gone(announced_pids(result))
    assert elapsed < 3.0, f"took {elapsed:.2f} s"


def test_grandchild_left_behind_by_a_successful_trainer_is_ended(tmp_path: Path) -> None:
    result = run(tmp_path, "grandchild", "--then", "exit")
    assert result.returncode == 0
    pids = announced_pids(result)
    assert "grandchild" in pids
    assert_all_gone(pids)


@pytest.mark.process
def test_oom_then_hang_ends_within_10s_of_the_oom_line(tmp_path: Path) -> None:
    """Default limits; the trainer hangs after the OOM and even ignores SIGTERM."""
    seen: list[float] = []

    def watch(line: str) -> None:
        if "out of memory" in line and not seen:
            seen.append(time.monotonic())

    limits = RunLimits(wall_timeout_s=120, stall_timeout_s=60)
    result = run(tmp_path, "oom", "--then", "hang", "--ignore-term", limits=limits, on_output=watch)
    ended = time.monotonic()
    assert seen, "the OOM line never reached on_output"
    assert result.oom_seen and result.end_reason == "oom"
    assert outcome_of(result) is Outcome.OOM
    assert ended - seen[0] < 10.0, f"ended {ended - seen[0]:.2f} s after the OOM line"
    assert_all_gone(announced_pids(result))


def test_stop_event_interrupts_and_ends_the_trial(tmp_path: Path) -> None:
    stop = threading.Event()

    def on_line(line: str) -> None:
        if line == "ready":
            stop.set()  # as the sweep's Ctrl-C handler would

    limits = RunLimits(wall_timeout_s=30, stall_timeout_s=None, grace_s=1.0)
    result = run(tmp_path, "hang", limits=limits, stop=stop, on_output=on_line)
    assert result.interrupted and result.end_reason == "stop"
    assert outcome_of(result) is Outcome.INTERRUPTED
    assert result.wall_s < 2.5


def test_an_error_in_the_caller_still_ends_every_process(tmp_path: Path) -> None:
    """A Ctrl-C (KeyboardInterrupt) or a bug in a callback must not leave the trial running."""

    def explode(line: str) -> None:
        if line == "ready":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, "grandchild", "--then", "hang", "--ignore-term", on_output=explode)
    text = (tmp_path / "trial" / "stdout.log").read_text()
    pids = {m.group(1): int(m.group(2)) for m in re.finditer(r"^PID (\w+)=(\d+)$", text, re.M)}
    assert set(pids) == {"trainer", "worker", "grandchild"}
    assert_all_gone(pids)


def test_100mb_of_output_streams_to_disk_with_bounded_memory(tmp_path: Path) -> None:
    me = psutil.Process()
    before = me.memory_info().rss
    peak = [before]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.02):
            peak[0] = max(peak[0], me.memory_info().rss)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        result = run(
            tmp_path, "flood", "--mb", "100", limits=RunLimits(wall_timeout_s=50, stall_timeout_s=20)
        )
    finally:
        done.set()
        sampler.join()
    growth_mb = (peak[0] - before) / 1e6
    print(f"flood: {result.wall_s:.2f} s, parent RSS growth {growth_mb:.1f} MB")
    assert outcome_of(result) is Outcome.OK
    assert result.stdout_path.stat().st_size >= 100 * 1_000_000
    assert "Samples/second" in result.output_tail
    assert len(result.output_tail.encode()) < TAIL_BYTES + 4096
    assert growth_mb < 40, f"parent RSS grew {growth_mb:.1f} MB for 100 MB of output"


def test_oom_line_is_kept_when_later_output_scrolls_it_out_of_the_tail(tmp_path: Path) -> None:
    result = run(tmp_path, "oom", "--after-mb", "2")
    assert result.oom_seen
    assert "CUDA out of memory" in result.output_tail
    assert outcome_of(result) is Outcome.OOM
    details = parse_oom(result.output_tail)
    assert details is not None and details.tried_gb == pytest.approx(2.0)


def test_trial_folder_holds_command_env_logs_and_timeline(tmp_path: Path) -> None:
    env = {"HF_TOKEN": "hf_secret_value", "COLUMNS": "250"}
    launch = LaunchSpec(argv=(sys.executable, str(FAKE), "succeed"), cwd=tmp_path, env=env)
    result = run_trial(launch, tmp_path / "t1", QUICK)
    folder = tmp_path / "t1"
    command = (folder / "command.sh").read_text()
    assert launch.shell_command() in command
    assert "hf_secret_value" not in command
    assert json.loads((folder / "env.json").read_text()) == {"HF_TOKEN": "<redacted>", "COLUMNS": "250"}
    process = json.loads((folder / "process.json").read_text())
    assert process["pid"] == result.pid and process["mark"]
    assert "Step 40/40 - Loss: 0.1234" in result.stdout_path.read_text()
    assert result.stderr_path == folder / "stderr.log" and result.stderr_path.exists()
    rows = (folder / "memory.csv").read_text().splitlines()
    assert rows[0] == "t_s,vram_gb,host_rss_gb"
    assert len(rows) >= 2
    t, vram, rss = rows[1].split(",")
    assert float(t) >= 0 and vram == "" and float(rss) > 0
    assert result.timeline_path == folder / "memory.csv"
    assert result.measured_peak_vram_gb is None  # no NVML given: host memory only
    assert 0 < result.peak_host_rss_gb < 4
    assert "hf_secret_value" not in "".join(p.read_text() for p in folder.iterdir() if p.suffix != ".log")


def test_trial_sees_its_added_env_and_cwd(tmp_path: Path) -> None:
    code = "import os; print(os.environ['AUTOTUNE_PROBE'], os.getcwd())"
    launch = LaunchSpec(argv=(sys.executable, "-c", code), cwd=tmp_path, env={"AUTOTUNE_PROBE": "yes"})
    result = run_trial(launch, tmp_path / "t", QUICK)
    assert result.returncode == 0
    assert result.output_tail.strip() == f"yes {os.path.realpath(tmp_path)}"


def test_a_missing_program_is_a_clear_launch_error(tmp_path: Path) -> None:
    launch = LaunchSpec(argv=("/nonexistent/trainer",), cwd=tmp_path)
    with pytest.raises(LaunchError, match="could not start the trial command '/nonexistent/trainer'"):
        run_trial(launch, tmp_path / "t", QUICK)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"wall_timeout_s": 0, "stall_timeout_s": None},
        {"wall_timeout_s": None, "stall_timeout_s": -1},
        {"wall_timeout_s": 1, "stall_timeout_s": 1, "grace_s": -1},
        {"wall_timeout_s": 1, "stall_timeout_s": 1, "oom_grace_s": math.nan},
    ],
)
def test_run_limits_refuse_nonsense(kwargs: dict[str, float | None]) -> None:
    with pytest.raises(ValueError, match="RunLimits"):
        RunLimits(**kwargs)  # type: ignore[arg-type]


def test_a_clean_run_that_prints_the_oom_words_is_not_ended_nor_an_oom(tmp_path: Path) -> None:
    """A file name holding "CUDA out of memory", printed by a run that goes on and exits 0: the runner
    does not end it after the OOM grace, and it is no OOM (no failed exit, traceback or exception line)."""
    script = tmp_path / "clean.py"
    script.write_text(
        "import json, os, sys, time\n"
        "print('saved /data/samples/CUDA out of memory.png', flush=True)\n"
        "time.sleep(2.5)\n"
        "json.dump({'step_time_s': 0.5}, open(os.environ['AUTOTUNE_METRICS_FILE'], 'w'))\n"
    )
    metrics_file = tmp_path / "trial" / "metrics-out.json"
    env = {"AUTOTUNE_METRICS_FILE": str(metrics_file), "PYTHONUNBUFFERED": "1"}
    launch = LaunchSpec(argv=(sys.executable, str(script)), cwd=tmp_path, env=env)
    result = run_trial(launch, tmp_path / "trial", QUICK)  # an OOM grace of 1 s
    assert result.returncode == 0 and result.end_reason is None and not result.oom_seen
    assert outcome_of(result) is Outcome.OK
