"""LTX-2 trials see the run's memory phases: one validation pass with the
baseline's settings, the final save, each phase's peak apart, the largest judged.

End to end through ``autotune sweep --trainer ltx2`` on the fake trainer, whose validation peaks
15 % above training (the fake cites the real trainer for it)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest

from autotune.cli import main
from autotune.core.metrics import TrialMetrics
from autotune.trainers import get_adapter
from autotune.trainers.kit.readers.phases import SAVE, TRAINING, VALIDATION, read_phase_peaks, without_step
from autotune.trainers.ltx2.adapter import Ltx2Adapter, trial_recipe
from tests.helpers import FAKES

FAKE = FAKES / "ltx2-trainer"

BASELINE = """\
model:
  model_path: m.safetensors
  training_mode: lora
optimization:
  steps: 2000
  batch_size: 1
  gradient_accumulation_steps: 1
  optimizer_type: adamw8bit
  enable_gradient_checkpointing: true
acceleration:
  quantization: int8-quanto
  load_text_encoder_in_8bit: true
validation:
  prompts: ["a cat", "a dog"]
  video_dims: [960, 544, 89]
  inference_steps: 30
  interval: 250
checkpoints:
  interval: 500
output_dir: outputs/x
"""

#: Training peak = 50 + 6 x (batch - 1) GB: 50, 56, 68 at batch 1, 2, 4; validation 15 % above:
#: 57.5, 64.4, 78.2. On an 80 GB card with 10 % headroom (72 GB), batch 4 trains within the line
#: but its validation does not.
FAKE_ENV = {"FAKE_LTX2_PEAK_GB": "50", "FAKE_LTX2_PEAK_GB_PER_SAMPLE": "6", "FAKE_LTX2_CARD_GB": "80"}
LIMIT_GB = 72.0


def _validation_gb(batch: int) -> float:
    return 1.15 * (50 + 6 * (batch - 1))


def test_the_recipe_keeps_the_baselines_validation_and_cuts_only_inference_steps(tmp_path: Path) -> None:
    adapter = get_adapter("ltx2", trainer_dir=FAKE, launcher=[sys.executable])
    baseline = adapter.baseline_from_text(BASELINE)
    adapter.render(baseline, {}, gradient_accumulation_steps=1, steps=60, trial_dir=tmp_path / "t")
    text = (tmp_path / "t" / "config.yaml").read_text()
    import yaml

    config = yaml.safe_load(text)
    validation = config["validation"]
    assert validation["interval"] == 59 and validation["skip_initial_validation"] is True
    assert validation["inference_steps"] == 2
    assert validation["prompts"] == ["a cat", "a dog"]  # the prompt count, and so the text encoder
    assert validation["video_dims"] == [960, 544, 89]
    assert config["acceleration"]["load_text_encoder_in_8bit"] is True
    assert "samples" not in validation
    assert config["checkpoints"]["interval"] is None  # the final save stays (trainer.py:338)
    record = json.loads((tmp_path / "t" / "adapter.json").read_text())
    assert record["validation_step"] == 59


@pytest.mark.parametrize(
    ("text", "validates"),
    [
        ("validation: {interval: null, prompts: [a]}\n", False),
        ("validation: {samples: []}\n", False),
        ("validation: {samples: [{prompt: a}]}\n", True),  # interval omitted: the code default 100
        ("optimization: {steps: 10}\n", False),
    ],
)
def test_only_a_baseline_that_validates_gets_a_validation_pass(
    text: str, validates: bool, tmp_path: Path
) -> None:
    import yaml

    keys = dict(trial_recipe(yaml.safe_load(text), 60, tmp_path))
    assert (keys["validation.interval"] == 59) is validates
    if not validates:
        assert keys["validation.interval"] is None and keys["validation.samples"] == []


@pytest.mark.parametrize("steps", [2, 3, 4, 60])
def test_a_trial_validates_at_most_once_as_the_trainer_counts_its_interval(
    steps: int, tmp_path: Path
) -> None:
    """The trainer validates after every optimizer step that is a multiple of ``validation.interval``
    (trainer.py:247-253): the recipe's interval has exactly one multiple in 1..steps, the step the
    record names, or there is no pass (2 steps: interval 1 would validate after both)."""
    import yaml

    keys = dict(trial_recipe(yaml.safe_load(BASELINE), steps, tmp_path))
    interval = keys["validation.interval"]
    passes = [n for n in range(1, steps + 1) if interval and n % interval == 0]
    assert passes == ([] if steps < 3 else [steps - 1])


@pytest.mark.process
@pytest.mark.timeout(300)
@pytest.mark.parametrize(("steps", "passes"), [(2, []), (3, [2])])
def test_a_short_trial_runs_one_validation_pass_or_none_and_says_so(
    steps: int, passes: list[int], tmp_path: Path, hook_on: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """The fake trainer validates as the real one does (at every multiple of the interval): a
    2-step trial runs no pass (the sweep warns at its start), a 3-step one exactly one, after step 2."""
    config = tmp_path / "plan.yaml"
    config.write_text(BASELINE)
    argv = ["sweep", "--trainer", "ltx2", "--trainer-dir", str(FAKE), "--config", str(config)]
    argv += ["--trainer-python", sys.executable, "--vram-gb", "80", "--steps", str(steps)]
    assert main([*argv, "--max-trials", "1", "--workdir", str(tmp_path / "runs")]) == 0
    (log,) = (tmp_path / "runs").glob("*/trial-0000/stdout.log")
    ran = [int(n) for n in re.findall(r"Validation samples for step (\d+) saved", log.read_text())]
    assert ran == passes
    out = capsys.readouterr()
    warned = f"trials of --steps {steps} run no validation pass" in out.out + out.err
    assert warned is (not passes)
    record = json.loads((log.parent / "adapter.json").read_text())
    assert record["validation_step"] == (passes[0] if passes else None)


def test_opting_out_drops_the_pass_and_the_text_encoder(tmp_path: Path) -> None:
    import yaml

    keys = dict(trial_recipe(yaml.safe_load(BASELINE), 60, tmp_path, validation=False))
    assert keys["validation.interval"] is None
    assert keys["validation.prompts"] == [] and keys["validation.samples"] == []  # config.py:656-675


def _events(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"event": "step", "ste')
    return path


def test_phase_peaks_come_from_the_step_events_around_the_pass_and_the_exit(tmp_path: Path) -> None:
    rows = [{"event": "step", "step": n, "max_memory_reserved_gb": 40.0, "pid": 1} for n in range(1, 5)]
    rows.append({"event": "step", "step": 5, "max_memory_reserved_gb": 46.0, "pid": 1})
    rows.append({"event": "exit", "steps": 5, "max_memory_reserved_gb": 47.5, "pid": 1})
    peaks = read_phase_peaks(_events(tmp_path / "hook.jsonl", rows), validation_step=4)
    assert peaks.peaks_gb == {TRAINING: 40.0, VALIDATION: 46.0, SAVE: 47.5}
    assert peaks.peak_phase == SAVE
    rows[-1]["max_memory_reserved_gb"] = 46.0  # the save added nothing: validation set the peak
    assert read_phase_peaks(_events(tmp_path / "h2", rows), validation_step=4).peak_phase == VALIDATION
    no_pass = read_phase_peaks(_events(tmp_path / "h3", rows), validation_step=None)
    assert no_pass.peaks_gb == {TRAINING: 46.0, SAVE: 46.0} and no_pass.peak_phase == TRAINING
    assert read_phase_peaks(tmp_path / "missing", 4).peak_gb is None


def test_the_step_after_the_pass_is_left_out_of_the_timing() -> None:
    metrics = TrialMetrics(step_times_s=[1.0] * 4 + [30.0, 1.0], step_time_s=1.0)
    out = without_step(metrics, 4)
    assert out.step_times_s == [1.0] * 5 and out.step_time_spread_s == 0.0


def _sweep(tmp_path: Path, *extra: str) -> optuna.Study:
    config = tmp_path / "plan.yaml"
    config.write_text(BASELINE)
    argv = ["sweep", "--trainer", "ltx2", "--trainer-dir", str(FAKE), "--config", str(config)]
    argv += ["--trainer-python", sys.executable, "--vram-gb", "80", "--max-batch-size", "4"]
    argv += ["--steps", "60", "--max-trials", "12", "--workdir", str(tmp_path / "runs"), *extra]
    assert main(argv) == 0
    return optuna.load_study(study_name="ltx2-plan", storage=f"sqlite:///{tmp_path / 'runs' / 'studies.db'}")


@pytest.fixture
def hook_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """The trial-side hook (on by default): its file is where the phase
    peaks come from; the fake writes the hook's events itself, having no torch for it to watch."""
    init = Ltx2Adapter.__init__

    def with_hook(self: Ltx2Adapter, **options: Any) -> None:
        options.setdefault("hook", True)
        init(self, **options)

    monkeypatch.setattr(Ltx2Adapter, "__init__", with_hook)
    for name, value in FAKE_ENV.items():
        monkeypatch.setenv(name, value)


def _winner(study: optuna.Study) -> dict[str, Any]:
    best = study.user_attrs.get("best_trial")
    assert isinstance(best, int)
    return study.trials[best].params


@pytest.mark.process
@pytest.mark.timeout(600)
def test_the_sweep_never_picks_a_config_whose_validation_would_not_fit(tmp_path: Path, hook_on: None) -> None:
    study = _sweep(tmp_path)
    ran = {t.params.get("batch_size") for t in study.trials if t.user_attrs.get("outcome")}
    assert 4 in ran, ran  # batch 4 was tried: it trains within the line
    winner = _winner(study)
    assert _validation_gb(int(winner["batch_size"])) <= LIMIT_GB, winner
    for t in study.trials:
        if t.params.get("batch_size") == 4 and t.user_attrs.get("outcome") == "ok":
            assert t.user_attrs["measured_peak_vram_gb"] == pytest.approx(_validation_gb(4), abs=0.01)
            assert t.user_attrs["fits"] is False
            assert t.user_attrs["peak_phase"] == "validation"  # recorded when judged: the report reads it
    report = (tmp_path / "runs" / "ltx2-plan" / "report.md").read_text()
    assert "## Memory phases" in report
    assert "peak set by validation (training 68.00, validation 78.20" in report
    assert "validation pass (inference steps cut to 2) and the final checkpoint save" in report
    assert "--no-validation-in-trials" not in report
    doc = json.loads((tmp_path / "runs" / "ltx2-plan" / "report.json").read_text())
    assert any("peak set by validation" in line for line in doc["memory_phases"])


@pytest.mark.process
@pytest.mark.timeout(600)
def test_without_validation_in_trials_the_winner_can_fail_its_validation_and_the_report_warns(
    tmp_path: Path, hook_on: None
) -> None:
    """The control: the same sweep with the pass left out picks batch 4, whose validation needs
    78.2 GB of a 72 GB line, and the report says validation was not run."""
    study = _sweep(tmp_path, "--no-validation-in-trials")
    winner = _winner(study)
    assert _validation_gb(int(winner["batch_size"])) > LIMIT_GB, winner
    report = (tmp_path / "runs" / "ltx2-plan" / "report.md").read_text()
    assert "Validation was not run in the trials (--no-validation-in-trials)" in report
    assert "peak set by validation" not in report


def test_no_validation_in_trials_goes_only_with_a_trainer_that_validates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(["sweep", "--cmd", "python t.py", "--no-validation-in-trials", "--workdir", str(tmp_path)]) == 2
    )
    assert "--no-validation-in-trials goes with --trainer ltx2:" in capsys.readouterr().err
    argv = ["sweep", "--trainer", "reference", "--no-validation-in-trials", "--workdir", str(tmp_path)]
    assert main(argv) == 2
    assert "--no-validation-in-trials goes with --trainer ltx2:" in capsys.readouterr().err


def test_samples_per_second_under_validation_leave_the_pass_out_like_the_step_time(tmp_path: Path) -> None:
    """The hook's lines of a real LTX-2 trial (400fd31, CPU, batch 1, 3 steps, validation after
    step 2): step 3 holds the pass (61.8 s). Samples/s is the batch over the step time that
    leaves it out (1 / 16.18 s = 0.062), never over a mean that keeps it (1 / 39.0 s = 0.026, what
    a samples/s taken before the pass was dropped credited). The trainer's own 0.03 steps/s
    (its whole loop, set-up and pass included) stays beside it."""
    rows = [
        {"event": "step", "step": 1, "step_time_s": 57.156, "samples": 2, "counted": True, "pid": 7},
        {"event": "step", "step": 2, "step_time_s": 16.184, "samples": 1, "counted": True, "pid": 7},
        {"event": "step", "step": 3, "step_time_s": 61.832, "samples": 1, "counted": True, "pid": 7},
        {"event": "exit", "steps": 3, "pid": 7, "exception": None},
    ]
    _events(tmp_path / "hook.jsonl", rows)
    record = {"batch_size": 1, "gradient_accumulation_steps": 1, "num_gpus": 1, "effective_batch": 1,
              "steps": 3, "trainer": "ltx2", "validation_step": 2}  # fmt: skip
    (tmp_path / "adapter.json").write_text(json.dumps(record))
    log = (  # its statistics block as printed (trainer.py:324-325, 928), Rich's wide padding cut
        "INFO     📊 Training Statistics:\n          - Total time: 1.6 minutes\n"
        "          - Training speed: 0.03 steps/second\n          - Samples/second: 0.03\n"
        "          - Peak GPU memory: 0.00 GB\n"
    )
    metrics = Ltx2Adapter().read_metrics(tmp_path, log)
    assert metrics.timed_by == "hook" and metrics.step_time_s == pytest.approx(16.184)
    assert metrics.samples_per_s == pytest.approx(1 / 16.184)
    assert metrics.trainer_samples_per_s == pytest.approx(0.03)
    (tmp_path / "adapter.json").write_text(json.dumps({**record, "validation_step": None}))
    kept = Ltx2Adapter().read_metrics(tmp_path, log)  # no pass recorded: every steady step counts
    assert kept.samples_per_s == pytest.approx(1 / ((16.184 + 61.832) / 2))
