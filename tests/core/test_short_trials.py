"""A script that runs its own length: warned up front, its steps recorded, a window too short to time
said so with an honest spread, and an epoch's fast last batch kept out of the step time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.core.outcome import Outcome
from autotune.core.timing import MIN_STEADY_STEPS, steady_state, too_short_text
from autotune.core.verdict import measured_attrs
from autotune.sweep.measure import summary
from autotune.trainers import get_adapter
from autotune.trainers.kit.readers.hookfile import read_hook_file


def _hook(tmp_path: Path, times: list[float], *, counted: int = 0, samples: list[int] | None = None) -> Path:
    lines = [
        json.dumps(
            {
                "event": "step",
                "step": i + 1,
                "t": 1.0 + i,
                "step_time_s": t,
                "max_memory_reserved_gb": 0.01,
                "counted": i < counted,
                "samples": samples[i] if samples else None,
                "pid": 7,
            }
        )
        for i, t in enumerate(times)
    ]
    path = tmp_path / "hook.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_a_14_step_run_is_too_short_to_time_and_says_so(tmp_path: Path) -> None:
    # 14 steps, 3 counted by the emulated card: 11 plain, 5 of them warm-up, 6 steady
    times = [3.0, 3.0, 3.0, 0.9, 0.6, 0.5, 0.5, 0.5, 0.5, 0.4, 0.5, 0.5, 0.9, 0.5]
    metrics = read_hook_file(_hook(tmp_path, times, counted=3))
    assert (metrics.steps_run, metrics.steady_steps) == (14, 6) and MIN_STEADY_STEPS > 6
    # the spread is at least half the range of the six steady steps, not their (zero) IQR
    assert metrics.step_time_s == pytest.approx(0.55) and metrics.step_time_spread_s == pytest.approx(0.25)
    attrs = measured_attrs(Outcome.OK, "", metrics, 8, 1.0, 0.1)
    assert attrs["outcome"] == "ok" and (attrs["steps_run"], attrs["steady_steps"]) == (14, 6)
    assert attrs["reason"].startswith("too short to time: 6 steady steps of 14 run (8 needed")
    line = summary({**attrs, "steps": 50})
    assert "ran 14 steps (50 asked); too short to time: 6 steady steps of 14 run" in line


def test_a_long_enough_run_says_nothing_of_it(tmp_path: Path) -> None:
    metrics = read_hook_file(_hook(tmp_path, [1.0] * 40))
    assert metrics.steady_steps == 20 and too_short_text(20, 40) is None
    attrs = measured_attrs(Outcome.OK, "", metrics, 8, 1.0, 0.1)
    assert "too short" not in attrs.get("reason", "")
    assert "ran" not in summary({**attrs, "steps": 40})


def test_epoch_end_partial_batches_do_not_bias_samples_per_s(tmp_path: Path) -> None:
    # 6 items at batch 4: steps of 4 and 2 samples alternate, the partial one twice as fast. Samples
    # over the time the steps took: 6 samples per 0.75 s, whichever steps are fast.
    samples = [4, 2] * 20
    times = [0.5, 0.25] * 20
    metrics = read_hook_file(_hook(tmp_path, times, samples=samples))
    assert metrics.step_time_s == pytest.approx(0.375) and metrics.steady_steps == 20
    assert metrics.samples_per_step is not None
    assert metrics.samples_per_step / metrics.step_time_s == pytest.approx(6 / 0.75)


@pytest.mark.parametrize(
    ("samples", "spread"),
    [
        ([1.0, 1.0, 1.0, 1.0, 1.0, 3.0], 1.0),  # 6 steps: the IQR says 0, half the range 1
        ([1.0] * 7 + [3.0] * 2, 0.0),  # 9 steps: enough, the IQR as before
        ([1.0] * 9 + [3.0], 0.0),
    ],
)
def test_a_short_windows_spread_is_at_least_half_its_range(samples: list[float], spread: object) -> None:
    assert steady_state(samples, 0)[1] == spread


@pytest.mark.parametrize(
    ("template", "config", "warned"),
    [
        ("python train.py --bs {batch_size}", None, True),
        ("python train.py --bs {batch_size} --max-steps {steps}", None, False),
        ("python train.py --config {config}", None, False),  # the flat config holds steps
        ("python train.py --config {config}", "batch_size: 2\n", True),  # a config without a steps key
        ("python train.py --config {config}", "optimization:\n  steps: 10\n  batch_size: 1\n", False),
    ],
)
def test_a_template_without_steps_is_warned_before_the_first_trial(
    tmp_path: Path, template: str, config: str | None, warned: bool
) -> None:
    adapter = get_adapter("command", template=template)
    path = None
    if config is not None:
        path = tmp_path / "c.yaml"
        path.write_text(config, encoding="utf-8")
    warning = adapter.steps_warning(adapter.load_baseline(path), 50)
    assert (warning is not None) is warned
    if warning:
        assert "has no {steps}: trials cannot be told to run 50 steps" in warning
