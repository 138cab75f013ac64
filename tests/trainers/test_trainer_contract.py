"""One contract, every adapter: what the sweep relies on, whichever trainer it drives."""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from autotune.config.yamlconf import load_yaml_file
from autotune.errors import ConfigError, UnknownTrainerError, UsageError
from autotune.gpu.tiers import classify
from autotune.trainers import TrainerAdapter, Winner, adapter_class, adapter_names, get_adapter
from autotune.trainers.kit.readers.metricsfile import METRICS_ENV
from tests.trainers import Case, cases

CASES = cases()


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
        written, Winner(baseline=baseline, params=case.params, gradient_accumulation_steps=4)
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
    assert having("report_notes") == ["ai-toolkit", "diffusion-pipe"]
    assert having("peak_note") == ["ltx2"]
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
