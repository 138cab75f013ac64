"""One contract, every adapter: what the sweep relies on, whichever trainer it drives."""

from __future__ import annotations

import copy
import hashlib
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from autotune.config.yamlconf import load_yaml_file
from autotune.errors import ConfigError, UnknownTrainerError, UsageError
from autotune.gpu.tiers import classify
from autotune.trainers import Baseline, TrainerAdapter, adapter_class, adapter_names, get_adapter
from autotune.trainers.kit.readers.metricsfile import METRICS_ENV
from tests.conftest import FAKES

LTX2_LIKE = """\
# A small LTX-2-shaped config (comments must survive).
model:
  model_path: "m.safetensors"
  training_mode: "lora"
optimization:
  steps: 2000
  batch_size: 1
  gradient_accumulation_steps: 1
  optimizer_type: "adamw8bit"  # 8-bit AdamW
  enable_gradient_checkpointing: true
acceleration:
  quantization: "int8-quanto"
data:
  preprocessed_data_root: "DATA"
validation:
  samples:
    - prompt: "a cat"
  interval: 100
  skip_initial_validation: false
checkpoints:
  interval: 250
hub:
  push_to_hub: false
wandb:
  enabled: false
output_dir: "outputs/x"
"""
REFERENCE_LIKE = LTX2_LIKE + "reference:\n  hidden_size: 64\n  device: cpu\n"
COMMAND_CONFIG = """\
# my own trainer's config
train:
  batch: 1
  accum: 1
  optimizer: adamw8bit
  quant: int8-quanto
  checkpointing: true
  max_steps: 1000
"""
COMMAND_KEYS = {
    "batch_size": "train.batch",
    "gradient_accumulation_steps": "train.accum",
    "optimizer": "train.optimizer",
    "quantization": "train.quant",
    "gradient_checkpointing": "train.checkpointing",
    "steps": "train.max_steps",
}
LTX2_PARAMS = {"quantization": "none", "optimizer": "adamw", "batch_size": 2, "gradient_checkpointing": False}
DPIPE_PARAMS = {
    "blocks_to_swap": 24,
    "transformer_dtype": "bfloat16",
    "activation_checkpointing": True,
    "optimizer": "adamw_optimi",
    "batch_size": 2,
}
SANA_PARAMS = {
    "offload": False,
    "cache_latents": True,
    "optimizer": "adamw",
    "batch_size": 2,
    "gradient_checkpointing": False,
}
LTX2_OUTPUT = (
    "INFO     Step 20/50 - Loss: 0.1234, LR: 1.00e-04, Time/Step:      trainer.py:612\n"
    "         2.50s, Total Time: 0h 0m                                               \n"
    "INFO     Step 40/50 - Loss: 0.1234, LR: 1.00e-04, Time/Step:      trainer.py:612\n"
    "         1.00s, Total Time: 0h 1m                                               \n"
    "📊 Training Statistics:\n - Total time: 1.2 minutes\n - Training speed: 0.71 steps/second\n"
    " - Samples/second: 0.71\n - Peak GPU memory: 45.68 GB\n"
)
MUSUBI_PARAMS = {
    "blocks_to_swap": 24,
    "precision": "bf16",
    "gradient_checkpointing": True,
    "gradient_checkpointing_cpu_offload": 1,
    "optimizer": "adamw",
    "split_attn": True,
    "batch_size": 2,
}
MUSUBI_OUTPUT = "".join(  # trainer_base.py:1920,2116-2118 @ 30c658c (musubi-tuner)
    f"steps: {n * 10:3d}%|█         | {n}/10 [00:{2 * n:02d}<00:10,  2.00s/it, avr_loss=0.123]\r"
    for n in (1, 2, 3, 4)
)
DPIPE_OUTPUT = "".join(  # deepspeed/runtime/pipe/engine.py:396-406 @ 38327e0
    f"steps: {n} loss: 0.1234 iter time (s): 2.500 samples/sec: 0.800\n" for n in range(1, 8)
)
AITK_LIKE = """\
# An ai-toolkit job (config/examples/train_lora_flux_24gb.yaml's shape; comments must survive).
job: extension
config:
  name: "my_lora_v1"
  process:
    - type: 'sd_trainer'
      training_folder: "output"
      save:
        save_every: 250 # save every this many steps
      datasets:
        - folder_path: "/data/images"
          resolution: [ 512, 768, 1024 ]  # flux enjoys multiple resolutions
      train:
        batch_size: 1
        steps: 2000
        gradient_accumulation: 1
        gradient_checkpointing: true  # need the on unless you have a ton of vram
        optimizer: "adamw8bit"
      model:
        name_or_path: "black-forest-labs/FLUX.1-dev"
        quantize: true  # run 8bit mixed precision
"""
AITK_PARAMS = {
    "qtype": "none",
    "layer_offloading_transformer_percent": 0.5,
    "low_vram": True,
    "gradient_checkpointing": False,
    "optimizer": "adamw",
    "batch_size": 2,
}
AITK_OUTPUT = "my_lora_v1:  40%|####      | 4/10 [00:12<00:18,  3.02s/it, lr: 1.0e-04 loss: 1.234e-01]\r" * 3
SANA_OUTPUT = "Steps:  40%|████      | 4/10 [00:02<00:03,  1.95it/s, loss=0.123, lr=0.0001]\r" * 3


@dataclass
class Case:
    name: str
    make: Callable[[Path], tuple[TrainerAdapter, Baseline]]
    params: dict[str, Any]
    output: str
    yaml_config: bool = True
    options: dict[str, Any] = field(default_factory=dict)
    trial_config: str = "config.yaml"


def _ltx2(tmp: Path) -> tuple[TrainerAdapter, Baseline]:
    (tmp / "base.yaml").write_text(LTX2_LIKE)
    adapter = get_adapter("ltx2", trainer_dir=FAKES / "ltx2-trainer", launcher=[sys.executable])
    return adapter, adapter.load_baseline(tmp / "base.yaml")


def _reference(tmp: Path) -> tuple[TrainerAdapter, Baseline]:
    (tmp / "base.yaml").write_text(REFERENCE_LIKE)
    adapter = get_adapter("reference")
    return adapter, adapter.load_baseline(tmp / "base.yaml")


def _sana(tmp: Path) -> tuple[TrainerAdapter, Baseline]:
    (tmp / "sana.yaml").write_text(
        f"script: {FAKES / 'fake_sana_train.py'}\nlauncher: [{sys.executable}]\n"
        "args: [--pretrained_model_name_or_path=Efficient-Large-Model/Sana, --train_batch_size=1,\n"
        "       --gradient_checkpointing, --use_8bit_adam, --offload, --mixed_precision=bf16,\n"
        "       --validation_prompt, a photo of sks dog, --checkpointing_steps=100]\n"
    )
    adapter = get_adapter("sana")
    return adapter, adapter.load_baseline(tmp / "sana.yaml")


def _musubi(tmp: Path) -> tuple[TrainerAdapter, Baseline]:
    from tests.musubi_setup import make_setup

    adapter = get_adapter("musubi", launcher=[sys.executable])
    return adapter, adapter.load_baseline(make_setup(tmp / "user"))


def _command(tmp: Path) -> tuple[TrainerAdapter, Baseline]:
    (tmp / "mine.yaml").write_text(COMMAND_CONFIG)
    adapter = get_adapter(
        "command",
        template="python train.py --config {config} --bs {batch_size} --out {trial_dir}/out",
        config_keys=COMMAND_KEYS,
        cwd=tmp,
    )
    return adapter, adapter.load_baseline(tmp / "mine.yaml")


def _dpipe(tmp: Path) -> tuple[TrainerAdapter, Baseline]:
    from tests.test_trainer_dpipe import write_dpipe_setup

    adapter = get_adapter("diffusion-pipe", trainer_dir=FAKES / "diffusion-pipe", launcher=[sys.executable])
    return adapter, adapter.load_baseline(write_dpipe_setup(tmp))


def _aitk(tmp: Path) -> tuple[TrainerAdapter, Baseline]:
    (tmp / "job.yaml").write_text(AITK_LIKE)
    adapter = get_adapter("ai-toolkit", trainer_dir=FAKES / "ai-toolkit", launcher=[sys.executable])
    return adapter, adapter.load_baseline(tmp / "job.yaml")


CASES = [
    Case("ltx2", _ltx2, LTX2_PARAMS, LTX2_OUTPUT),
    Case("reference", _reference, LTX2_PARAMS, LTX2_OUTPUT),
    Case("sana", _sana, SANA_PARAMS, SANA_OUTPUT, yaml_config=False),
    Case("command", _command, LTX2_PARAMS, LTX2_OUTPUT),
    Case("musubi", _musubi, MUSUBI_PARAMS, MUSUBI_OUTPUT, yaml_config=False),
    Case("diffusion-pipe", _dpipe, DPIPE_PARAMS, DPIPE_OUTPUT, trial_config="config.toml"),
    Case("ai-toolkit", _aitk, AITK_PARAMS, AITK_OUTPUT),
]


@pytest.fixture(params=CASES, ids=[c.name for c in CASES])
def case(request: pytest.FixtureRequest) -> Case:
    return request.param  # type: ignore[no-any-return]


def _tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _knobs(adapter: TrainerAdapter) -> list[dict[str, Any]]:
    data = load_yaml_file(adapter.knob_path())
    return list(data["knobs"])


def test_registered_with_a_knob_file(case: Case, tmp_path: Path) -> None:
    adapter, baseline = case.make(tmp_path)
    assert adapter.name == case.name in adapter_names()
    knobs = _knobs(adapter)
    assert sorted(k["name"] for k in knobs) == sorted(case.params)
    # Baseline params name every knob and the derived gradient accumulation.
    assert set(adapter.baseline_params(baseline)) == {*case.params, "gradient_accumulation_steps"}


def test_every_knob_value_renders(case: Case, tmp_path: Path) -> None:
    """Each value of each knob reaches the trial's config: read back, it is the value asked for,
    and every other knob keeps the baseline's value."""
    adapter, baseline = case.make(tmp_path)
    before = adapter.baseline_params(baseline)
    for knob in _knobs(adapter):
        values = (
            [1, 2, 4]
            if knob.get("type") == "int"
            else knob.get("grid") or [*knob.get("extra_savers", []), *knob["values"]]
        )
        for value in values:
            trial_dir = tmp_path / "trials" / f"{knob['name']}-{value}"
            spec = adapter.render(
                baseline,
                {knob["name"]: value},
                gradient_accumulation_steps=3,
                steps=3,
                trial_dir=trial_dir,
            )
            assert spec.argv
            rendered = adapter.baseline_params(adapter.load_baseline(trial_dir / case.trial_config))
            assert rendered == {**before, knob["name"]: value, "gradient_accumulation_steps": 3}


def test_render_writes_only_under_trial_dir(case: Case, tmp_path: Path) -> None:
    adapter, baseline = case.make(tmp_path)
    before = _tree(tmp_path)
    trial_dir = tmp_path / "runs" / "trial-0007"
    spec = adapter.render(baseline, case.params, gradient_accumulation_steps=2, steps=7, trial_dir=trial_dir)
    after = _tree(tmp_path)
    outside = {k: v for k, v in after.items() if not k.startswith("runs/trial-0007/")}
    assert outside == before
    assert (trial_dir / case.trial_config).is_file()
    assert not (trial_dir / "output").exists()  # the trainer makes its output dir, not render
    assert spec.env[METRICS_ENV] == str(trial_dir.resolve() / "trainer-metrics.json")
    assert all(isinstance(a, str) for a in spec.argv)
    assert spec.cwd.is_absolute()
    assert baseline.path is not None and baseline.path.read_text() == baseline.text


def test_unknown_param_is_refused(case: Case, tmp_path: Path) -> None:
    adapter, baseline = case.make(tmp_path)
    with pytest.raises(ConfigError, match="no knob"):
        adapter.render(
            baseline, {"warp_drive": True}, gradient_accumulation_steps=1, steps=3, trial_dir=tmp_path / "t"
        )


def test_read_metrics_never_raises(case: Case, tmp_path: Path) -> None:
    adapter, baseline = case.make(tmp_path)
    trial_dir = tmp_path / "t"
    assert not adapter.read_metrics(tmp_path / "missing", "").measured
    adapter.render(baseline, case.params, gradient_accumulation_steps=2, steps=7, trial_dir=trial_dir)
    full = adapter.read_metrics(trial_dir, case.output)
    assert full.measured
    for cut in range(0, len(case.output), 5):
        adapter.read_metrics(trial_dir, case.output[:cut])
    for name in ("trainer-metrics.json", "hook.jsonl", "adapter.json", "stdout.log", "stderr.log"):
        (trial_dir / name).write_bytes(b'\x00\xff{"step_time_s": [\n{{{garbage')
    adapter.read_metrics(trial_dir, "")
    adapter.read_metrics(trial_dir, "\x00\ufffd" * 50)
    (trial_dir / "adapter.json").write_text(json.dumps({"effective_batch": "lots"}))
    adapter.read_metrics(trial_dir, case.output)


def test_final_config_round_trips_knobs(case: Case, tmp_path: Path) -> None:
    adapter, baseline = case.make(tmp_path)
    text = adapter.final_config(baseline, case.params, gradient_accumulation_steps=4)
    written = tmp_path / "winner.cfg"
    written.write_text(text)
    again = adapter.load_baseline(written)
    assert adapter.baseline_params(again) == {**case.params, "gradient_accumulation_steps": 4}
    command = adapter.training_command(
        written, baseline=baseline, params=case.params, gradient_accumulation_steps=4
    )
    assert str(written.resolve()) in command or str(written) in command


def test_final_config_with_baseline_knobs_is_the_baseline(case: Case, tmp_path: Path) -> None:
    adapter, baseline = case.make(tmp_path)
    params = adapter.baseline_params(baseline)
    accum = params.pop("gradient_accumulation_steps")
    text = adapter.final_config(baseline, params, gradient_accumulation_steps=accum)
    if case.yaml_config:
        assert text == baseline.text
    else:
        assert adapter.baseline_params(adapter.baseline_from_text(text)) == adapter.baseline_params(baseline)  # type: ignore[attr-defined]


def test_unknown_adapter_name_lists_the_known_ones() -> None:
    with pytest.raises(UnknownTrainerError) as err:
        get_adapter("ltx3")
    for name in ("ltx2", "sana", "command", "reference"):
        assert name in str(err.value)
    assert adapter_names() == [
        "ai-toolkit",
        "command",
        "diffusion-pipe",
        "ltx2",
        "musubi",
        "reference",
        "sana",
    ]


@pytest.mark.parametrize(
    "name", ["ltx2", "sana", "reference", "command", "diffusion-pipe", "ai-toolkit", "musubi"]
)
def test_unknown_option_is_a_usage_error(name: str) -> None:
    from autotune.errors import UsageError

    with pytest.raises(UsageError, match="takes no option"):
        get_adapter(name, template="x", colour="blue")


# --- the hooks the rest of autotune asks instead of branching on a trainer's name -------------------


def test_emulated_vram_hooks(case: Case, tmp_path: Path) -> None:
    adapter, baseline = case.make(tmp_path)
    emulated = adapter.with_emulated_vram(baseline, 24.0)
    if not adapter.traits.emulates_vram:
        # The trial-side hook emulates the card (on by default): the config stays as it is, the
        # card goes to the hook through the trial's env.
        assert adapter.hook and adapter.emulates_card() and adapter.emulated_vram_gb(baseline) is None
        assert emulated.text == baseline.text and adapter.emulated_vram_gb(emulated) == 24.0
        spec = adapter.render(
            emulated, {}, gradient_accumulation_steps=1, steps=3, trial_dir=tmp_path / "emulated"
        )
        assert spec.env["AUTOTUNE_EMULATED_VRAM_GB"] == "24"
        assert adapter.with_emulated_vram(emulated, 24.0) is emulated
        off = copy.copy(adapter)
        off.hook = False  # what the hook option False (--no-hook) sets
        assert not off.emulates_card() and off.with_emulated_vram(baseline, 24.0) is baseline
        return
    # The trainer emulates its card itself: the hook is never given one (it would count twice).
    assert (
        "AUTOTUNE_EMULATED_VRAM_GB"
        not in adapter.render(
            adapter.with_emulated_vram(baseline, 24.0),
            {},
            gradient_accumulation_steps=1,
            steps=3,
            trial_dir=tmp_path / "own",
        ).env
    )
    assert adapter.emulated_vram_gb(baseline) is None  # the config names no card
    assert (
        adapter.emulated_vram_gb(emulated) == 24.0
        and baseline.data.get("reference") != emulated.data["reference"]
    )
    assert "emulated_vram_gb: 24.0" in emulated.text and "hidden_size: 64" in emulated.text
    assert adapter.with_emulated_vram(emulated, 24.0) is emulated  # already so: nothing rewritten


def test_plan_hooks(case: Case, tmp_path: Path) -> None:
    """A trainer ``autotune plan`` knows has a baseline for every tier and a launch line from a config."""
    adapter, baseline = case.make(tmp_path)
    config = tmp_path / "planned.yaml"
    if not adapter.traits.plan_baselines:
        with pytest.raises(UsageError):
            adapter.launch_argv(baseline, config, progress_bars=False)
        return
    argv = adapter.launch_argv(baseline, config, progress_bars=False)
    assert str(config) in argv and argv[-1] == "--disable-progress-bars"
    for vram in (24, 32, 48, 80):
        name = classify(vram).baseline_file(adapter.name)
        if adapter.traits.bundled_baselines is not None:
            from configs import config_file

            assert name.startswith(f"{adapter.traits.bundled_baselines}/")
            assert Path(str(config_file(*name.split("/")))).is_file()


def test_hooks_say_what_the_branches_said() -> None:
    """The facts that used to be ``trainer == "..."`` tests elsewhere, now asked of the adapters."""

    def having(hook: str) -> list[str]:
        return [n for n in adapter_names() if getattr(adapter_class(n).traits, hook)]

    assert having("takes_template") == ["command"]
    assert having("plan_baselines") == ["ltx2", "reference"]
    assert having("bundled_baselines") == having("config_sections") == ["reference"]
    assert having("loads_model_paths") == having("needs_tier_gate") == ["ltx2"]
    assert having("report_notes") == ["ai-toolkit", "diffusion-pipe", "ltx2"]
    assert having("single_device") == having("emulates_vram") == ["reference"]
    assert {n: adapter_class(n).traits.config_suffix for n in adapter_names()} == {
        "ai-toolkit": ".yaml",
        "command": ".yaml",
        "diffusion-pipe": ".toml",
        "ltx2": ".yaml",
        "musubi": ".sh",
        "reference": ".yaml",
        "sana": ".sh",
    }
