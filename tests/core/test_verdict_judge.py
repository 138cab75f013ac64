"""``verdict.judge``: a trial judged once, from the runner's end and the metrics read, to its
outcome, attrs and study value (COMPLETE with a value, FAIL with none). A table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from autotune.core.metrics import TrialMetrics
from autotune.core.outcome import Outcome
from autotune.core.verdict import RunEnd, judge
from autotune.trainers.kit.readers.ltx2log import parse_ltx2_output
from autotune.trainers.kit.readers.phases import read_phase_peaks

OOM_TEXT = (
    "Traceback (most recent call last):\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
    "capacity of 79.19 GiB of which 1.12 GiB is free.\n"
)
HOOKED = TrialMetrics(
    step_time_s=0.1,
    step_time_spread_s=0.002,
    samples_per_s=40.0,
    trainer_step_time_s=0.13,
    trainer_samples_per_s=30.8,
    measured_peak_vram_gb=30.0,
    measured_peak_covers_all=True,
    timed_by="hook",
)


def _m(**kw: Any) -> TrialMetrics:
    return TrialMetrics(**{**HOOKED.__dict__, "step_times_s": [], "losses": [], **kw})


CLEAN = RunEnd(returncode=0, wall_s=20.0, steps=50)
TABLE: list[tuple[str, RunEnd, TrialMetrics, dict[str, Any], float | None]] = [
    (
        "ok: the hook's figure is the value, the trainer's kept beside",
        CLEAN,
        _m(),
        {"outcome": "ok", "samples_per_s": 40.0, "trainer_samples_per_s": 30.8, "timed_by": "hook", "fits": True},
        40.0,
    ),
    (
        "an OOM row has no speed, and fails",
        RunEnd(returncode=1, output=OOM_TEXT, wall_s=5.0, steps=50),
        _m(),
        {"outcome": "oom", "oom_tried_gb": 2.0, "samples_per_s": None, "step_time_s": None},
        None,
    ),
    (
        "the words in a clean run's output are no OOM",
        RunEnd(returncode=0, output="saved CUDA out of memory.png\n", wall_s=20.0, steps=50),
        _m(),
        {"outcome": "ok"},
        40.0,
    ),
    (
        "1e12 samples/s claimed (no hook): 50 steps in a 20 s run cannot take 2e-10 s",
        CLEAN,
        TrialMetrics(samples_per_s=1e12, timed_by="trainer"),
        {"outcome": "crash", "samples_per_s": 1e12},
        None,
    ),
    (
        "a metrics file's claim far past its own step time",
        RunEnd(returncode=0, wall_s=None, steps=None),
        TrialMetrics(samples_per_s=1e6, step_time_s=0.1, trainer_samples_per_s=1e6, timed_by="trainer"),
        {"outcome": "crash"},
        None,
    ),
    (
        "a claim far past the trainer's own steps/s",
        RunEnd(returncode=0, wall_s=None, steps=None),
        TrialMetrics(samples_per_s=5000.0, steps_per_s=2.0, timed_by="trainer"),
        {"outcome": "crash"},
        None,
    ),
    (
        "a hook reading 1000x the trainer's own (a forged or broken file)",
        CLEAN,
        _m(samples_per_s=40000.0, step_time_s=1e-4, trainer_samples_per_s=30.8),
        {"outcome": "crash"},
        None,
    ),
    (
        "finished but nothing to rank it by",
        CLEAN,
        TrialMetrics(),
        {"outcome": "crash", "samples_per_s": None},
        None,
    ),
    (
        "a NaN loss fails: no study value, whatever its speed",
        CLEAN,
        _m(losses=[0.5, float("nan")]),
        {"outcome": "nan", "samples_per_s": 40.0},
        None,
    ),
    (
        "a timeout fails, its figures kept",
        RunEnd(returncode=-9, signal=9, timed_out=True, wall_s=600.0, steps=50),
        _m(),
        {"outcome": "timeout", "samples_per_s": 40.0},
        None,
    ),
    (
        "a trainer's 34 GB is judged over a counter that saw ~0",
        CLEAN,
        _m(trainer_peak_vram_gb=34.0, trainer_peak_device_wide=True, measured_peak_vram_gb=0.01,
           measured_peak_covers_all=False),
        {"outcome": "ok", "peak_vram_gb": 34.0, "peak_disagrees": True},
        40.0,
    ),
    (
        "NVML per process covers every phase: ours is judged, both shown",
        RunEnd(returncode=0, wall_s=20.0, steps=50, nvml_peak_gb=30.0, nvml_per_process=True),
        _m(trainer_peak_vram_gb=40.0, trainer_peak_device_wide=True, measured_peak_covers_all=None),
        {"outcome": "ok", "peak_vram_gb": 30.0, "trainer_peak_vram_gb": 40.0, "peak_disagrees": True},
        40.0,
    ),
    (
        "too big still completes (the verdict's fit keeps it from winning)",
        CLEAN,
        _m(measured_peak_vram_gb=79.0),
        {"outcome": "ok", "fits": False},
        40.0,
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("end", "metrics", "expected", "value"), [t[1:] for t in TABLE], ids=[t[0] for t in TABLE]
)
def test_judge(end: RunEnd, metrics: TrialMetrics, expected: dict[str, Any], value: float | None) -> None:
    verdict = judge(end, metrics, 4, card_gb=80.0, headroom=0.1)
    for key, want in expected.items():
        assert verdict.attrs.get(key) == (pytest.approx(want) if isinstance(want, float) else want), key
    assert verdict.value == (pytest.approx(value) if value is not None else None)
    assert verdict.outcome.value == verdict.attrs["outcome"]


def test_an_implausible_claim_says_why() -> None:
    verdict = judge(CLEAN, TrialMetrics(samples_per_s=1e12, timed_by="trainer"), 4, 80.0, 0.1)
    assert verdict.outcome is Outcome.CRASH and "implausible speed" in verdict.reason


def test_the_trainers_cpu_peak_of_zero_is_unknown() -> None:
    """The LTX-2 trainer on CPU prints nvidia-smi's nothing as 0.00 GB: no figure, not a fit."""
    block = "📊 Training Statistics:\n - Total time: 1.0 minutes\n - Peak GPU memory: 0.00 GB\n"
    assert parse_ltx2_output(block).to_metrics(4).trainer_peak_vram_gb is None
    assert parse_ltx2_output(block.replace("0.00", "31.25")).to_metrics(4).trainer_peak_vram_gb == 31.25


def _events(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_run_that_died_before_its_first_step_reached_no_phase(tmp_path: Path) -> None:
    """An OOM loading the model, in the first step or in a validation pass before training: the
    exit event's peak is no save."""
    exit_oom = {"event": "exit", "steps": 0, "max_memory_reserved_gb": 70.0, "exception": "OutOfMemoryError"}
    peaks = read_phase_peaks(_events(tmp_path / "h.jsonl", [exit_oom]), validation_step=None)
    assert "no phase was reached" in peaks.describe() and "save" not in peaks.describe()
    assert "OutOfMemoryError" in peaks.describe()
    steps = [{"event": "step", "step": n, "max_memory_reserved_gb": 40.0} for n in (1, 2)]
    peaks = read_phase_peaks(_events(tmp_path / "h2.jsonl", [*steps, exit_oom]), validation_step=None)
    assert peaks.describe().startswith("peak set where it failed (OutOfMemoryError, 70.00 GiB")
    clean = {"event": "exit", "steps": 2, "max_memory_reserved_gb": 45.0, "exception": None}
    peaks = read_phase_peaks(_events(tmp_path / "h3.jsonl", [*steps, clean]), validation_step=None)
    assert peaks.describe().startswith("peak set by save")


def _cumulative_bar(desc: str, postfix: str, times: list[float]) -> str:
    """A bar drawn with ``smoothing=0`` (musubi-tuner's, trainer_base.py:1920) or Lightning's ``n``
    set without ``update()``: each rate the mean since the start, in tqdm's two decimals."""
    lines, elapsed = [], 0.0
    for n, t in enumerate(times, start=1):
        elapsed += t
        lines.append(f"{desc}: {100 * n // len(times):3d}%|##| {n}/{len(times)} [00:{int(elapsed) % 60:02d}<00:05, "
                     f"{elapsed / n:.2f}s/it, {postfix}]")  # fmt: skip
    return "\r".join(lines) + "\n"


READERS = ["hook", "ltx2-log", "metrics-file", "musubi-bar", "lightning", "deepspeed"]


@pytest.mark.parametrize("reader", READERS)
def test_alternating_steps_are_timed_by_their_mean_with_the_spread_beside(
    tmp_path: Path, reader: str
) -> None:
    """3 s / 6 s steps: the median reads 3 s or 6 s (or their midpoint, by luck of the count); the
    time they take is 4.5 s a step. Every per-step reader takes the mean, the spread kept apart;
    DeepSpeed's samples/s is the samples over the steps' time, not the mean of its rates."""
    from autotune.trainers.kit.readers.dslog import read_deepspeed_steps
    from autotune.trainers.kit.readers.hookfile import read_hook_file
    from autotune.trainers.kit.readers.metricsfile import read_metrics_file
    from autotune.trainers.kit.readers.tqdmbar import read_lightning, read_tqdm_cumulative

    times = [9.0] * 20 + [3.0, 6.0] * 20 + [3.0]  # warm-up, then 41 alternating steps
    rough = 1e-6  # but a bar's: its rates have two decimals, which its differenced times carry
    if reader == "hook":
        rows = [{"event": "step", "step": n + 1, "step_time_s": t} for n, t in enumerate(times)]
        metrics = read_hook_file(_events(tmp_path / "hook.jsonl", rows))
    elif reader == "metrics-file":
        (tmp_path / "m.json").write_text(json.dumps({"step_times_s": times}))
        metrics = read_metrics_file(tmp_path / "m.json")
    elif reader in ("musubi-bar", "lightning"):
        musubi = reader == "musubi-bar"
        bar = _cumulative_bar(
            *(("steps", "avr_loss=0.5") if musubi else ("Epoch 0", "v_num=0, train_loss=0.5")), times
        )
        read = read_tqdm_cumulative(bar) if musubi else read_lightning(bar)
        assert read is not None
        metrics, rough = read, 0.02
    elif reader == "deepspeed":  # DeepSpeed's pipe engine line (engine.py:396-406), batch 4 a step
        text = "\n".join(f"steps: {n + 1} loss: 0.1000 iter time (s): {t:.3f} samples/sec: {4 / t:.3f}"
                          for n, t in enumerate(times))  # fmt: skip
        read = read_deepspeed_steps(text)
        assert read is not None and read.samples_per_s is not None
        metrics = read
    else:  # Step lines every 20 steps, each a sample
        lines = [(20 * (i + 1), t) for i, t in enumerate([9.0, *[3.0, 6.0] * 5, 3.0])]
        text = "\n".join(
            f"Step {s}/300 - Loss: 0.1, LR: 1.00e-04, Time/Step: {t:.2f}s, Total Time: 0h 1m"
            for s, t in lines
        )
        metrics = parse_ltx2_output(text).to_metrics(4)
    steady = [3.0, 6.0] * 20 + [3.0] if reader != "ltx2-log" else [3.0, 6.0] * 5 + [3.0]
    assert metrics.step_time_s == pytest.approx(sum(steady) / len(steady), rel=rough)
    assert metrics.step_time_spread_s is not None and metrics.step_time_spread_s > 1.0
    if reader == "deepspeed":
        assert metrics.samples_per_s == pytest.approx(4 * len(steady) / sum(steady), rel=1e-3)
