"""Samples per optimizer step under real accelerate: its DataLoaderShard takes one batch ahead
(accelerate/data_loader.py:586 and 598 at 16cb6eb), so the hook's per-step loader counts are
shifted by a batch. A drop_last trainer (LTX-2, trainer.py:685-689) is credited batch x GA x GPUs;
the loader count, where used, over the whole run."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.core.metrics import Readings
from autotune.core.timing import warmup_count
from autotune.core.verdict import combine
from autotune.trainers.kit.common import hook_env
from autotune.trainers.kit.readers.hookfile import load_event, read_hook_file
from tests.helpers import FAKES

pytest.importorskip("accelerate")
pytestmark = [pytest.mark.torch, pytest.mark.process, pytest.mark.untimed]  # untimed: counts, on two workers


def _run(tmp: Path, batch: int, ga: int, steps: int, size: int) -> tuple[list[int], Path]:
    env = {**os.environ, **hook_env(tmp, {})}
    args = [str(batch), str(ga), str(steps), str(size)]
    done = subprocess.run(
        [sys.executable, str(FAKES / "accelerate_loop.py"), *args], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    path = tmp / "hook.jsonl"
    counts = [
        e["samples"]
        for line in path.read_text().splitlines()
        if (e := load_event(line)) and e.get("event") == "step"
    ]
    return counts, path


@pytest.mark.timeout(120)
def test_the_look_ahead_shifts_the_counts_and_the_batch_credit_is_exact(tmp_path: Path) -> None:
    batch, ga, steps = 2, 2, 6
    # An epoch that ends with the run: 6 steps of 2 x 2 samples.
    (tmp_path / "a").mkdir()
    counts, path = _run(tmp_path / "a", batch, ga, steps, size=batch * ga * steps)
    assert len(counts) == steps
    assert counts[0] > batch * ga and counts[-1] < batch * ga  # the batch taken ahead, then missing
    old_window = counts[warmup_count(steps) :]
    assert statistics.fmean(old_window) != batch * ga  # any window of the counts is wrong
    hook = read_hook_file(path)
    assert hook.samples_per_step == pytest.approx(batch * ga)  # the whole run: right
    # Stopped mid-epoch, as a short trial is: one batch taken ahead was never trained.
    (tmp_path / "b").mkdir()
    counts, path = _run(tmp_path / "b", batch, ga, steps, size=10 * batch * ga)
    hook = read_hook_file(path)
    assert hook.samples_per_step == pytest.approx(batch * ga + batch / steps)
    assert hook.step_time_s is not None
    # So a drop_last trainer is credited what it consumes: batch x GA (x GPUs) per optimizer step.
    credited = combine(Readings(hook=hook, effective_batch=batch * ga, loader_count_right=False))
    assert credited.samples_per_s == pytest.approx(batch * ga / hook.step_time_s)
    counted = combine(Readings(hook=hook, effective_batch=batch * ga, loader_count_right=True))
    assert counted.samples_per_s == pytest.approx((batch * ga + batch / steps) / hook.step_time_s)
