"""A script that steps again on batches it drew (pytorch/examples' mnist_forward_forward:
``next(iter(train_loader))`` once, then two layers x epochs optimizer steps on it, main.py:163,
52-56, 72-82 at 77f55b9) is credited the batch its template gives, not the loaders' yield spread
over every step (16 samples over 50 steps read 0.32 per step: 50x too slow)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.trainers import get_adapter
from autotune.trainers.command.adapter import reused_batches
from autotune.trainers.kit.readers.hookfile import HOOK_FILE_NAME


@pytest.mark.parametrize(
    ("counted", "batch", "reused"),
    [
        (16 / 50, 16, True),  # one batch drawn, 50 steps on it
        (7.9, 16, True),
        (8.0, 16, False),  # half the batch: the line itself
        (15.2, 16, False),  # a partial last batch
        (17.0, 16, False),  # a loader's look-ahead at the end
        (64.0, 16, False),  # more than it was given (accumulation in the script): the count
        (None, 16, False),  # no loader seen
        (0.32, None, False),  # no batch to compare with
    ],
)
def test_reused_batches(counted: float | None, batch: float | None, reused: bool) -> None:
    assert reused_batches(counted, batch) is reused


def _hook_file(trial: Path, samples: list[int | None]) -> None:
    lines = [
        json.dumps(
            {"event": "step", "step": i + 1, "t": 1.0 + i, "step_time_s": 0.002, "samples": n, "pid": 7}
        )
        for i, n in enumerate(samples)
    ]
    (trial / HOOK_FILE_NAME).write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize(
    ("template", "samples", "per_step", "noted"),
    [
        ("python main.py --train_size {batch_size} --epochs {steps}", [16] + [0] * 49, 16, True),
        ("python main.py --batch-size {batch_size} --steps {steps}", [16] * 50, 16, False),
        ("python main.py --steps {steps}", [16] + [0] * 49, 16 / 50, False),  # no batch given: the count
    ],
)
def test_the_batch_given_is_credited_when_the_loaders_yield_far_less(
    tmp_path: Path, template: str, samples: list[int | None], per_step: float, noted: bool
) -> None:
    adapter = get_adapter("command", template=template, cwd=tmp_path)
    trial = tmp_path / "t"
    adapter.render(
        adapter.load_baseline(None),
        {"batch_size": 16},
        gradient_accumulation_steps=1,
        steps=50,
        trial_dir=trial,
    )
    _hook_file(trial, samples)
    metrics = adapter.read_metrics(trial, "")
    assert metrics.samples_per_s == pytest.approx(per_step / 0.002)
    assert (
        metrics.timing_note is not None and "credited from the batch it was given" in metrics.timing_note
    ) is noted
