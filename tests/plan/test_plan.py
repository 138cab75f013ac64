"""``autotune plan``: tiers from --vram-gb, the shipped config with only paths patched, bad input."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from autotune.cli import main
from autotune.errors import UnsupportedCardError, UsageError
from autotune.plan.baseline import make_plan
from autotune.trainers import get_adapter
from tests.fake_nvml import A6000, H100, FakeNvml, opener

PATH_LINES = ("model_path:", "text_encoder_path:", "preprocessed_data_root:", "output_dir:")


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture
def checkout(tmp_path: Path, ltx2_fixtures: Path) -> Path:
    """A fake LTX-2 repo whose shipped configs are the real ones, linked in place (never copied)."""
    pkg = tmp_path / "LTX-2" / "packages" / "ltx-trainer"
    (pkg / "configs" / "accelerate").mkdir(parents=True)
    (pkg / "scripts").mkdir()
    (pkg / "scripts" / "train.py").write_text("# stand-in\n")
    for f in ltx2_fixtures.glob("*.yaml"):
        (pkg / "configs" / f.name).symlink_to(f)
    for f in (ltx2_fixtures / "accelerate").glob("*.yaml"):
        (pkg / "configs" / "accelerate" / f.name).symlink_to(f)
    return tmp_path / "LTX-2"


@pytest.fixture
def assets(tmp_path: Path) -> dict[str, Path]:
    model = tmp_path / "models" / "ltx-2.safetensors"
    gemma = tmp_path / "models" / "gemma"
    data = tmp_path / "data"
    gemma.mkdir(parents=True)
    model.write_bytes(b"\0")
    for d in ("latents", "conditions", "audio_latents"):
        (data / d).mkdir(parents=True)
    return {"model": model, "text_encoder": gemma, "data": data, "output_dir": tmp_path / "out"}


def path_flags(a: dict[str, Path]) -> list[str]:
    return [
        "--model", str(a["model"]), "--text-encoder", str(a["text_encoder"]),
        "--data", str(a["data"]), "--output-dir", str(a["output_dir"]),
    ]  # fmt: skip


# --- tiers through the CLI ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("vram", "tier", "config"),
    [
        ("31.8", "32GB", "t2v_lora_low_vram.yaml"),
        ("32", "32GB", "t2v_lora_low_vram.yaml"),
        ("45", "40-60GB", "t2v_lora_low_vram.yaml"),
        ("48", "40-60GB", "t2v_lora_low_vram.yaml"),
        ("64", "40-60GB", "t2v_lora_low_vram.yaml"),
        ("79.6", "80GB+", "t2v_lora.yaml"),
        ("80", "80GB+", "t2v_lora.yaml"),
        ("141", "80GB+", "t2v_lora.yaml"),
    ],
)
def test_plan_json_tier(vram: str, tier: str, config: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, "plan", "--vram-gb", vram, "--json")
    assert rc == 0
    j = json.loads(out)
    assert j["tier"] == tier and j["vram_gb"] == float(vram)
    assert j["baseline"]["config"] == config and j["config_path"] is None
    assert any("--trainer-dir" in w for w in j["warnings"])


def test_plan_refuses_below_32(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(capsys, "plan", "--vram-gb", "24", "--json")
    assert rc == 2 and out == ""
    assert "requires a 32 GB card" in err and "no tested config exists below it" in err and "--force" in err
    assert "Traceback" not in err


def test_plan_force_below_32(capsys: pytest.CaptureFixture[str], checkout: Path, tmp_path: Path) -> None:
    rc, out, _ = run(capsys, "plan", "--vram-gb", "24", "--force", "--json", "--trainer-dir", str(checkout),
                     "-o", str(tmp_path / "p.yaml"))  # fmt: skip
    assert rc == 0
    j = json.loads(out)
    assert j["tier"] == "below-32GB" and j["forced"] is True
    assert j["baseline"]["config"] == "t2v_lora_low_vram.yaml"
    assert any("own risk" in w or "below the trainer's 32 GB" in w for w in j["warnings"])


# --- the plan against the real shipped configs ---------------------------------------------------


@pytest.mark.parametrize(("vram", "name"), [("31.8", "t2v_lora_low_vram.yaml"), ("141", "t2v_lora.yaml")])
@pytest.mark.parametrize("root", ["repo", "package"])
def test_plan_differs_only_in_patched_paths(
    vram: str,
    name: str,
    root: str,
    checkout: Path,
    assets: dict[str, Path],
    ltx2_fixtures: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    trainer_dir = checkout if root == "repo" else checkout / "packages" / "ltx-trainer"
    out_file = tmp_path / "plan.yaml"
    rc, out, err = run(capsys, "plan", "--vram-gb", vram, "--trainer-dir", str(trainer_dir), *path_flags(assets),
                       "-o", str(out_file), "--json")  # fmt: skip
    assert rc == 0, err
    j = json.loads(out)
    assert j["config_path"] == str(out_file) and j["baseline"]["verbatim"] is True
    assert j["baseline"]["source"] == str(checkout / "packages" / "ltx-trainer" / "configs" / name)
    src = (ltx2_fixtures / name).read_text().splitlines(keepends=True)
    new = out_file.read_text().splitlines(keepends=True)
    assert len(src) == len(new)
    changed = [(a, b) for a, b in zip(src, new, strict=True) if a != b]
    assert sorted(a.split(":")[0].strip() + ":" for a, _ in changed) == sorted(PATH_LINES)
    expected = {
        "model_path:": assets["model"],
        "text_encoder_path:": assets["text_encoder"],
        "preprocessed_data_root:": assets["data"],
        "output_dir:": assets["output_dir"],
    }
    for a, b in changed:
        key = a.split(":")[0].strip() + ":"
        indent = a[: len(a) - len(a.lstrip())]
        assert b == f'{indent}{key} "{expected[key]}"\n'  # same indent, still double-quoted, absolute
    assert j["patched"] == {
        "model.model_path": str(assets["model"]),
        "model.text_encoder_path": str(assets["text_encoder"]),
        "data.preprocessed_data_root": str(assets["data"]),
        "output_dir": str(assets["output_dir"]),
    }
    assert j["unset_paths"] == [] and j["warnings"] == []
    assert j["launch"]["mode"] == "single" and str(out_file) in j["launch"]["command"]


def test_plan_without_paths_only_absolutizes_output_dir(
    checkout: Path, ltx2_fixtures: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    plan = make_plan(trainer_dir=Path("LTX-2"), vram_gb=48)
    pkg = checkout / "packages" / "ltx-trainer"
    assert plan.output_path == tmp_path / "autotune-runs" / "plan.yaml"
    assert plan.patched == {"output_dir": str(pkg / "outputs" / "t2v_lora_low_vram")}
    assert plan.unset_paths == ["model.model_path", "model.text_encoder_path", "data.preprocessed_data_root"]
    assert sum("still reads" in w for w in plan.warnings) == 3
    src = (ltx2_fixtures / "t2v_lora_low_vram.yaml").read_text().splitlines()
    diff = [(a, b) for a, b in zip(src, plan.text.splitlines(), strict=True) if a != b]  # type: ignore[union-attr]
    assert diff == [
        ('output_dir: "outputs/t2v_lora_low_vram"', f'output_dir: "{pkg}/outputs/t2v_lora_low_vram"')
    ]


def test_plan_other_shipped_config_by_name(checkout: Path, tmp_path: Path) -> None:
    plan = make_plan(trainer_dir=checkout, vram_gb=80, config="i2v_lora", output=tmp_path / "p.yaml")
    assert plan.config_name == "i2v_lora.yaml" and plan.source_path is not None
    assert plan.data()["training_strategy"]["video"]["conditions"][0]["type"] == "first_frame"
    assert (
        not any("replaces" in w for w in plan.warnings) or plan.tier.baseline_file("ltx2") != "i2v_lora.yaml"
    )


# --- several GPUs ---------------------------------------------------------------------------------


def with_grad_accum(ltx2_fixtures: Path, tmp_path: Path, ga: int, mode: str = "lora") -> Path:
    """A user's own config: the shipped one with gradient accumulation (and mode) changed."""
    text = (ltx2_fixtures / "t2v_lora.yaml").read_text()
    text = text.replace("gradient_accumulation_steps: 1", f"gradient_accumulation_steps: {ga}")
    text = text.replace('training_mode: "lora"', f'training_mode: "{mode}"')
    path = tmp_path / f"mine_{ga}_{mode}.yaml"
    path.write_text(text)
    return path


def test_two_gpus_keep_effective_batch(checkout: Path, ltx2_fixtures: Path, tmp_path: Path) -> None:
    cfg = with_grad_accum(ltx2_fixtures, tmp_path, 4)
    plan = make_plan(trainer_dir=checkout, vram_gb=80, gpus=2, config=str(cfg), output=tmp_path / "p.yaml")
    assert (plan.batch_size, plan.gradient_accumulation_steps, plan.num_gpus) == (1, 2, 2)
    assert plan.effective_batch == plan.target_effective_batch == 4
    assert plan.data()["optimization"]["gradient_accumulation_steps"] == 2
    assert plan.patched["optimization.gradient_accumulation_steps"] == 2
    assert plan.launch is not None and plan.launch.mode == "ddp"
    assert (
        "accelerate launch --config_file configs/accelerate/ddp.yaml --num_processes 2" in plan.launch.command
    )
    assert plan.to_json()["batch"]["kept"] is True


def test_effective_batch_that_cannot_be_kept_is_said(checkout: Path, tmp_path: Path) -> None:
    plan = make_plan(trainer_dir=checkout, vram_gb=80, gpus=4, output=tmp_path / "p.yaml")
    assert (
        plan.gradient_accumulation_steps == 1
        and plan.effective_batch == 4
        and plan.target_effective_batch == 1
    )
    assert any("cannot keep the effective batch 1 on 4 GPUs" in w for w in plan.warnings)
    assert plan.to_json()["batch"]["kept"] is False


def test_full_fine_tune(checkout: Path, ltx2_fixtures: Path, tmp_path: Path) -> None:
    cfg = with_grad_accum(ltx2_fixtures, tmp_path, 2, mode="full")
    one = make_plan(trainer_dir=checkout, vram_gb=80, config=str(cfg), output=tmp_path / "p.yaml")
    assert any("full fine-tune" in w and "LoRA" in w for w in one.warnings)
    small = make_plan(trainer_dir=checkout, vram_gb=48, gpus=2, config=str(cfg), output=tmp_path / "p.yaml")
    assert any("full fine-tune" in w and "40-60GB" in w for w in small.warnings)
    big = make_plan(trainer_dir=checkout, vram_gb=80, gpus=2, config=str(cfg), output=tmp_path / "p.yaml")
    assert not any("full fine-tune" in w for w in big.warnings)
    assert big.launch is not None and big.launch.mode == "fsdp" and "fsdp.yaml" in big.launch.command


def test_gpus_from_the_probe(checkout: Path, tmp_path: Path) -> None:
    two = make_plan(
        trainer_dir=checkout, open_nvml=opener(FakeNvml([H100, H100])), env={}, output=tmp_path / "p"
    )
    assert (
        two.vram_source == "probe" and two.card == H100[0] and two.num_gpus == 2 and two.tier.tier == "80GB+"
    )
    assert two.launch is not None and two.launch.mode == "ddp"
    mixed = make_plan(
        trainer_dir=checkout, open_nvml=opener(FakeNvml([H100, A6000])), env={}, output=tmp_path / "p"
    )
    assert (
        mixed.num_gpus == 1
        and mixed.tier.tier == "40-60GB"
        and any("mixed cards" in w for w in mixed.warnings)
    )
    with pytest.raises(UsageError, match="--vram-gb"):
        make_plan(open_nvml=opener(unavailable="no NVIDIA driver found"), env={})
    with pytest.raises(UnsupportedCardError):
        make_plan(open_nvml=opener(FakeNvml([("NVIDIA GeForce RTX 4090", 23.99)])), env={})


# --- bad input: exit 2, what/where/how, no traceback ----------------------------------------------


def bad_config(ltx2_fixtures: Path, tmp_path: Path) -> Path:
    text = (ltx2_fixtures / "t2v_lora_low_vram.yaml").read_text().replace("  steps: 2000", "  stepz: 2000")
    path = tmp_path / "typo.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (
            ["--trainer", "nope", "--vram-gb", "48"],
            ["unknown trainer 'nope'", "ltx2, reference", "--trainer"],
        ),
        (["--vram-gb", "abc"], ["--vram-gb", "'abc'"]),
        (["--vram-gb", "-3"], ["--vram-gb", "positive"]),
        (["--vram-gb", "48", "--trainer-dir", "{tmp}/missing"], ["no such directory", "LTX-2"]),
        (["--vram-gb", "48", "--trainer-dir", "{tmp}"], ["is not an LTX-2 checkout", "packages/ltx-trainer"]),
        (
            ["--vram-gb", "48", "--trainer-dir", "{checkout}", "--config", "nope"],
            ["nope.yaml", "t2v_lora.yaml"],
        ),
        (
            ["--vram-gb", "48", "--trainer-dir", "{checkout}", "--config", "{typo}"],
            ["unknown key 'optimization.stepz'", "typo.yaml:", "did you mean 'steps'?"],
        ),
        (
            ["--vram-gb", "48", "--trainer-dir", "{checkout}", "--model", "https://hf.co/x.safetensors"],
            ["URL"],
        ),
        (
            ["--vram-gb", "48", "--trainer-dir", "{checkout}", "--model", "{tmp}/no.safetensors"],
            ["no such file"],
        ),
        (["--vram-gb", "48", "--trainer-dir", "{checkout}", "--model", "{tmp}/data"], [".safetensors"]),
        (
            ["--vram-gb", "48", "--trainer-dir", "{checkout}", "--data", "{tmp}/models"],
            ["missing", "latents/"],
        ),
        (["--vram-gb", "48", "--model", "{tmp}/x.safetensors"], ["--trainer-dir"]),
        (["--vram-gb", "48", "--gpus", "0"], ["--gpus"]),
    ],
)
def test_bad_input_exits_2(
    args: list[str],
    expect: list[str],
    checkout: Path,
    assets: dict[str, Path],
    ltx2_fixtures: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    subs = {
        "{tmp}": str(tmp_path),
        "{checkout}": str(checkout),
        "{typo}": str(bad_config(ltx2_fixtures, tmp_path)),
    }
    argv = ["plan"]
    for a in args:
        for k, v in subs.items():
            a = a.replace(k, v)
        argv.append(a)
    rc, out, err = run(capsys, *argv)
    assert rc == 2, (out, err)
    assert err.startswith("error: ") and "Traceback" not in err
    for e in expect:
        assert e in err


def test_debug_shows_the_traceback(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, _, err = run(capsys, "--debug", "plan", "--vram-gb", "48", "--trainer-dir", str(tmp_path / "missing"))
    assert rc == 2 and "Traceback" in err and "no such directory" in err


# --- the built-in reference trainer ----------------------------------------------------------------


def test_reference_missing_baseline_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run(
        capsys, "plan", "--trainer", "reference", "--vram-gb", "48", "--config", "no_such_baseline"
    )
    assert rc == 1 and "configs/reference/no_such_baseline.yaml is not in this installation" in err


@pytest.mark.parametrize("trainer", ["sana", "command"])
def test_a_trainer_without_plan_baselines_is_sent_to_sweep(trainer: str) -> None:
    with pytest.raises(UsageError) as err:
        make_plan(trainer=trainer, vram_gb=48)
    assert "'autotune plan' knows the baselines of ltx2, reference" in str(err.value)
    assert f"autotune sweep --trainer {trainer} --config FILE" in str(err.value)


def test_reference_baselines(tmp_path: Path) -> None:
    for vram, kind in ((32, "low_vram"), (80, "standard")):
        plan = make_plan(trainer="reference", vram_gb=vram, output=tmp_path / "p.yaml")
        assert plan.source_path is not None and plan.source_path.name == f"{kind}.yaml"
        assert plan.launch is not None and "trials.reference" in plan.launch.command


@pytest.mark.parametrize("gpus", [1, 2])
def test_the_plan_launches_what_a_trial_launches(checkout: Path, tmp_path: Path, gpus: int) -> None:
    """One launch line: the plan's is the adapter's, with the plan's config in place of the trial's."""
    plan = make_plan(trainer_dir=checkout, vram_gb=80, gpus=gpus, output=tmp_path / "p.yaml")
    assert plan.launch is not None and plan.launch.cwd is not None
    spec = get_adapter("ltx2", trainer_dir=checkout).render(
        plan.to_baseline(), {}, gradient_accumulation_steps=1, steps=2, trial_dir=tmp_path / "t"
    )
    trial = [str(tmp_path / "p.yaml") if a == str(tmp_path / "t" / "config.yaml") else a for a in spec.argv]
    assert plan.launch.command == f"cd {shlex.quote(str(spec.cwd))} && {shlex.join(trial)}"
    assert spec.cwd == plan.launch.cwd


def test_the_reference_plan_launches_what_a_trial_launches(tmp_path: Path) -> None:
    plan = make_plan(trainer="reference", vram_gb=48, gpus=2, output=tmp_path / "p.yaml")
    assert plan.launch is not None and plan.num_gpus == 1
    assert plan.launch.command == shlex.join(
        [sys.executable, "-m", "trials.reference", str(tmp_path / "p.yaml"), "--disable-progress-bars"]
    )
    assert any("runs on one device" in w for w in plan.warnings)


def test_plan_as_adapter_baseline(checkout: Path, tmp_path: Path) -> None:
    from autotune.plan.baseline import write_plan

    plan = make_plan(trainer_dir=checkout, vram_gb=48, gpus=2, output=tmp_path / "p.yaml")
    write_plan(plan)
    b = plan.to_baseline()
    assert b.trainer == "ltx2" and b.path == tmp_path / "p.yaml" and b.num_gpus == 2
    assert b.text == (tmp_path / "p.yaml").read_text()
    assert b.data["acceleration"]["quantization"] == "int8-quanto"
    assert b.extra["tier"] == "40-60GB" and b.extra["relax"] is True and b.extra["launch_mode"] == "ddp"
    with pytest.raises(UsageError, match="--trainer-dir"):
        make_plan(vram_gb=48).to_baseline()
