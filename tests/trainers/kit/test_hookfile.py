"""The readers of the trial-side hook's JSON lines and of AUTOTUNE_METRICS_FILE."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from autotune.core.timing import steady_state, warmup_count
from autotune.trainers.kit.readers.hookfile import read_hook_file
from autotune.trainers.kit.readers.metricsfile import read_metrics_file


def _step(n: int, t: float, reserved: float | None = 3.0, **extra: object) -> str:
    return json.dumps(
        {
            "event": "step",
            "step": n,
            "t": 1700000000.0 + n,
            "step_time_s": t,
            "max_memory_reserved_gb": reserved,
            "max_memory_allocated_gb": 2.0,
            **extra,
        }
    )


def _steps(times: list[float]) -> list[str]:
    return [_step(i + 1, t, reserved=3.0 + i / 100) for i, t in enumerate(times)]


EXIT = json.dumps(
    {"event": "exit", "steps": 3, "max_memory_reserved_gb": 7.5, "max_memory_allocated_gb": 6.0}
)


@pytest.mark.parametrize(
    ("lines", "step_time", "peak", "n_times"),
    [
        pytest.param([*_steps([5.0, 1.0, 1.0, 1.0]), EXIT], 1.0, 7.5, 4, id="steps-and-exit"),
        pytest.param(_steps([5.0] + [2.0] * 30), 2.0, 3.30, 31, id="warmup-window-left-out"),
        pytest.param(
            [*_steps([5.0, 1.0, 1.0]), '{"event": "step", "step": 4, "step_ti'],
            1.0,
            3.02,
            3,
            id="torn-last-line",
        ),
        pytest.param(
            ["not json", "[1, 2]", "{}", '{"event": "step", "step": "x", "step_time_s": 1}'],
            None,
            None,
            0,
            id="garbage-lines",
        ),
        pytest.param([_step(1, 1.0, reserved=None)], 1.0, 2.0, 1, id="allocated-when-no-reserved"),
        pytest.param(
            [_step(1, float("nan")), _step(2, -1.0), _step(3, True)], None, 3.0, 0, id="bad-times-skipped"
        ),
        pytest.param([EXIT], None, 7.5, 0, id="exit-only"),
        pytest.param([], None, None, 0, id="empty"),
    ],
)
def test_read_hook_file(
    tmp_path: Path, lines: list[str], step_time: float | None, peak: float | None, n_times: int
) -> None:
    path = tmp_path / "hook.jsonl"
    path.write_text("\n".join(lines), encoding="utf-8")
    m = read_hook_file(path)
    assert m.step_time_s == step_time
    assert m.measured_peak_vram_gb == (pytest.approx(peak) if peak is not None else None)
    assert len(m.step_times_s) == n_times
    assert m.source == "hook"


def test_hook_file_with_two_processes_reads_one_series(tmp_path: Path) -> None:
    lines = [_step(i, 1.0, pid=100) for i in range(1, 5)] + [_step(i, 9.0, pid=101) for i in range(1, 3)]
    path = tmp_path / "hook.jsonl"
    path.write_text("\n".join(lines))
    assert read_hook_file(path).step_times_s == [1.0] * 4


@pytest.mark.parametrize("content", [None, b"", b"\xff\xfe\x00garbage", b"{" * 10000])
def test_hook_file_missing_or_garbage_never_raises(tmp_path: Path, content: bytes | None) -> None:
    path = tmp_path / "hook.jsonl"
    if content is not None:
        path.write_bytes(content)
    assert not read_hook_file(path).measured


def test_hook_file_directory_instead_of_file(tmp_path: Path) -> None:
    assert not read_hook_file(tmp_path).measured


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        pytest.param(
            {"step_time_s": 0.5, "peak_vram_gb": 12.5, "samples_per_s": 8.0, "loss": 0.2},
            {"step_time_s": 0.5, "trainer_peak_vram_gb": 12.5, "samples_per_s": 8.0, "losses": [0.2]},
            id="contract",
        ),
        pytest.param(
            {"step_times_s": [3.0, 1.0, 1.0, 1.2, 0.8], "losses": [0.3, 0.2]},
            {"step_time_s": 1.0, "losses": [0.3, 0.2], "samples_per_s": None},
            id="reference-per-step",
        ),
        pytest.param(
            {"step_times_s": [3.0, 1.0], "step_time_s": 0.9}, {"step_time_s": 0.9}, id="explicit-wins"
        ),
        pytest.param({"loss": "nan"}, {"losses": [math.nan]}, id="nan-as-string"),
        pytest.param(
            {"step_time_s": "fast", "peak_vram_gb": -3, "samples_per_s": True},
            {"step_time_s": None, "trainer_peak_vram_gb": None, "samples_per_s": None},
            id="wrong-types",
        ),
    ],
)
def test_read_metrics_file(tmp_path: Path, data: dict[str, object], expected: dict[str, object]) -> None:
    path = tmp_path / "trainer-metrics.json"
    path.write_text(json.dumps(data))
    m = read_metrics_file(path)
    for name, value in expected.items():
        got = getattr(m, name)
        if name == "losses" and any(isinstance(v, float) and math.isnan(v) for v in value):  # type: ignore[union-attr]
            assert m.nan_loss
        else:
            assert got == value, name


def test_nan_loss_in_losses_list_is_seen(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text('{"losses": [0.3, NaN]}')
    assert read_metrics_file(path).nan_loss


@pytest.mark.parametrize("content", [None, "", "{", "[1, 2]", '"text"', "{" * 5000, '{"step_time_s": 1.0'])
def test_metrics_file_missing_or_garbage_never_raises(tmp_path: Path, content: str | None) -> None:
    path = tmp_path / "m.json"
    if content is not None:
        path.write_text(content)
    assert not read_metrics_file(path).measured


@pytest.mark.parametrize(
    ("samples", "skip", "median", "spread"),
    [
        ([5.0, 1.0, 1.0, 1.0, 1.0], 1, 1.0, 0.0),
        ([5.0, 1.0, 3.0], 1, 2.0, pytest.approx(math.sqrt(2))),
        ([5.0], 1, 5.0, None),
        ([], 1, None, None),
        ([float("nan"), 2.0, -1.0, 2.0], 1, 2.0, None),
    ],
)
def test_steady_state(samples: list[float], skip: int, median: float | None, spread: object) -> None:
    assert steady_state(samples, skip) == (median, spread)


@pytest.mark.parametrize(("n", "skip"), [(0, 0), (1, 0), (3, 1), (10, 5), (50, 20), (500, 20)])
def test_warmup_count(n: int, skip: int) -> None:
    assert warmup_count(n) == skip


# --- losses, the data loader's real batch, the emulated card's counted steps -----------------------


def _write(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "hook.jsonl"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("losses", "nan"),
    [
        pytest.param([0.5, 0.4, 0.3], False, id="finite"),
        pytest.param([0.5, float("nan"), 0.3], True, id="nan"),
        pytest.param([0.5, float("inf")], True, id="inf"),
        pytest.param([0.5, "NaN"], True, id="nan-as-text"),
        pytest.param([0.5, None, "fine"], False, id="no-loss-seen"),
    ],
)
def test_losses_are_read_and_a_non_finite_one_is_nan(tmp_path: Path, losses: list[object], nan: bool) -> None:
    lines = [_step(i + 1, 1.0, loss=loss) for i, loss in enumerate(losses)]
    metrics = read_hook_file(_write(tmp_path, lines))
    assert metrics.nan_loss is nan
    assert len(metrics.losses) == sum(isinstance(x, float) or x == "NaN" for x in losses)


def test_a_nan_loss_seen_only_at_exit_still_counts(tmp_path: Path) -> None:
    exit_line = json.dumps({"event": "exit", "steps": 1, "loss": float("nan")})
    assert read_hook_file(_write(tmp_path, [_step(1, 1.0, loss=0.5), exit_line])).nan_loss


def test_samples_per_step_is_the_loaders_count_over_the_whole_run(tmp_path: Path) -> None:
    # 10 items at batch 4: 4, 4, 2, ... per step: the mean over every step, warm-up included.
    sizes = [4, 4, 2] * 4
    lines = [_step(i + 1, 0.5, samples=n) for i, n in enumerate(sizes)]
    metrics = read_hook_file(_write(tmp_path, lines))
    assert metrics.samples_per_step == pytest.approx(sum(sizes) / len(sizes))
    assert metrics.samples_per_s is None  # the verdict divides what it credits by the step time


@pytest.mark.parametrize("steps", [4, 6, 25])
def test_a_one_batch_look_ahead_shifts_counts_but_not_the_total(tmp_path: Path, steps: int) -> None:
    """accelerate's DataLoaderShard takes a batch ahead (data_loader.py:586, 598 at 16cb6eb): the
    first step sees 2 batches yielded, the last 0. Any steady window reads it wrong (a window
    ending in the 0 reads 1 - 1/k, one starting in the 2 above it); the whole run reads 1."""
    counts = [2] + [1] * (steps - 2) + [0]
    lines = [_step(i + 1, 0.5, samples=n) for i, n in enumerate(counts)]
    assert read_hook_file(_write(tmp_path, lines)).samples_per_step == pytest.approx(1.0)


def test_ranks_that_step_together_add_up(tmp_path: Path) -> None:
    lines = [_step(i, 0.5, samples=6, pid=100) for i in range(1, 5)]
    lines += [_step(i, 0.5, samples=6, pid=101) for i in range(1, 5)]
    lines.append(json.dumps({"event": "exit", "steps": 0, "pid": 99}))  # the launcher: no steps
    assert read_hook_file(_write(tmp_path, lines)).samples_per_step == pytest.approx(12.0)


def test_without_counted_samples_there_is_no_samples_per_s(tmp_path: Path) -> None:
    lines = [_step(i, 0.5, samples=None) for i in range(1, 5)]
    assert read_hook_file(_write(tmp_path, lines)).samples_per_s is None


def test_steps_the_emulated_card_counted_are_left_out_of_the_step_time(tmp_path: Path) -> None:
    lines = [_step(i, 5.0, counted=True) for i in range(1, 4)] + [_step(i, 1.0) for i in range(4, 10)]
    metrics = read_hook_file(_write(tmp_path, lines))
    assert metrics.step_time_s == 1.0 and len(metrics.step_times_s) == 9
    assert metrics.timing_note is None
    only_counted = [_step(i, 2.0, counted=True) for i in range(1, 4)]
    counted = read_hook_file(_write(tmp_path, only_counted))
    assert counted.step_time_s == 2.0  # all there is, and the trial says what is in it
    assert counted.timing_note is not None and "counted by the emulated card" in counted.timing_note


# --- backward events: a script that updates its weights by hand (no torch.optim optimizer) -------


def _backward(n: int, t: float, **extra: object) -> str:
    record = {"event": "backward", "backward": n, "step_time_s": t, "max_memory_reserved_gb": 1.0}
    return json.dumps({**record, "loss": 5.0 - n / 10, "samples": None, "pid": 7, **extra})


def test_without_steps_the_backward_calls_are_the_steps_less_the_start_up(tmp_path: Path) -> None:
    # backward 1's interval is import torch -> first backward (start-up): never a step.
    lines = [_backward(1, 9.0)] + [_backward(i, 3.0 if i < 5 else 1.0) for i in range(2, 40)]
    lines.append(json.dumps({"event": "exit", "steps": 0, "loss": 1.1, "pid": 7}))
    metrics = read_hook_file(_write(tmp_path, lines))
    assert metrics.steps_run == 39 and len(metrics.step_times_s) == 38  # 39 updates, 38 intervals
    assert 9.0 not in metrics.step_times_s
    assert metrics.step_time_s == pytest.approx(1.0)  # the 3 s ones sit in the warm-up window
    assert metrics.steady_steps == 38 - warmup_count(38)
    assert metrics.timing_note is not None and "backward()" in metrics.timing_note
    assert metrics.losses == pytest.approx([5.0 - n / 10 for n in range(1, 40)])  # not the exit's repeat
    assert metrics.measured_peak_vram_gb == 1.0


def test_a_single_backward_is_no_step(tmp_path: Path) -> None:
    metrics = read_hook_file(_write(tmp_path, [_backward(1, 9.0)]))
    assert metrics.step_time_s is None and not metrics.measured and metrics.steps_run == 1


def test_with_optimizer_steps_the_backward_events_are_not_steps(tmp_path: Path) -> None:
    # Accumulation 4: four backward lines before the first step, then steps only.
    lines = [_backward(i, 0.1, loss=99.0) for i in range(1, 5)]
    lines += [_step(i, 2.0, loss=1.0) for i in range(1, 11)]
    metrics = read_hook_file(_write(tmp_path, lines))
    assert metrics.step_times_s == [2.0] * 10 and metrics.steps_run == 10
    assert metrics.timing_note is None
    assert metrics.losses == [1.0] * 10


def test_backward_samples_are_per_backward(tmp_path: Path) -> None:
    lines = [_backward(i, 0.5, samples=4) for i in range(1, 12)]
    assert read_hook_file(_write(tmp_path, lines)).samples_per_step == pytest.approx(4.0)


def test_a_nan_loss_at_a_backward_is_nan(tmp_path: Path) -> None:
    lines = [_backward(1, 1.0), _backward(2, 1.0), _backward(3, 1.0, loss=float("nan"))]
    assert read_hook_file(_write(tmp_path, lines)).nan_loss
