"""The ai-toolkit adapter: its bar read, its job file edited, the fake run, and a sweep through it.

Real facts are cited from ostris/ai-toolkit @ 27a03a9 (the mirror's HEAD); the fake lives in
``tests/fakes/ai-toolkit`` (``run.py`` and its model ``toolkit/fake_model.py``).
"""

from __future__ import annotations

import importlib.util
import io
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from autotune.core.outcome import Outcome, explain
from autotune.errors import CandidateRefused, ConfigError, UsageError
from autotune.execution.runner import RunLimits, run_trial
from autotune.trainers import get_adapter
from autotune.trainers.aitoolkit.adapter import AiToolkitAdapter
from autotune.trainers.base import Baseline, Winner
from autotune.trainers.kit.readers.aitklog import read_aitk_output
from tests.helpers import FAKES

FAKE = FAKES / "ai-toolkit"

# The shape of config/examples/train_lora_wan21_1b_24gb.yaml and train_lora_flux_24gb.yaml, with two
# datasets: images at three sizes and 40-frame clips at 632 px (the larger bucket: 632^2 x 40).
JOB = """\
---
job: extension
config:
  # this name will be the folder and filename name
  name: "my_first_lora_v1"
  process:
    - type: 'sd_trainer'
      # root folder to save training sessions/samples/weights
      training_folder: "output"
      device: cuda:0
      network:
        type: "lora"
        linear: 32
        linear_alpha: 32
      save:
        dtype: float16 # precision to save
        save_every: 250 # save every this many steps
        max_step_saves_to_keep: 4 # how many intermittent saves to keep
      datasets:
        # datasets are a folder of images. captions need to be txt files with the same name as the image
        - folder_path: "/data/images"
          caption_ext: "txt"
          resolution: [ 512, 768, 1024 ]  # enjoys multiple resolutions
        - folder_path: "/data/clips"
          caption_ext: "txt"
          num_frames: 40
          resolution: [ 632 ] # will be around 480p
      train:
        batch_size: 1
        steps: 2000  # total number of steps to train 500 - 4000 is a good range
        gradient_accumulation: 1
        train_unet: true
        gradient_checkpointing: true  # need the on unless you have a ton of vram
        noise_scheduler: "flowmatch" # for training only
        optimizer: "adamw8bit"
        lr: 1e-4
        dtype: bf16
      model:
        # huggingface model name or path
        name_or_path: "ai-toolkit/Wan2.2-T2V-A14B-Diffusers-bf16"
        arch: 'wan22_14b'
        quantize: true
        # This will pull and use a custom Accuracy Recovery Adapter to train at 4bit
        qtype: "uint4|ostris/accuracy_recovery_adapters/wan22_14b_t2i_torchao_uint4.safetensors"
        low_vram: true
      sample:
        sampler: "flowmatch"
        sample_every: 250 # sample every this many steps
        prompts:
          - "woman with red hair, playing chess at the park"
meta:
  name: "[name]"
  version: '1.0'
"""


def _adapter(**options: Any) -> AiToolkitAdapter:
    adapter = get_adapter("ai-toolkit", trainer_dir=FAKE, launcher=[sys.executable], **options)
    assert isinstance(adapter, AiToolkitAdapter)
    return adapter


def _baseline(tmp: Path, text: str = JOB) -> tuple[AiToolkitAdapter, Baseline]:
    (tmp / "job.yaml").write_text(text)
    adapter = _adapter()
    return adapter, adapter.load_baseline(tmp / "job.yaml")


def _changed(before: str, after: str) -> set[tuple[str, str]]:
    """(old line, new line) pairs of a same-length edit, and added lines as ("", new)."""
    import difflib

    out: set[tuple[str, str]] = set()
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(
        a=before.splitlines(), b=after.splitlines()
    ).get_opcodes():
        if tag == "replace":
            out |= set(zip(before.splitlines()[i1:i2], after.splitlines()[j1:j2], strict=False))
        elif tag == "insert":
            out |= {("", ln) for ln in after.splitlines()[j1:j2]}
        elif tag == "delete":
            out |= {(ln, "") for ln in before.splitlines()[i1:i2]}
    return out


# --- the bar: lines as BaseSDTrainProcess.py:2484-2490 and :2693-2698 draw them ---------------------


def _bar(desc: str, n: int, total: int, rate: str, loss: float = 0.1234) -> str:
    # tqdm's default layout; postfix from set_postfix_str(f"lr: {lr:.1e} loss: {loss:.3e}")
    return f"\r{desc}:  {100 * n // total:2d}%|#         | {n}/{total} [00:12<00:18, {rate}, lr: 1.0e-04 loss: {loss:.3e}]"


BAR_CASES = [
    # (name, text, job name, step times, losses)
    (
        "s/it",
        "".join(_bar("my_lora_v1", n, 6, " 3.00s/it", 0.1 + n / 100) for n in range(1, 6)),
        "my_lora_v1",
        [3.0] * 5,
        [0.11, 0.12, 0.13, 0.14, 0.15],
    ),
    (
        "it/s",
        "".join(_bar("fast", n, 4, " 2.00it/s") for n in (1, 2, 3)),
        "fast",
        [0.5, 0.5, 0.5],
        [0.1234] * 3,
    ),
    (
        "a job named like a sampling bar is still the training bar",
        "".join(_bar("sample_test_v2", n, 5, " 4.00s/it") for n in (1, 2, 3, 4)),
        "sample_test_v2",
        [4.0] * 4,
        [0.1234] * 4,
    ),
    (
        "a loading bar beside it is not read",
        "Loading checkpoint shards: 100%|##########| 3/3 [00:09<00:00,  3.10s/it]\n"
        + "".join(_bar("my_lora_v1", n, 6, " 2.00s/it") for n in (1, 2, 3)),
        "my_lora_v1",
        [2.0] * 3,
        [0.1234] * 3,
    ),
    (
        "no job name given: the training bar by its place",
        "".join(_bar("lora", n, 6, " 2.00s/it") for n in (1, 2, 3)),
        None,
        [2.0] * 3,
        [0.1234] * 3,
    ),
]


@pytest.mark.parametrize(("name", "text", "job", "times", "losses"), BAR_CASES, ids=[c[0] for c in BAR_CASES])
def test_the_bar_gives_step_times_and_losses(
    name: str, text: str, job: str | None, times: list[float], losses: list[float]
) -> None:
    metrics = read_aitk_output(text, job)
    assert metrics is not None
    assert metrics.step_times_s == pytest.approx(times)
    assert metrics.losses == pytest.approx(losses)


@pytest.mark.parametrize("text", ["", "Running 1 job\n", "\x00\xff" * 40, _bar("x", 1, 6, " 3.00s/it")[:30]])
def test_no_bar_reads_as_nothing(text: str) -> None:
    assert read_aitk_output(text, "x") is None


def test_the_fakes_bar_is_read_as_the_real_one() -> None:
    """The fake draws the bar the reader expects (it is the fake's text, so both follow the citation)."""
    spec = importlib.util.spec_from_file_location("fake_aitk_run", FAKE / "run.py")
    assert spec and spec.loader
    sys.path.insert(0, str(FAKE))
    try:
        run = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(run)
    finally:
        sys.path.remove(str(FAKE))
    text = "".join(
        run.bar_line("job", n, 5, 3.0 * n, 3.0, "lr: 1.0e-04 loss: 1.000e-01") for n in range(1, 5)
    )
    metrics = read_aitk_output(text, "job")
    assert metrics is not None and metrics.step_times_s == pytest.approx([3.0] * 4)


# --- the job file -------------------------------------------------------------------------------------


def test_baseline_params_read_the_trainers_defaults(tmp_path: Path) -> None:
    adapter, baseline = _baseline(tmp_path)
    assert adapter.baseline_params(baseline) == {
        "qtype": "uint4",  # the accuracy recovery adapter after | is not the qtype (config_modules.py:742)
        "low_vram": True,
        "layer_offloading_transformer_percent": 0.0,  # layer_offloading defaults to off (:713)
        "gradient_checkpointing": True,
        "optimizer": "adamw8bit",
        "batch_size": 1,
        "gradient_accumulation_steps": 1,
    }
    bare = JOB.replace("        quantize: true\n", "").replace(
        "        gradient_checkpointing: true", "        x: 1"
    )
    adapter, baseline = _baseline(tmp_path, bare)
    params = adapter.baseline_params(baseline)
    assert params["qtype"] == "none" and params["gradient_checkpointing"] is True  # :685, :413


def test_a_trial_is_the_short_recipe_on_the_largest_bucket(tmp_path: Path) -> None:
    adapter, baseline = _baseline(tmp_path)
    trial = tmp_path / "trial-0003"
    spec = adapter.render(
        baseline,
        {"batch_size": 2, "layer_offloading_transformer_percent": 0.75},
        gradient_accumulation_steps=2,
        steps=9,
        trial_dir=trial,
    )
    assert spec.argv == (sys.executable, "run.py", str(trial.resolve() / "config.yaml"))
    assert spec.cwd == FAKE.resolve() and spec.env["AUTOTUNE_METRICS_FILE"].startswith(str(trial.resolve()))
    text = (trial / "config.yaml").read_text()
    data = adapter.load_baseline(trial / "config.yaml").data["config"]["process"][0]
    assert data["train"]["steps"] == 9 and data["train"]["disable_sampling"] is True
    assert data["save"]["save_every"] == 250  # no save inside 9 steps; the one at the end stays (:2819)
    assert data["training_folder"] == str(trial.resolve() / "output")
    assert data["datasets"] == [
        {"folder_path": "/data/clips", "caption_ext": "txt", "num_frames": 40, "resolution": [632]}
    ]
    assert data["train"]["gradient_accumulation"] == 2
    assert data["model"]["layer_offloading"] is True
    assert data["model"]["layer_offloading_transformer_percent"] == 0.75
    assert "        gradient_checkpointing: true  # need the on unless you have a ton of vram\n" in text
    assert "        # This will pull and use a custom Accuracy Recovery Adapter to train at 4bit\n" in text
    record = json.loads((trial / "adapter.json").read_text())
    assert record["effective_batch"] == 4 and record["job_name"] == "my_first_lora_v1"
    assert (
        record["data_bucket"].startswith("resolution 632, 40 frames")
        and "/data/clips" in record["data_bucket"]
    )
    assert (tmp_path / "job.yaml").read_text() == JOB
    adapter.render(baseline, {}, gradient_accumulation_steps=1, steps=600, trial_dir=tmp_path / "long")
    long = adapter.load_baseline(tmp_path / "long" / "config.yaml").data["config"]["process"][0]
    assert long["save"]["save_every"] == 600  # steps 250 and 500 would save (:2554, :2706-2716)


def test_the_winner_changes_only_its_knobs_and_keeps_every_comment(tmp_path: Path) -> None:
    adapter, baseline = _baseline(tmp_path)
    same = {k: v for k, v in adapter.baseline_params(baseline).items() if k != "gradient_accumulation_steps"}
    assert adapter.final_config(baseline, same, gradient_accumulation_steps=1) == JOB
    text = adapter.final_config(
        baseline,
        {**same, "qtype": "none", "batch_size": 3, "layer_offloading_transformer_percent": 0.5},
        gradient_accumulation_steps=1,
    )
    assert _changed(JOB, text) == {
        ("        batch_size: 1", "        batch_size: 3"),
        ("        quantize: true", "        quantize: false"),
        ("", "        quantize_te: true"),  # it followed quantize (config_modules.py:686): kept as it was
        ("", "        layer_offloading: true"),
        ("", "        layer_offloading_transformer_percent: 0.5"),
    }
    # Back to uint4: the accuracy recovery adapter the baseline named stays with its qtype.
    assert adapter.final_config(baseline, {**same, "qtype": "uint4"}, gradient_accumulation_steps=1) == JOB
    other = adapter.final_config(baseline, {**same, "qtype": "uint3"}, gradient_accumulation_steps=1)
    assert _changed(JOB, other) == {
        (
            '        qtype: "uint4|ostris/accuracy_recovery_adapters/wan22_14b_t2i_torchao_uint4.safetensors"',
            '        qtype: "uint3"',
        ),
    }
    command = adapter.training_command(tmp_path / "best.yaml", Winner(baseline=baseline))
    assert command == f"cd {FAKE.resolve()} && {sys.executable} run.py {(tmp_path / 'best.yaml').resolve()}"


def test_no_offload_turns_the_share_to_zero_and_keeps_the_rest(tmp_path: Path) -> None:
    text = JOB.replace("        low_vram: true\n", "        low_vram: true\n        layer_offloading: true\n")
    adapter, baseline = _baseline(tmp_path, text)
    assert adapter.baseline_params(baseline)["layer_offloading_transformer_percent"] == 1.0  # :730
    out = adapter.final_config(
        baseline, {"layer_offloading_transformer_percent": 0.0}, gradient_accumulation_steps=1
    )
    assert _changed(text, out) == {("", "        layer_offloading_transformer_percent: 0.0")}


def test_validation_is_off_in_trials(tmp_path: Path) -> None:
    text = JOB.replace(
        "        dtype: bf16\n",
        "        dtype: bf16\n        validation_config:\n          resolution: 512\n",
    )
    adapter, baseline = _baseline(tmp_path, text)
    adapter.render(baseline, {}, gradient_accumulation_steps=1, steps=3, trial_dir=tmp_path / "t")
    train = adapter.load_baseline(tmp_path / "t" / "config.yaml").data["config"]["process"][0]["train"]
    assert train["validation_config"] is None  # else it validates at the first step (:2657-2665)


@pytest.mark.parametrize(
    ("old", "new", "error", "match"),
    [
        (
            "        gradient_accumulation: 1\n",
            "        gradient_accumulation_steps: 4\n",
            ConfigError,
            "gradient_accumulation",
        ),
        ("  process:\n", "  processes:\n", ConfigError, "not an ai-toolkit job file"),
        (
            '          caption_ext: "txt"\n          num_frames',
            "          batch_size: 2\n          num_frames",
            ConfigError,
            "own batch_size",
        ),
        (
            "          resolution: [ 632 ] # will be around 480p\n",
            "          resolution: big\n",
            ConfigError,
            "datasets\\[1\\]",
        ),
    ],
)
def test_bad_job_files_are_named(
    tmp_path: Path, old: str, new: str, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        adapter, baseline = _baseline(tmp_path, JOB.replace(old, new))
        adapter.render(baseline, {}, gradient_accumulation_steps=1, steps=3, trial_dir=tmp_path / "t")


def test_an_optimizer_or_qtype_of_the_users_own_is_not_swept(tmp_path: Path) -> None:
    adapter, baseline = _baseline(
        tmp_path, JOB.replace('"adamw8bit"', '"prodigy"').replace('"uint4|', '"qint8|')
    )
    names = [
        "qtype",
        "layer_offloading_transformer_percent",
        "low_vram",
        "gradient_checkpointing",
        "optimizer",
        "batch_size",
    ]
    assert adapter.knobs_in_play(baseline, names) == [n for n in names if n not in ("qtype", "optimizer")]


def test_the_checkout_is_found_or_asked_for(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not an ai-toolkit checkout"):
        get_adapter("ai-toolkit", trainer_dir=tmp_path).render(
            _baseline(tmp_path)[1], {}, gradient_accumulation_steps=1, steps=3, trial_dir=tmp_path / "t"
        )
    found = get_adapter("ai-toolkit", launcher=[sys.executable])
    inside = Baseline(trainer="ai-toolkit", text=JOB, data={}, path=FAKE / "config" / "job.yaml")
    assert found.cwd(inside) == FAKE.resolve()  # type: ignore[attr-defined]


# --- the fake, run ------------------------------------------------------------------------------------


def _run_fake(config: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_")}
    return subprocess.run(
        [sys.executable, "run.py", str(config)],
        cwd=FAKE,
        env={**full, **(env or {})},
        capture_output=True,
        text=True,
    )


@pytest.mark.process
def test_the_fake_refuses_what_the_real_one_refuses_and_ignores_unknown_keys(tmp_path: Path) -> None:
    job = JOB.replace('training_folder: "output"', f'training_folder: "{tmp_path / "output"}"')
    (tmp_path / "ok.yaml").write_text(job.replace("        train_unet: true\n", "        no_such_key: 3\n"))
    assert _run_fake(tmp_path / "ok.yaml").returncode == 0  # kwargs.get: unknown keys are ignored
    (tmp_path / "bad.yaml").write_text(job.replace("        name_or_path:", "        path_or_name:"))
    done = _run_fake(tmp_path / "bad.yaml")
    assert done.returncode == 1 and "Error running job: name_or_path must be specified" in done.stdout


@pytest.mark.process
def test_the_fake_trains_on_the_trials_bucket_and_oom_skips_like_the_real_one(tmp_path: Path) -> None:
    adapter, baseline = _baseline(tmp_path)
    spec = adapter.render(
        baseline, {"qtype": "none"}, gradient_accumulation_steps=1, steps=4, trial_dir=tmp_path / "t"
    )
    done = _run_fake(tmp_path / "t" / "config.yaml", {"AUTOTUNE_EMULATED_VRAM_GB": "200"})
    assert done.returncode == 0, done.stderr
    trained = json.loads(
        (tmp_path / "t" / "output" / "my_first_lora_v1" / "fake_trained_on.json").read_text()
    )
    assert trained["datasets"] == [{"folder_path": "/data/clips", "resolution": 632, "num_frames": 40}]
    assert "Skipping first sample due to config setting" in done.stdout
    assert done.stdout.count("Saved checkpoint to") == 1
    assert spec.argv[1:] == ("run.py", str((tmp_path / "t" / "config.yaml").resolve()))
    small = _run_fake(tmp_path / "t" / "config.yaml", {"AUTOTUNE_EMULATED_VRAM_GB": "40"})
    assert small.returncode == 1
    assert [ln for ln in small.stdout.splitlines() if ln.startswith("# OOM")] == [
        f"# OOM during training step, skipping batch {n}/3 #" for n in (1, 2, 3)
    ]
    assert "RuntimeError: OOM during training step 3 times in a row, aborting training" in small.stderr


@pytest.mark.process
def test_a_trial_that_skips_an_oom_batch_and_trains_on_is_ended_early_and_is_oom(tmp_path: Path) -> None:
    """ai-toolkit prints its banner and goes on (BaseSDTrainProcess.py:2633-2645): the runner ends the
    trial ``oom_grace_s`` after it, and explain() calls it oom."""
    adapter, baseline = _baseline(tmp_path)
    spec = adapter.render(baseline, {}, gradient_accumulation_steps=1, steps=200, trial_dir=tmp_path / "t")
    spec = type(spec)(
        argv=spec.argv,
        cwd=spec.cwd,
        env={**spec.env, "FAKE_AITK_OOM_AT_STEP": "1", "FAKE_AITK_STEP_SLEEP_S": "0.1"},
    )
    limits = RunLimits(wall_timeout_s=60, stall_timeout_s=30, grace_s=1.0, oom_grace_s=0.5)
    started = time.monotonic()
    result = run_trial(spec, tmp_path / "t", limits)
    assert time.monotonic() - started < 10  # 200 steps of 0.1 s would take 20 s
    assert result.oom_seen and result.end_reason == "oom"
    output = result.stdout_path.read_text() + result.stderr_path.read_text()
    metrics = adapter.read_metrics(tmp_path / "t", output)
    assert metrics.step_times_s  # it trained on after the banner
    outcome = explain(
        result.returncode, result.signal, timed_out=result.timed_out, stalled=result.stalled,
        interrupted=result.interrupted, output=output, metrics=metrics,
    ).outcome  # fmt: skip
    assert outcome is Outcome.OOM


# --- the sweep ----------------------------------------------------------------------------------------

CARD_GB = 24.0
LADDER = (1, 2, 4, 8)
# The knobs the sweep test turns (a smaller grid than the shipped file's, to stay quick): precision,
# the offload share, checkpointing and the batch; low_vram stays as the job has it and its optimizer
# (prodigy) is its own, so not swept.
TEST_KNOBS = """\
knobs:
  - name: qtype
    values: [uint4, qfloat8, none]
  - name: layer_offloading_transformer_percent
    type: fraction
    grid: [1.0, 0.75, 0.5, 0.25, 0.0]
    step: 0.25
  - name: gradient_checkpointing
    values: [true, false]
  - name: batch_size
    type: int
fidelity: {qtype: none}
"""


def _fake_model() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fake_aitk_model", FAKE / "toolkit" / "fake_model.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _expected_winner(low_vram: bool, headroom: float) -> tuple[dict[str, Any], float, float]:
    """The fastest fitting config of the fake's model over the test's grid, and the runner-up's speed."""
    model = _fake_model()
    scored = []
    for qtype, percent, ckpt, batch in itertools.product(
        ["uint4", "qfloat8", "none"], [1.0, 0.75, 0.5, 0.25, 0.0], [True, False], LADDER
    ):
        m = model.job_model(
            qtype=qtype, percent=percent, low_vram=low_vram, checkpointing=ckpt, optimizer="adamw",
            batch=batch, resolution=1024, frames=1,
        )  # fmt: skip
        if m["peak_gb"] <= CARD_GB * (1 - headroom):
            params = {"qtype": qtype, "layer_offloading_transformer_percent": percent,
                      "gradient_checkpointing": ckpt, "batch_size": batch}  # fmt: skip
            scored.append((batch / m["step_s"], params))
    scored.sort(key=lambda s: -s[0])
    return scored[0][1], scored[0][0], scored[1][0]


@pytest.mark.process
@pytest.mark.untimed  # the fake's step times and peaks are modelled: load moves no figure
def test_a_sweep_through_the_fake_finds_the_offload_sweet_spot(tmp_path: Path) -> None:
    from autotune.sweep.api import run_sweep
    from autotune.sweep.options import SweepOptions

    job = (
        JOB.replace('"adamw8bit"', '"prodigy"')
        .replace("        low_vram: true\n", "        low_vram: false\n")
        .replace(
            "          num_frames: 40\n          resolution: [ 632 ] # will be around 480p\n",
            "          resolution: [ 256 ]\n",
        )
    )
    (tmp_path / "job.yaml").write_text(job)
    (tmp_path / "knobs.yaml").write_text(TEST_KNOBS)
    expected, best_speed, runner_up = _expected_winner(low_vram=False, headroom=0.1)
    assert expected["layer_offloading_transformer_percent"] == 0.75  # the sweet spot: 1.0 and 0.5 are slower
    assert runner_up < 0.97 * best_speed  # a clear winner, not a near-tie
    opts = SweepOptions(
        trainer="ai-toolkit", config=tmp_path / "job.yaml", workdir=tmp_path / "runs", vram_gb=CARD_GB,
        steps=6, batch_sizes=LADDER, knob_file=tmp_path / "knobs.yaml",
        trainer_options={"trainer_dir": FAKE, "launcher": [sys.executable]},
    )  # fmt: skip
    out = io.StringIO()
    result = run_sweep(opts, nvml=False, stream=out, tty=False, claims=False)
    assert result.best_params == expected, out.getvalue()[-3000:]
    assert result.best_samples_per_s == pytest.approx(best_speed, rel=0.02)
    report = next(p for p in result.reports if p.suffix == ".json")
    assert "resolution 1024, 1 frame" in report.read_text()  # the report names the bucket trained on


def test_qfloat8_under_layer_offloading_is_not_labelled_with_a_quantizer_that_did_not_run(
    tmp_path: Path,
) -> None:
    """With layer offloading on, ai-toolkit swaps qfloat8 for torchao's float8
    (config_modules.py:713-717): such a candidate is refused before it runs, and a baseline that
    already offloads reads as the float8 it runs (not a qtype the knob file sweeps)."""
    adapter, baseline = _baseline(tmp_path)
    kwargs: dict[str, Any] = {"gradient_accumulation_steps": 1, "steps": 4}
    with pytest.raises(CandidateRefused, match=r"torchao's float8.*config_modules\.py:713-717"):
        adapter.render(baseline, {"qtype": "qfloat8", "layer_offloading_transformer_percent": 0.5},
                       trial_dir=tmp_path / "a", **kwargs)  # fmt: skip
    adapter.render(baseline, {"qtype": "qfloat8"}, trial_dir=tmp_path / "b", **kwargs)  # no offload: it runs
    adapter.render(
        baseline, {"layer_offloading_transformer_percent": 0.5}, trial_dir=tmp_path / "c", **kwargs
    )
    offloading = JOB.replace(
        "        low_vram: true\n", "        low_vram: true\n        layer_offloading: true\n"
    )
    offloading = offloading.replace(
        'qtype: "uint4|ostris/accuracy_recovery_adapters/wan22_14b_t2i_torchao_uint4.safetensors"',
        'qtype: "qfloat8"',
    )
    adapter, baseline = _baseline(tmp_path, offloading)
    assert adapter.baseline_params(baseline)["qtype"] == "float8"
    assert "qtype" not in adapter.knobs_in_play(baseline, ["qtype", "low_vram"])


def test_the_offload_fraction_is_not_swept_on_the_legacy_model_path(tmp_path: Path) -> None:
    """A Flux job by ``is_flux: true`` (config/examples/train_lora_flux_24gb.yaml) loads through the
    legacy StableDiffusion class (toolkit/util/get_model.py:44-50), which never reads the fraction."""
    names = ["qtype", "layer_offloading_transformer_percent", "low_vram"]
    for model in ("        is_flux: true\n", "        arch: 'sdxl'\n", "        arch: 'flex1'\n"):
        adapter, baseline = _baseline(tmp_path, JOB.replace("        arch: 'wan22_14b'\n", model))
        assert adapter.knobs_in_play(baseline, names) == ["qtype", "low_vram"], model
        with pytest.raises(CandidateRefused, match="legacy StableDiffusion"):
            adapter.render(baseline, {"layer_offloading_transformer_percent": 1.0},
                           gradient_accumulation_steps=1, steps=4, trial_dir=tmp_path / "t")  # fmt: skip
    adapter, baseline = _baseline(tmp_path)
    assert adapter.knobs_in_play(baseline, names) == names  # wan22_14b reads it (wan22_14b_model.py)
