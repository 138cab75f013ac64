"""The hook's per-optimizer-step times decide a trial's speed; the trainer's own figures are kept
beside ours and shown ("trainer / ours"), their difference explained.

On the shared fixture logs (the real LTX-2 trainer's Step-line format at GA 2 and 4) with a hook
file beside them, and end to end: a sweep of the fake LTX-2 trainer that really takes 0.1 s per
optimizer step at GA 4, where its Time/Step (one micro-step x GA, 2 decimals) reads ~25 % slow."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import optuna
import pytest

from autotune.cli import main
from autotune.core.metrics import Readings, TrialMetrics
from autotune.core.verdict import combine
from autotune.trainers import get_adapter
from autotune.trainers.kit.readers.ltx2log import parse_ltx2_output
from tests.helpers import FAKES

LOGS = Path(__file__).resolve().parents[2] / ".." / "shared" / "fixtures" / "ltx2" / "logs"
FAKE = FAKES / "ltx2-trainer"

CONFIG = """\
model:
  model_path: m.safetensors
  training_mode: lora
optimization:
  steps: 2000
  batch_size: {batch}
  gradient_accumulation_steps: {ga}
  optimizer_type: adamw
  enable_gradient_checkpointing: true
acceleration:
  quantization: null
output_dir: outputs/x
"""


def _fixture(name: str) -> str:
    path = LOGS / name
    if not path.is_file():
        pytest.skip(f"shared fixture {path} not here")
    return path.read_text()


def _hook_file(path: Path, step_s: float, steps: int, samples: list[int] | None = None) -> None:
    """The hook's lines for ``steps`` optimizer steps of ``step_s`` each (the first three slower),
    each with its loader count from ``samples`` (none by default)."""
    counts: list[int | None] = list(samples) if samples is not None else [None] * steps
    lines = [
        {"event": "step", "step": n, "step_time_s": step_s * (3.0 if n <= 3 else 1.0), "samples": counts[n - 1],
         "max_memory_reserved_gb": 30.0, "pid": 11}
        for n in range(1, steps + 1)
    ]  # fmt: skip
    lines.append({"event": "exit", "steps": steps, "max_memory_reserved_gb": 30.5, "pid": 11})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


@pytest.mark.parametrize(
    ("log", "batch", "ga"),
    [("steps60_ga2_batch1_wrapped80.log", 1, 2), ("steps60_ga4_batch2.log", 2, 4)],
)
def test_on_the_real_log_format_the_hook_decides_and_the_trainer_is_kept(
    tmp_path: Path, log: str, batch: int, ga: int
) -> None:
    text = _fixture(log)
    adapter = get_adapter("ltx2", trainer_dir=FAKE, launcher=[sys.executable])
    base = adapter.baseline_from_text(CONFIG.format(batch=batch, ga=ga))
    trial = tmp_path / "t"
    adapter.render(base, {}, gradient_accumulation_steps=ga, steps=60, trial_dir=trial)
    truth_step = 0.5125  # the optimizer step's real (synchronized) time
    _hook_file(trial / "hook.jsonl", truth_step, 60)
    metrics = adapter.read_metrics(trial, text)
    truth = batch * ga / truth_step
    assert metrics.timed_by == "hook"
    assert metrics.samples_per_s == pytest.approx(truth, rel=0.02)
    # The trainer's own figure from its Step lines, recorded beside (and not what ranks the trial).
    own = parse_ltx2_output(text).steady_step_time()[0]
    assert own is not None and metrics.trainer_step_time_s == pytest.approx(own)
    assert metrics.trainer_samples_per_s == pytest.approx(batch * ga / own)
    assert metrics.trainer_peak_vram_gb is not None  # its statistics block, kept too
    # The hook off (no file): the trainer's figure is all there is, and it decides.
    (trial / "hook.jsonl").unlink()
    alone = adapter.read_metrics(trial, text)
    assert alone.timed_by == "trainer" and alone.samples_per_s == pytest.approx(batch * ga / own)


@pytest.mark.parametrize(
    ("hook", "trainer", "batch", "count_right", "sps", "by", "trainer_sps"),
    [
        # the hook timed: its time decides, with the batch credited; the trainer's kept beside
        (TrialMetrics(step_time_s=0.1), TrialMetrics(step_time_s=0.13), 4, False, 40.0, "hook", 4 / 0.13),
        # a trainer's stated samples/s (a metrics file, DeepSpeed's) is its figure, not the verdict
        (TrialMetrics(step_time_s=0.1), TrialMetrics(samples_per_s=1e12), 4, False, 40.0, "hook", 1e12),
        # the loader count only where it is right (else the batch the trial was rendered with)
        (TrialMetrics(step_time_s=0.1, samples_per_step=3.0), TrialMetrics(), 4, True, 30.0, "hook", None),
        (TrialMetrics(step_time_s=0.1, samples_per_step=3.0), TrialMetrics(), 4, False, 40.0, "hook", None),
        # the hook did not time: the trainer's own decides
        (TrialMetrics(), TrialMetrics(step_time_s=0.5), 4, False, 8.0, "trainer", 8.0),
        (TrialMetrics(), TrialMetrics(samples_per_s=7.0), 4, False, 7.0, "trainer", 7.0),
        (TrialMetrics(), TrialMetrics(), 4, False, None, None, None),
    ],
)
def test_combine_one_order_for_every_trainer(
    hook: TrialMetrics,
    trainer: TrialMetrics,
    batch: int,
    count_right: bool,
    sps: float | None,
    by: str | None,
    trainer_sps: float | None,
) -> None:
    m = combine(Readings(hook=hook, trainer=trainer, effective_batch=batch, loader_count_right=count_right))
    assert m.samples_per_s == (pytest.approx(sps) if sps is not None else None)
    assert m.timed_by == by
    assert m.trainer_samples_per_s == (pytest.approx(trainer_sps) if trainer_sps is not None else None)


@pytest.mark.parametrize(
    "name", ["ltx2", "reference", "sana", "command", "musubi", "diffusion-pipe", "ai-toolkit"]
)
def test_every_adapter_with_a_hook_lets_the_hook_decide(tmp_path: Path, name: str) -> None:
    """The same rule through each adapter's own reader: a hook file beside a trainer's slower
    figure (its metrics file says 0.13 s a step), the hook's 0.1 s decides."""
    from tests.trainers.test_trainer_contract import CASES

    case = next(c for c in CASES if c.name == name)
    adapter, baseline = case.make(tmp_path)
    trial = tmp_path / "t"
    adapter.render(baseline, case.params, gradient_accumulation_steps=2, steps=40, trial_dir=trial)
    (trial / "trainer-metrics.json").write_text(json.dumps({"step_time_s": 0.13}))
    _hook_file(trial / "hook.jsonl", 0.1, 40)
    metrics = adapter.read_metrics(trial, "")
    record = json.loads((trial / "adapter.json").read_text())
    assert metrics.timed_by == "hook" and metrics.step_time_s == pytest.approx(0.1)
    assert metrics.trainer_step_time_s == pytest.approx(0.13)
    assert metrics.samples_per_s == pytest.approx(record["effective_batch"] / 0.1)


@pytest.mark.parametrize(
    "name", ["ltx2", "reference", "sana", "command", "musubi", "diffusion-pipe", "ai-toolkit"]
)
def test_a_look_ahead_loader_count_is_credited_only_by_the_command_trainer(tmp_path: Path, name: str) -> None:
    """Each adapter's reader on the counts accelerate's one-batch look-ahead gives a trial stopped
    mid-epoch (accelerate/data_loader.py:586, 598: a batch taken ahead on step 1, never trained):
    the drop_last trainers are credited the batch x GA they consume, the ``--cmd`` trainer (which
    may name no batch) what its loaders yielded over the run."""
    from tests.trainers.test_trainer_contract import CASES

    case = next(c for c in CASES if c.name == name)
    adapter, baseline = case.make(tmp_path)
    trial = tmp_path / "t"
    adapter.render(baseline, case.params, gradient_accumulation_steps=2, steps=40, trial_dir=trial)
    effective = json.loads((trial / "adapter.json").read_text())["effective_batch"]
    batch = max(1, effective // 2)
    _hook_file(trial / "hook.jsonl", 0.1, 40, samples=[effective + batch] + [effective] * 39)
    metrics = adapter.read_metrics(trial, "")
    counted = (effective + batch / 40) / 0.1
    want = counted if name == "command" else effective / 0.1
    assert metrics.timed_by == "hook" and metrics.samples_per_s == pytest.approx(want), name


@pytest.mark.process
@pytest.mark.timeout(600)
def test_done_when_a_ga4_ltx2_trainer_with_01s_steps_is_ranked_by_its_true_rate(tmp_path: Path) -> None:
    """The fake LTX-2 trainer really takes 0.1 s per optimizer step at GA 4 (sleeping; its optimizer
    micro-step is the longest, as a real one is): Time/Step reads ~0.13 s. Every trial's samples/s
    is within 5 % of the true optimizer-step rate, and the report shows the trainer's figure beside."""
    config = tmp_path / "plan.yaml"
    config.write_text(CONFIG.format(batch=1, ga=4))
    argv = ["sweep", "--trainer", "ltx2", "--trainer-dir", str(FAKE), "--config", str(config)]
    argv += ["--trainer-python", sys.executable, "--vram-gb", "80", "--batch-sizes", "1,2"]
    argv += ["--steps", "30", "--max-trials", "4", "--workdir", str(tmp_path / "runs")]
    env = {"FAKE_LTX2_REAL_STEP_S": "0.1", "FAKE_LTX2_PEAK_GB": "20"}
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        assert main(argv) == 0
    study = optuna.load_study(study_name="ltx2-plan", storage=f"sqlite:///{tmp_path / 'runs' / 'studies.db'}")
    ok = [t for t in study.trials if t.user_attrs.get("outcome") == "ok"]
    assert len(ok) >= 2
    for t in ok:
        truth_file = Path(t.user_attrs["trial_dir"]) / "output" / "fake_truth.json"
        steps = json.loads(truth_file.read_text())["optimizer_step_s"]
        true_rate = t.user_attrs["effective_batch"] / statistics.fmean(steps[1:])
        assert t.user_attrs["samples_per_s"] == pytest.approx(true_rate, rel=0.05), t.number
        assert t.user_attrs["timed_by"] == "hook"
        # The trainer's own figure, one micro-step x GA to 2 decimals, reads well under it.
        assert t.user_attrs["trainer_samples_per_s"] < 0.9 * t.user_attrs["samples_per_s"]
    report = (tmp_path / "runs" / "ltx2-plan" / "report.md").read_text()
    assert "trainer / ours samples/s" in report
    first = ok[0].user_attrs
    assert f"{first['trainer_samples_per_s']:.3g} / {first['samples_per_s']:.3g}" in report
    assert "The trainer's own samples/s differs from ours by more than 10 %" in report
    assert "GA-copied lines" in report
