"""The fake LTX-2 trainer behaves like the real one, and trials on it never resume.

Its premises are read off the real trainer's logs (``../shared/fixtures/ltx2/logs``) where they
exist; resume, output paths and the whole-card peak follow ``trainer.py`` (cited in the fake).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.errors import UsageError
from autotune.trainers import get_adapter
from autotune.trainers.ltx2.adapter import Ltx2Adapter, short_run_recipe
from tests.helpers import FAKES, need_shared

FAKE = FAKES / "ltx2-trainer"
SCRIPT = FAKE / "scripts" / "train.py"


def _adapter(**options: object) -> Ltx2Adapter:
    adapter = get_adapter("ltx2", trainer_dir=FAKE, launcher=[sys.executable], **options)
    assert isinstance(adapter, Ltx2Adapter)
    return adapter


def _train(config: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Run the fake as the adapter would (COLUMNS=250), on a config written by hand."""
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(config), "--disable-progress-bars"],
        env={**os.environ, "COLUMNS": "250", "PYTHONUNBUFFERED": "1", **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _steps(stdout: str) -> list[int]:
    return [int(m.group(1)) for m in re.finditer(r"Step (\d+)/\d+ - ", stdout)]


def _normalised(text: str) -> list[str]:
    """Lines without the right-aligned source location and the padding."""
    return [re.sub(r"\s*trainer\.py:\d+\s*$", "", line).rstrip() for line in text.splitlines()]


@pytest.mark.parametrize(
    ("name", "steps", "accum", "batch"),
    [
        ("steps60_ga4_batch2.log", 60, 4, 2),
        ("steps60_ga1_batch1.log", 60, 1, 1),
        ("steps15_ga2_batch1.log", 15, 2, 1),
    ],
)
def test_the_fakes_step_lines_are_the_real_logs(
    ltx2_fixtures: Path, tmp_path: Path, name: str, steps: int, accum: int, batch: int
) -> None:
    """Same Step lines, copies and Step-0 lines as the real trainer's log, line for line (the
    statistics block's made-up timings aside)."""
    real = need_shared(ltx2_fixtures / "logs" / name)
    config = tmp_path / "c.yaml"
    config.write_text(
        f"optimization: {{steps: {steps}, batch_size: {batch}, gradient_accumulation_steps: {accum}}}\n"
        f"output_dir: {tmp_path / 'out'}\n"
    )
    done = _train(config, FAKE_LTX2_STEP_TIMES="2.59", FAKE_LTX2_LOSS="0.1235", FAKE_LTX2_PEAK_GB="31.25")
    assert done.returncode == 0, done.stderr
    ours = [line for line in _normalised(done.stdout) if "Step " in line or "Peak GPU" in line]
    theirs = [line for line in _normalised(real.read_text()) if "Step " in line or "Peak GPU" in line]
    assert ours == theirs


def _first_run(tmp_path: Path, steps: int = 40) -> Path:
    """A run that saves its LoRA and a training state at its last step (the trainer's defaults)."""
    config = tmp_path / "first.yaml"
    config.write_text(
        f"optimization: {{steps: {steps}, batch_size: 1, gradient_accumulation_steps: 1}}\n"
        f"output_dir: {tmp_path / 'first'}\n"
    )
    assert _train(config).returncode == 0
    checkpoints = tmp_path / "first" / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == [
        f"lora_weights_step_{steps:05d}.safetensors",
        f"training_state_step_{steps:05d}.pt",
    ]
    return checkpoints


def test_the_fake_resumes_like_the_real_trainer(tmp_path: Path) -> None:
    """Without ``no_resume`` a checkpoint with its training state beside it resumes at its step
    (trainer.py:527-566): fewer steps, or no steps at all."""
    checkpoints = _first_run(tmp_path)
    again = tmp_path / "again.yaml"
    again.write_text(
        f"model: {{load_checkpoint: {checkpoints}}}\noptimization: {{steps: 60, gradient_accumulation_steps: 1}}\n"
        f"output_dir: {tmp_path / 'again'}\n"
    )
    done = _train(again)
    assert done.returncode == 0, done.stderr
    assert "Resuming from step 40" in done.stdout and _steps(done.stdout) == [60]
    again.write_text(again.read_text().replace("steps: 60", "steps: 40"))
    done = _train(again)
    assert (
        done.returncode == 1
        and "No remaining training steps: initial_step=40 >= target_steps=40" in done.stderr
    )


def test_a_trial_trains_every_step_from_zero_and_still_loads_the_weights(tmp_path: Path) -> None:
    """Issue 16.1: the recipe's ``checkpoints.no_resume`` keeps the step counter at 0 while the
    weights named by ``model.load_checkpoint`` still load."""
    checkpoints = _first_run(tmp_path)
    adapter = _adapter()
    baseline = adapter.baseline_from_text(
        f"model:\n  load_checkpoint: {checkpoints}\noptimization:\n  steps: 2000\n  batch_size: 1\n"
    )
    for steps in (40, 60):
        spec = adapter.render(
            baseline, {}, gradient_accumulation_steps=1, steps=steps, trial_dir=tmp_path / f"t{steps}"
        )
        done = subprocess.run(
            spec.argv,
            cwd=spec.cwd,
            env={**os.environ, **spec.env},
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert f"Loading checkpoint from {checkpoints / 'lora_weights_step_00040.safetensors'}" in done.stdout
        assert "Resuming" not in done.stdout and "Starting training" in done.stdout
        assert _steps(done.stdout) == list(range(20, steps + 1, 20))


def test_the_trainers_peak_is_the_whole_card(tmp_path: Path) -> None:
    """nvidia-smi's memory.used counts every process on the card (gpu_utils.py:67-90)."""
    config = tmp_path / "c.yaml"
    config.write_text(f"optimization: {{steps: 20, batch_size: 1}}\noutput_dir: {tmp_path / 'o'}\n")
    done = _train(config, FAKE_LTX2_PEAK_GB="30", FAKE_LTX2_CARD_OTHER_GB="12.5")
    assert "Peak GPU memory: 42.50 GB" in done.stdout


def test_validation_peaks_above_training_and_writes_the_real_sample_paths(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(
        "optimization: {steps: 40, batch_size: 1}\n"
        "validation: {interval: 40, skip_initial_validation: true, samples: [{prompt: a}, {prompt: b}]}\n"
        f"output_dir: {tmp_path / 'o'}\n"
    )
    with_validation = _train(config, FAKE_LTX2_PEAK_GB="30", FAKE_LTX2_VALIDATION_PEAK_GB="34.5")
    assert "Peak GPU memory: 34.50 GB" in with_validation.stdout
    assert sorted(p.name for p in (tmp_path / "o" / "samples").iterdir()) == [
        "step_000040_1.mp4",
        "step_000040_2.mp4",
    ]
    config.write_text(config.read_text().replace("interval: 40", "interval: null"))
    without = _train(config, FAKE_LTX2_PEAK_GB="30", FAKE_LTX2_VALIDATION_PEAK_GB="34.5")
    assert "Peak GPU memory: 30.00 GB" in without.stdout


def test_the_recipe_never_resumes(tmp_path: Path) -> None:
    """``checkpoints.no_resume`` is what makes the real trainer start at step 0 while still loading
    ``model.load_checkpoint``'s weights (trainer.py:527-533)."""
    assert ("checkpoints.no_resume", True) in short_run_recipe(50, tmp_path)


@pytest.mark.parametrize(
    ("steps", "hook", "refused"), [(59, False, True), (60, False, False), (20, True, False)]
)
def test_steps_too_short_for_step_lines_are_refused_saying_how_many(
    steps: int, hook: bool, refused: bool
) -> None:
    adapter = _adapter(hook=hook)
    if not refused:
        adapter.check_steps(steps)
        return
    with pytest.raises(UsageError, match=r"every 20 optimizer steps.*--steps 60 or more.*hook"):
        adapter.check_steps(steps)


def test_the_reference_trainer_times_every_step_so_any_steps_do() -> None:
    get_adapter("reference").check_steps(12)  # its metrics file has every step


def test_a_sweep_too_short_for_step_lines_stops_before_any_trial(tmp_path: Path) -> None:
    """``autotune sweep`` asks the adapter (``check_steps``) before the first trial."""
    import io

    from autotune.sweep.api import run_sweep
    from autotune.sweep.options import SweepOptions
    from tests.fake_nvml import H100, FakeNvml

    config = tmp_path / "c.yaml"
    config.write_text("optimization:\n  steps: 2000\n  batch_size: 1\n")
    opts = SweepOptions(
        trainer="ltx2",
        config=config,
        workdir=tmp_path / "runs",
        steps=50,
        trainer_options={"trainer_dir": str(FAKE), "hook": False},
    )
    with pytest.raises(UsageError, match=r"--steps 50 is too short.*--steps 60 or more"):
        run_sweep(opts, stream=io.StringIO(), tty=False, nvml=FakeNvml([H100]), claims=False)
    assert not list((tmp_path / "runs").rglob("trial-*"))
