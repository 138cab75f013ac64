"""The LTX-2 output parser, on real lines (LTX2-TRAINER.md; Rich 13.9 output captured from
``RichHandler(show_time=False)`` at 80 and 250 columns)."""

from __future__ import annotations

import math
import re
from dataclasses import replace
from pathlib import Path

import pytest

from autotune.core.metrics import TrialMetrics
from autotune.core.timing import WARMUP_STEPS
from autotune.trainers.kit.readers.ltx2log import (
    MIN_STEPS_FOR_STEP_LINES,
    STEP_LINE_EVERY,
    Ltx2Log,
    Statistics,
    StepLine,
    logical_lines,
    parse_ltx2_output,
)
from tests.helpers import need_shared

DOC_STEP = "Step 20/50 - Loss: 0.1234, LR: 1.00e-04, Time/Step: 1.23s, Total Time: 0h 1m"
DOC_STATS = """📊 Training Statistics:
 - Total time: 12.3 minutes
 - Training speed: 0.43 steps/second
 - Samples/second: 0.43
 - Peak GPU memory: 45.68 GB
"""
# Real Rich output when COLUMNS was not honoured (80 columns, padded with spaces).
RICH_80 = (
    "INFO     Training for 50 steps with batch size 1 and 1            trainer.py:402\n"
    "         accumulation step(s)                                                   \n"
    "INFO     Step 20/50 - Loss: 0.1234, LR: 1.00e-04, Time/Step:      trainer.py:612\n"
    "         2.50s, Total Time: 0h 0m                                               \n"
    "INFO     Step 40/50 - Loss: 0.1234, LR: 1.00e-04, Time/Step:      trainer.py:612\n"
    "         1.00s, Total Time: 0h 1m                                               \n"
    "INFO     📊 Training Statistics:                                  trainer.py:733\n"
    "          - Total time: 1.2 minutes                                             \n"
    "          - Training speed: 0.71 steps/second                                   \n"
    "          - Samples/second: 0.71                                                \n"
    "          - Peak GPU memory: 45.68 GB                                           \n"
)
RICH_250_STEP = "INFO     " + DOC_STEP + " " * 153 + "trainer.py:612"
STEP_20 = StepLine(step=20, total=50, loss=0.1234, lr=1e-4, time_s=1.23, total_time_s=60.0)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(DOC_STEP, [STEP_20], id="bare"),
        pytest.param("INFO     " + DOC_STEP, [STEP_20], id="level-prefix"),
        pytest.param(RICH_250_STEP, [STEP_20], id="level-and-path-250-cols"),
        pytest.param("[rank 0] " + RICH_250_STEP, [STEP_20], id="rank-prefix"),
        pytest.param("INFO     [rank 0] " + DOC_STEP + "   trainer.py:612", [STEP_20], id="rank-in-message"),
        pytest.param("\x1b[34mINFO    \x1b[0m " + DOC_STEP, [STEP_20], id="ansi-colours"),
        pytest.param(
            "INFO     Step 40/50 - Loss: nan, LR: 1.00e-04, Time/Step: 0.98s, Total Time: 0h 2m",
            [StepLine(40, 50, math.nan, 1e-4, 0.98, 120.0)],
            id="nan-loss",
        ),
        pytest.param(
            "Step 20/50 - Loss: 0.1234, LR: 1.00e-04, Time/Step: 1.23s,",
            [STEP_20.__class__(20, 50, 0.1234, 1e-4, 1.23)],
            id="cut-after-time",
        ),
        pytest.param("Step 20/50 - Loss: 0.1234, LR: 1.00e-04, Time/St", [], id="cut-before-time"),
        pytest.param("Training step 20 done in 1.2s", [], id="not-a-step-line"),
        pytest.param("", [], id="empty"),
    ],
)
def test_step_lines(text: str, expected: list[StepLine]) -> None:
    got = parse_ltx2_output(text).steps
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert (g.step, g.total, g.lr, g.time_s, g.total_time_s) == (
            e.step,
            e.total,
            e.lr,
            e.time_s,
            e.total_time_s,
        )
        assert g.loss == e.loss or (math.isnan(g.loss) and math.isnan(e.loss))


def test_rich_wrapped_at_80_columns() -> None:
    log = parse_ltx2_output(RICH_80)
    assert [(s.step, s.time_s, s.total_time_s) for s in log.steps] == [(20, 2.5, 0.0), (40, 1.0, 60.0)]
    assert log.stats == Statistics(total_time_s=72.0, steps_per_s=0.71, samples_per_s=0.71, peak_gb=45.68)


def test_rich_wrapped_with_rank_prefix_on_every_line() -> None:
    text = "".join(f"[rank 0] {line}\n" for line in RICH_80.splitlines())
    log = parse_ltx2_output(text)
    assert [s.time_s for s in log.steps] == [2.5, 1.0]
    assert log.rank == 0 and log.stats is not None and log.stats.peak_gb == 45.68


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(DOC_STATS, Statistics(738.0, 0.43, 0.43, 45.68), id="doc-block"),
        pytest.param(
            DOC_STATS + " - Number of processes: 4\n - Global batch size: 8\n",
            Statistics(738.0, 0.43, 0.43, 45.68, 4, 8),
            id="multi-process",
        ),
        pytest.param(
            "".join("[rank 0] " + line + "\n" for line in DOC_STATS.splitlines()),
            Statistics(738.0, 0.43, 0.43, 45.68),
            id="rank-prefixed",
        ),
        pytest.param(
            "📊 Training Statistics:\n - Total time: 12.3 minutes\n - Training spe",
            Statistics(total_time_s=738.0),
            id="truncated",
        ),
        pytest.param(
            "📊 Training Statistics:\n - Total time: 45.0 seconds\n",
            Statistics(total_time_s=45.0),
            id="seconds",
        ),
    ],
)
def test_statistics_block(text: str, expected: Statistics) -> None:
    assert parse_ltx2_output(text).stats == expected


def test_no_statistics_block_without_its_header() -> None:
    assert parse_ltx2_output(" - Peak GPU memory: 45.68 GB\n").stats is None


def test_steady_step_time_leaves_out_the_first_window() -> None:
    text = "\n".join(
        f"INFO     Step {s}/100 - Loss: 0.1, LR: 1.00e-04, Time/Step: {t}s, Total Time: 0h 1m"
        for s, t in [(20, "9.00"), (40, "1.00"), (60, "1.20"), (80, "1.10"), (100, "1.00")]
    )
    log = parse_ltx2_output(text)
    step_time, spread = log.steady_step_time()
    assert step_time == pytest.approx(4.3 / 4)  # the mean of the lines past step 20
    assert spread is not None and 0 < spread < 0.2
    metrics = log.to_metrics(effective_batch=4)
    assert metrics.samples_per_s == pytest.approx(4 / (4.3 / 4))
    assert metrics.step_times_s == [9.0, 1.0, 1.2, 1.1, 1.0]


def test_a_single_step_line_is_used_rather_than_nothing() -> None:
    assert parse_ltx2_output(DOC_STEP).steady_step_time() == (1.23, None)


def test_picks_the_rank_that_logged() -> None:
    text = "[rank 1] some warning\n[rank 0] INFO     " + DOC_STEP + "\n[rank 1] another\n"
    log = parse_ltx2_output(text)
    assert log.rank == 0 and len(log.steps) == 1


def test_continuation_line_without_prefix_joins_its_record() -> None:
    streams = logical_lines(
        "INFO     [rank 0] Step 20/50 - Loss: 0.1, LR: 1e-4,   trainer.py:612\n         Time/Step: 1.00s\n"
    )
    assert streams[0] == ["Step 20/50 - Loss: 0.1, LR: 1e-4, Time/Step: 1.00s"]


def test_without_statistics_metrics_use_trainer_figures_where_present() -> None:
    metrics = parse_ltx2_output(DOC_STATS).to_metrics(effective_batch=None)
    assert metrics.step_time_s is None
    assert metrics.samples_per_s == 0.43 and metrics.steps_per_s == 0.43
    assert metrics.trainer_peak_vram_gb == 45.68
    assert metrics.trainer_peak_device_wide  # nvidia-smi memory.used of the card: information only
    from autotune.trainers.kit.common import merge_metrics

    hook = TrialMetrics(step_time_s=1.0, measured_peak_vram_gb=40.0, source="hook")
    merged = merge_metrics(hook, metrics)
    assert merged.trainer_peak_device_wide and merged.trainer_peak_vram_gb == 45.68
    assert merge_metrics(hook).trainer_peak_device_wide is None


FULL_80 = parse_ltx2_output(RICH_80)


@pytest.mark.parametrize("cut", [*range(0, len(RICH_80), 7), len(RICH_80)])
def test_truncated_anywhere_keeps_what_was_printed_before_the_cut(cut: int) -> None:
    """A log cut anywhere gives exactly the Step lines whose record ended before the cut (a
    record cut inside its ``Total Time`` may only lose that field), and nothing made up."""
    text = RICH_80[:cut]
    log = parse_ltx2_output(text)
    whole = {s.step: s for s in FULL_80.steps}
    assert [s.step for s in FULL_80.steps] == [20, 40]
    for s in log.steps:
        assert s in (whole[s.step], replace(whole[s.step], total_time_s=None))
    ends = {20: RICH_80.index("0h 0m") + len("0h 0m"), 40: RICH_80.index("0h 1m") + len("0h 1m")}
    assert all(f"Step {s.step}/50" in text for s in log.steps)
    assert [s for s in log.steps if cut >= ends[s.step]] == [whole[n] for n in (20, 40) if cut >= ends[n]]
    if "Training Statistics" not in text:
        assert log.stats is None
    if cut == len(RICH_80):
        assert log == FULL_80 and log.stats == Statistics(
            total_time_s=72.0, steps_per_s=0.71, samples_per_s=0.71, peak_gb=45.68
        )
    metrics = log.to_metrics(effective_batch=2)
    assert metrics.step_times_s == [s.time_s for s in log.steps]
    assert metrics.losses == [s.loss for s in log.steps]


@pytest.mark.parametrize(
    "garbage",
    [
        "\x00\xff\ufffd" * 100,
        "Step " * 1000,
        "Step 99999999999999999999/1 - Loss: 1e999999, LR: x",
        "\r\r\n\n",
        None,
        42,
    ],
)
def test_garbage_reads_as_an_empty_log(garbage: object) -> None:
    log = parse_ltx2_output(garbage)  # type: ignore[arg-type]
    assert log == Ltx2Log()
    assert not log.to_metrics(effective_batch=2).measured


# --- the real trainer's logs (../shared/fixtures/ltx2/logs: its own logger and f-strings) -------


def _fixture_log(ltx2_fixtures: Path, name: str) -> str:
    return need_shared(ltx2_fixtures / "logs" / name).read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("name", "steps"),
    [
        pytest.param("steps60_ga1_batch1.log", [20, 40, 60], id="ga1"),
        pytest.param("steps60_ga2_batch1_wrapped80.log", [20, 40, 60], id="ga2-wrapped80"),
        pytest.param("steps60_ga4_batch2.log", [20, 40, 60], id="ga4"),
        pytest.param("steps60_ga1_batch2_2gpus_rank-prefix.log", [20, 40, 60], id="2gpus-rank-prefix"),
        pytest.param("steps15_ga2_batch1.log", [], id="ga2-only-step0"),
        pytest.param("steps15_ga1_batch2.log", [], id="under-20-steps"),
    ],
)
def test_fixture_logs_first_copy_of_each_step_and_no_step0(
    ltx2_fixtures: Path, name: str, steps: list[int]
) -> None:
    """With GA > 1 each Step line is printed GA times: the first copy (2.59 s in these logs) times
    the micro-step that ran the optimizer step, the later ones (2.33 s) micro-steps without one.
    Step-0 lines (``calculating...``, 1.62 s) are before any optimizer step and are dropped."""
    text = _fixture_log(ltx2_fixtures, name)
    log = parse_ltx2_output(text)
    assert [s.step for s in log.steps] == steps
    assert all(s.time_s == 2.59 for s in log.steps)  # never a later copy (2.33) nor Step 0 (1.62)
    assert log.stats is not None and log.stats.peak_gb == 31.25
    if steps:
        assert log.steady_step_time() == (2.59, 0.0)  # lines at 40 and 60: past the warm-up


def test_fixture_ga4_log_prints_each_step_ga_times(ltx2_fixtures: Path) -> None:
    """The premise of the rule above, read off the real log: 3 Step-0 lines, Step 20 and 40 four
    times (first copy different), Step 60 once (the run ends on its optimizer micro-step)."""
    text = _fixture_log(ltx2_fixtures, "steps60_ga4_batch2.log")
    times = {
        n: [m.group(1) for m in re.finditer(rf"Step {n}/60 .*?Time/Step: ([\d.]+)s", text)]
        for n in (0, 20, 40, 60)
    }
    assert times == {
        0: ["1.62"] * 3,
        20: ["2.59", "2.33", "2.33", "2.33"],
        40: ["2.59", "2.33", "2.33", "2.33"],
        60: ["2.59"],
    }


@pytest.mark.parametrize(
    ("name", "effective_batch", "samples_per_s"),
    [
        # Samples/second in the block is steps/s x processes x batch (0.12 x 1 x 1): GA left out.
        pytest.param("steps15_ga2_batch1.log", 2, 0.24, id="ga2-block-ignores-ga"),
        pytest.param("steps15_ga1_batch2.log", 2, 0.24, id="ga1"),
    ],
)
def test_without_step_lines_samples_per_second_counts_ga(
    ltx2_fixtures: Path, name: str, effective_batch: int, samples_per_s: float
) -> None:
    metrics = parse_ltx2_output(_fixture_log(ltx2_fixtures, name)).to_metrics(effective_batch)
    assert metrics.step_time_s is None and metrics.step_times_s == []
    assert metrics.samples_per_s == pytest.approx(samples_per_s)


def test_time_per_step_is_taken_as_printed_for_ga() -> None:
    """Time/Step already is one micro-step x GA (trainer.py:275): samples/s is the effective batch
    (batch x GA x GPUs) over it, with no second multiplication by GA."""
    lines = [
        f"INFO     Step {n}/100 - Loss: 0.1, LR: 1.00e-04, Time/Step: 4.00s, Total Time: 0h 7m"
        for n in (20, 40, 60)
    ]
    metrics = parse_ltx2_output("\n".join(lines)).to_metrics(effective_batch=2 * 4)
    assert metrics.step_time_s == 4.0 and metrics.samples_per_s == pytest.approx(2.0)


def test_a_resumed_runs_calculating_line_is_not_a_step() -> None:
    """After a resume the first Step line can be for step 20 with ``calculating...``: it times a
    micro-step before this run's first optimizer step (trainer.py:300-306)."""
    text = (
        "Step 20/100 - Loss: 0.1, LR: 1.00e-04, Time/Step: 9.00s, Total Time: calculating...\n"
        "Step 40/100 - Loss: 0.1, LR: 1.00e-04, Time/Step: 1.00s, Total Time: 0h 1m\n"
    )
    assert [s.step for s in parse_ltx2_output(text).steps] == [40]


def test_min_steps_for_step_lines_is_the_warmup_window_and_two_lines() -> None:
    assert MIN_STEPS_FOR_STEP_LINES == WARMUP_STEPS + 2 * STEP_LINE_EVERY == 60
