"""Timing you can trust and fit never claimed unmeasured.

- A trial run beside a busy process (a real spinner) or beside another process on its GPU
  (the fake NVML seam) is flagged, in its record, its progress line and the report.
- The trial's own CPU is never counted as others' load.
- A sweep that reads no peak says so when it starts and after the first trial without one,
  and its winner is "fastest; fit not measured" in every format, never "fits".
- A step time is shown with its spread; one figure's spread is said to be unknown, not invented.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from autotune.core.metrics import TrialMetrics
from autotune.core.outcome import Outcome
from autotune.core.verdict import measured_attrs
from autotune.execution.busy import HostLoad, busy_threshold_cores, cpu_verdict, gpu_verdict
from autotune.execution.launch import LaunchSpec
from autotune.execution.monitor import ResourceMonitor
from autotune.execution.runner import RunLimits, run_trial
from autotune.gpu.nvml import GIB
from autotune.report import status
from autotune.report.cells import outcome_cell, trial_cells
from autotune.report.jsondoc import report_dict
from autotune.report.model import TrialRow
from autotune.sweep.api import run_sweep
from autotune.sweep.fitcheck import check_fit
from autotune.sweep.measure import summary
from autotune.sweep.options import SweepOptions
from autotune.sweep.setup import Card, plan_sweep
from autotune.trainers import get_adapter
from autotune.trainers.kit.common import merge_metrics
from autotune.trainers.kit.readers.hftrainer import read_hf_trainer
from tests.fake_nvml import FakeNvml
from tests.helpers import FAKES, cli_env
from tests.trainers.kit.test_readers_printed import HF, SANA

TRAINER = FAKES / "iterlog_trainer.py"
TEMPLATE = (
    f"{shlex.quote(sys.executable)} {shlex.quote(str(TRAINER))} "
    "{batch_size} {steps} {quantization} {optimizer} {gradient_checkpointing}"
)
SPIN = "import time\nend = time.time() + 120\nwhile time.time() < end: pass\n"


@pytest.fixture
def spinner() -> Iterator[subprocess.Popen[bytes]]:
    """A real process that keeps one core busy: someone else's job on the same host."""
    proc = subprocess.Popen([sys.executable, "-c", SPIN])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _steps_spec(tmp: Path, steps: int = 25, batch: int = 1) -> LaunchSpec:
    return LaunchSpec(argv=(sys.executable, str(TRAINER), str(batch), str(steps)), cwd=tmp)


# --- the threshold ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("others", "cores", "busy"),
    [(0.3, 2, False), (0.6, 2, True), (1.5, 16, False), (1.7, 16, True), (0.49, 1, False)],
)
def test_the_cpu_threshold_is_half_a_core_or_a_tenth_of_the_host(
    others: float, cores: int, busy: bool
) -> None:
    assert busy_threshold_cores(cores) == max(0.5, 0.1 * cores)
    said = cpu_verdict(others, cores)
    assert (said is not None) == busy
    if said is not None:
        assert f"{others:.1f} of {cores} CPU cores" in said


def test_gpu_neighbours_are_named_largest_first() -> None:
    assert gpu_verdict({}) is None
    said = gpu_verdict({11: ("python", 2 * GIB), 12: ("", 0), 13: ("train", 5 * GIB), 14: ("x", GIB)})
    assert said == (
        "other processes on its GPU: pid 13 (train) 5.00 GiB, pid 11 (python) 2.00 GiB, "
        "pid 14 (x) 1.00 GiB and 1 more"
    )


# --- CPU: a real busy process beside a real trial -----------------------------------------------------


def test_a_spinning_process_beside_a_trial_flags_it(tmp_path: Path, spinner: subprocess.Popen[bytes]) -> None:
    limits = RunLimits(wall_timeout_s=60, stall_timeout_s=None)
    result = run_trial(_steps_spec(tmp_path), tmp_path / "t", limits, monitor=ResourceMonitor(interval_s=0.1))
    assert result.returncode == 0 and result.wall_s > 1.0
    assert result.busy is not None and "CPU cores on average while it ran" in result.busy, result.busy


def _busy_s() -> float:
    t = psutil.cpu_times()
    return sum(float(getattr(t, f, 0.0)) for f in ("user", "nice", "system", "irq", "softirq", "steal"))


def test_the_trials_own_cpu_is_not_counted_as_others() -> None:
    """A trial that spins a core itself: its CPU time is its own, taken out of the host's busy time."""
    spin_until_told = (
        "import sys, threading, time\n"
        "told = threading.Event()\n"
        "threading.Thread(target=lambda: (sys.stdin.readline(), told.set()), daemon=True).start()\n"
        "while not told.is_set(): pass\n"
        "print(time.process_time(), flush=True)\n"
    )
    t0, busy0 = time.monotonic(), _busy_s()
    load = HostLoad()
    load.start()
    proc = psutil.Popen(
        [sys.executable, "-c", spin_until_told], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    tick = threading.Event()
    while time.monotonic() - t0 < 1.6:
        load.sample([proc])
        tick.wait(0.1)  # a monitor's tick, as ResourceMonitor's interval
    load.sample([proc])
    span, host = time.monotonic() - t0, _busy_s() - busy0
    out, _ = proc.communicate(b"stop\n", timeout=30)
    own_s = float(out.decode().strip())
    assert own_s - 0.1 <= load.own_cpu_s() <= own_s  # its CPU, as last seen
    assert load.own_cpu_s() > 0.2, load.own_cpu_s()  # enough to tell subtracted from not
    others, own = load.others_cores(), load.own_cpu_s() / span
    assert others is not None
    assert others <= host / span - own + 0.1, (others, host / span, own)


# --- GPU: other processes on the card, through the fake NVML seam ------------------------------------


class SharedCard(FakeNvml):
    """One card: ``before`` pids on it from the start, the trial's own processes once they run, and
    ``later`` pids that appear after the trial started (NVML's view, per call)."""

    def __init__(self, before: dict[int, int], later: dict[int, int]) -> None:
        super().__init__([("NVIDIA Fake 16GB", 16.0)])
        self.before, self.later, self.calls = before, later, 0

    def process_memory_bytes(self, index: int) -> dict[int, int]:
        self.calls += 1
        usage = dict(self.before)
        if self.calls > 1:  # the first call is the monitor's pre-trial snapshot
            usage.update(self.later)
            for child in psutil.Process().children(recursive=True):
                if str(TRAINER) in " ".join(child.cmdline()):
                    usage[child.pid] = GIB  # the trial itself: never another's
        return usage


def test_a_process_already_on_the_gpu_flags_the_trial(tmp_path: Path) -> None:
    nvml = SharedCard(before={4_000_000: 3 * GIB}, later={})
    monitor = ResourceMonitor(nvml, [0], interval_s=0.05)
    result = run_trial(_steps_spec(tmp_path, steps=8), tmp_path / "t", RunLimits(60, None), monitor=monitor)
    assert result.busy is not None
    assert "other processes on its GPU: pid 4000000 3.00 GiB" in result.busy
    assert f"pid {result.pid}" not in result.busy  # the trial's own process is not a neighbour


def test_a_live_neighbour_that_starts_mid_trial_is_named_but_a_foreign_namespace_pid_is_not(
    tmp_path: Path,
) -> None:
    """A live process of this machine that is not the trial's is another's job; a pid that exists
    nowhere here (a container's view of host pids) is most likely the trial itself."""
    neighbour = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        nvml = SharedCard(before={}, later={neighbour.pid: 2 * GIB, 4_000_001: GIB})
        monitor = ResourceMonitor(nvml, [0], interval_s=0.05)
        result = run_trial(
            _steps_spec(tmp_path, steps=8), tmp_path / "t", RunLimits(60, None), monitor=monitor
        )
    finally:
        neighbour.kill()
        neighbour.wait()
    assert result.busy is not None and f"pid {neighbour.pid} (python" in result.busy
    assert "4000001" not in result.busy
    assert result.measured_peak_vram_gb == pytest.approx(1.0)  # its own GiB, as before


# --- the fit check at the start ------------------------------------------------------------------------


def _plan(tmp: Path, *, hook: bool = True) -> Any:
    opts = SweepOptions(trainer="command", cmd=TEMPLATE, workdir=tmp / "runs", vram_gb=16, steps=4, hook=hook)
    return plan_sweep(opts, False)


def test_a_card_autotune_cannot_read_peaks_of_is_said_at_the_start_with_the_reason_and_fix(
    tmp_path: Path,
) -> None:
    plan = _plan(tmp_path)
    plan = dataclasses.replace(
        plan,
        opts=dataclasses.replace(plan.opts, vram_gb=None),
        card=Card("planned 16 GB card", 16.0, 1, "below-32GB"),
        nvml_error="no NVIDIA driver found (the NVML library is missing)",
    )
    check = check_fit(plan)
    assert not check.sampled
    banner = check.banner(14.4, 0.1)
    assert "fits at" not in banner and banner.startswith("FIT NOT MEASURED")
    warning = check.warning()
    assert warning is not None
    assert "NVML not available: no NVIDIA driver found (the NVML library is missing)" in warning
    assert "'fastest; fit not measured'" in warning
    assert "on CPU peaks come from the hook's emulated card: pass --vram-gb N" in warning


@pytest.mark.parametrize("hook", [True, False])
def test_a_planned_card_is_measured_only_where_the_trainer_emulates_it(tmp_path: Path, hook: bool) -> None:
    """``--vram-gb`` on CPU: the adapter's emulated card (its own, or the hook's) counts memory; one
    that emulates none (``--no-hook``) gets the fix that says so."""
    plan = dataclasses.replace(
        _plan(tmp_path, hook=hook), card=Card("planned 16 GB card", 16.0, 1, "below-32GB")
    )
    check = check_fit(plan)
    assert check.sampled == plan.adapter.emulates_card() == hook
    if not check.sampled:
        assert "--vram-gb 16 plans for that card, but nothing emulates it here" in (check.warning() or "")
        assert "leave the trial-side hook on so it emulates the card" in (check.warning() or "")


@pytest.mark.parametrize(
    ("card", "source"),
    [
        (Card("NVIDIA Fake 16GB", 16.0, 1, None, (0,)), "NVML"),
        (Card("emulated 16.00 GB card (CPU)", 16.0, 1, None), "emulated card"),
    ],
)
def test_a_card_with_a_peak_source_says_fits_at_and_where_peaks_come_from(
    tmp_path: Path, card: Card, source: str
) -> None:
    check = check_fit(dataclasses.replace(_plan(tmp_path), card=card))
    assert check.sampled and check.warning() is None
    assert check.banner(14.4, 0.1).startswith("fits at <= 14.40 GB (10% headroom), peaks from ")
    assert source in check.banner(14.4, 0.1)


# --- a whole sweep: no peak read, beside a busy process -----------------------------------------------


@pytest.fixture(scope="module")
def busy_unmeasured_sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path, Any]:
    """Two trials of a trainer that prints no memory, with a core-spinning process beside them."""
    tmp = tmp_path_factory.mktemp("sweep")
    proc = subprocess.Popen([sys.executable, "-c", SPIN])
    try:
        out = io.StringIO()
        opts = SweepOptions(
            trainer="command", cmd=TEMPLATE, workdir=tmp / "runs", vram_gb=16, steps=25,
            max_batch_size=2, max_trials=2, hook=False,  # nothing emulates the card: no peak source
        )  # fmt: skip
        result = run_sweep(opts, nvml=False, stream=out, tty=False, claims=False)
    finally:
        proc.kill()
        proc.wait()
    return out.getvalue(), tmp / "runs" / result.study, result


def test_a_sweep_without_peaks_says_so_after_its_first_trial_and_never_calls_a_fit(
    busy_unmeasured_sweep: tuple[str, Path, Any],
) -> None:
    text, folder, result = busy_unmeasured_sweep
    finished = [ln for ln in text.splitlines() if ln.startswith("trial ") and " ok: " in ln]
    assert len(finished) == 2, text
    assert all("fit not measured" in ln and ", fits" not in ln for ln in finished), finished
    assert text.count("finished ok but no peak memory was read") == 1  # once, right after trial 0
    assert "best so far: " in text and "(trial 0; fit not measured)" in text
    lines = text.splitlines()
    warn_at = next(i for i, ln in enumerate(lines) if "no peak memory was read" in ln)
    assert lines[warn_at - 1].startswith("trial 0 ok: ")
    assert result.best_fit_measured is False

    md = (folder / "report.md").read_text()
    winner = next(ln for ln in md.splitlines() if ln.startswith("- **Winner:**"))
    assert "fastest; fit not measured" in winner and "fits" not in winner
    assert "GiB left" not in winner
    assert "Fit not measured: the winner is the fastest; fit not measured" in md
    assert "ok, fit not measured" in md
    doc = json.loads((folder / "report.json").read_text())
    assert doc["winner"] == "fastest; fit not measured"
    assert doc["best"]["trial"] == result.best_trial and "fits" not in doc["best"]
    html = (folder / "report.html").read_text()
    assert "fastest; fit not measured" in html
    brief = status.render(status.collect(storage=result.storage, workdir=None, study=result.study))
    best = next(ln for ln in brief.splitlines() if ln.startswith("  best: "))
    assert best.endswith("(fastest; fit not measured); host busy: " + doc["best"]["busy_host"]), best


def test_a_sweep_beside_a_busy_process_flags_its_trials_with_their_spread(
    busy_unmeasured_sweep: tuple[str, Path, Any],
) -> None:
    text, folder, _ = busy_unmeasured_sweep
    finished = [ln for ln in text.splitlines() if ln.startswith("trial ") and " ok: " in ln]
    assert all("HOST BUSY, its speed is suspect: other processes used" in ln for ln in finished), finished
    # every trial: a step time and its spread (in ms under 10 ms)
    assert all(re.search(r" m?s ± ", ln) for ln in finished), finished
    doc = json.loads((folder / "report.json").read_text())
    for t in doc["trials"]:
        assert "CPU cores on average" in t["busy_host"]
        assert t["step_time_spread_s"] >= 0 and "spread_unknown" not in t  # measured (0 when steady)
    md = (folder / "report.md").read_text()
    rows = [ln for ln in md.splitlines() if ln.startswith("| 0") or ln.startswith("| 1")]
    assert len(rows) == 2
    assert all(
        "host busy" in r and "HOST BUSY while it ran" in r and re.search(r" m?s ± ", r) for r in rows
    ), rows
    assert ' class="busy"' in (folder / "report.html").read_text()


# --- the spread: shown, or said to be unknown ------------------------------------------------------------


def _row(**measures: Any) -> TrialRow:
    return TrialRow(number=3, state="complete", params={}, changed={}, outcome="ok", measures=measures)


def test_one_figure_is_shown_with_its_spread_unknown_in_every_format() -> None:
    from autotune.report.model import Report

    row = _row(step_time_s=1.23, samples_per_s=3.2, spread_unknown=True)
    spread = _row(step_time_s=1.23, step_time_spread_s=0.04, samples_per_s=3.2, fits=True, peak_vram_gb=2.0)
    report = Report(
        study="s", trainer="t", card={"vram_gb": 16.0}, headroom=0.1, steps=4, config_path=None,
        knobs=[], baseline_params={}, fidelity={}, trials=[row, spread], ruled_out=[], baseline=None,
        best=None, speedup=None, warnings=[], finished=2, running=0,
    )  # fmt: skip
    assert trial_cells(report, row)[3] == "1.23 s (spread unknown)"
    assert trial_cells(report, spread)[3] == "1.23 s ± 0.040"
    assert outcome_cell(report, row) == "ok, fit not measured"
    assert outcome_cell(report, spread) == "ok"
    trials = report_dict(report)["trials"]
    assert trials[0]["step_time_spread_s"] is None and trials[0]["spread_unknown"] is True
    assert trials[1]["step_time_spread_s"] == 0.04


def test_a_merged_reading_never_pairs_one_readers_time_with_anothers_spread() -> None:
    hook = TrialMetrics(step_time_s=0.5, source="hook")  # one step: no spread
    printed = TrialMetrics(step_time_s=0.7, step_time_spread_s=0.05, step_times_s=[0.7, 0.7], source="iter")
    merged = merge_metrics(hook, printed)
    assert (merged.step_time_s, merged.step_time_spread_s, merged.step_times_s) == (0.5, None, [])
    merged = merge_metrics(TrialMetrics(trainer_peak_vram_gb=3.0, source="file"), printed)
    assert (merged.step_time_s, merged.step_time_spread_s, merged.trainer_peak_vram_gb) == (0.7, 0.05, 3.0)


# --- real trainer outputs: the spread where several step times exist, "unknown" where one ---------------


def test_the_sana_adapter_keeps_the_spread_of_the_training_bar() -> None:
    """The real diffusers Sana run's ``Steps:`` bar: 30 per-update rates, so a spread (it was dropped)."""
    log = SANA / "bs1_ok" / "stderr.log"
    if not log.is_file():
        pytest.skip(f"real trainer outputs not found at {log}")
    with tempfile.TemporaryDirectory() as empty:  # no hook file: the bar is the only source
        metrics = get_adapter("sana").read_metrics(Path(empty), log.read_text())
    assert metrics.step_time_s is not None and len(metrics.step_times_s) >= 10
    assert metrics.step_time_spread_s is not None and metrics.step_time_spread_s > 0


def test_a_single_figure_from_a_real_hf_run_is_recorded_with_its_spread_unknown() -> None:
    """HF Trainer without a bar prints one ``train_steps_per_second``: no spread is invented."""
    run = HF / "no-tqdm_logging4"
    if not HF.is_dir():
        pytest.skip(f"real trainer outputs not found at {HF}")
    text = run.with_suffix(".stdout").read_text() + "\n" + run.with_suffix(".stderr").read_text()
    metrics = read_hf_trainer(text)
    assert metrics is not None and metrics.step_time_spread_s is None
    attrs = measured_attrs(Outcome.OK, "finished", metrics, 4, 16.0, 0.1)
    assert attrs["spread_unknown"] is True and "step_time_spread_s" not in attrs
    assert "spread unknown" in summary(attrs)


def test_the_sweep_command_names_an_unmeasured_winner_fastest_not_best_fit(tmp_path: Path) -> None:
    """``autotune sweep`` as a user runs it, with no GPU visible: its last lines never call a fit."""
    env = cli_env(keep_pythonpath=False, CUDA_VISIBLE_DEVICES="")
    argv = [sys.executable, "-m", "autotune", "sweep", "--trainer", "command", "--cmd", TEMPLATE]
    argv += ["--vram-gb", "16", "--steps", "6", "--max-trials", "1", "--workdir", str(tmp_path / "runs")]
    argv += ["--no-hook"]  # the hook would emulate the card; without it nothing measures a peak
    done = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "best (fastest; fit not measured): trial 0:" in done.stdout, done.stdout
    first = done.stderr.splitlines()[0]
    assert "FIT NOT MEASURED by autotune" in first and "fits at" not in first, first
    assert "warning: autotune cannot measure peak memory here" in done.stderr
