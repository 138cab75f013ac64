"""Launchers as people write them: a README's ``export`` block read without a shell (for the
``sana`` baseline and a ``--cmd`` template), and ``--trainer-python`` for a trainer installed
without uv."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.cli import build_parser, main
from autotune.cli.sweep_worker import sweep_options
from autotune.config.shellscript import parse_launch_script, uses_shell_syntax
from autotune.errors import ConfigError, UsageError
from autotune.execution.launch import LaunchSpec, check_program
from autotune.trainers import Winner, adapter_class, adapter_names, get_adapter
from tests.helpers import FAKES, need_shared, shared_path

FAKE_SANA = FAKES / "fake_sana_train.py"
FAKE_LTX2 = FAKES / "ltx2-trainer"

#: The launch block of diffusers' examples/dreambooth/README_sana.md (lines 76-98 at HEAD),
#: as a user pastes it into launch.sh.
README_SANA = """\
export MODEL_NAME="Efficient-Large-Model/Sana_1600M_1024px_BF16_diffusers"
export INSTANCE_DIR="dog"
export OUTPUT_DIR="trained-sana-lora"

accelerate launch train_dreambooth_lora_sana.py \\
  --pretrained_model_name_or_path=$MODEL_NAME  \\
  --instance_data_dir=$INSTANCE_DIR \\
  --output_dir=$OUTPUT_DIR \\
  --mixed_precision="bf16" \\
  --instance_prompt="a photo of sks dog" \\
  --resolution=1024 \\
  --train_batch_size=1 \\
  --gradient_accumulation_steps=4 \\
  --use_8bit_adam \\
  --learning_rate=1e-4 \\
  --report_to="wandb" \\
  --lr_scheduler="constant" \\
  --lr_warmup_steps=0 \\
  --max_train_steps=500 \\
  --validation_prompt="A photo of sks dog in a bucket" \\
  --validation_epochs=25 \\
  --seed="0" \\
  --push_to_hub
"""


# --- the reader --------------------------------------------------------------------------------


def test_the_readme_block_is_read_as_bash_would() -> None:
    script = parse_launch_script(README_SANA, "launch.sh", {})
    assert script.argv[:3] == ["accelerate", "launch", "train_dreambooth_lora_sana.py"]
    assert script.argv[3:7] == [
        "--pretrained_model_name_or_path=Efficient-Large-Model/Sana_1600M_1024px_BF16_diffusers",
        "--instance_data_dir=dog",
        "--output_dir=trained-sana-lora",
        "--mixed_precision=bf16",
    ]
    assert "--instance_prompt=a photo of sks dog" in script.argv and script.argv[-1] == "--push_to_hub"
    assert len(script.argv) == 21
    assert script.env == {
        "MODEL_NAME": "Efficient-Large-Model/Sana_1600M_1024px_BF16_diffusers",
        "INSTANCE_DIR": "dog",
        "OUTPUT_DIR": "trained-sana-lora",
    }
    assert script.cwd is None and script.line == 5


@pytest.mark.parametrize(
    ("text", "environ", "argv"),
    [
        ("python t.py --a=${A}x $A'$A'\"$A\"", {"A": "1"}, ["python", "t.py", "--a=1x", "1$A1"]),
        ("python t.py $S", {"S": " two  words "}, ["python", "t.py", "two", "words"]),  # unquoted: split
        ('python t.py "$S"', {"S": "two words"}, ["python", "t.py", "two words"]),
        ("python t.py $E '' \"\"", {"E": ""}, ["python", "t.py", "", ""]),  # an empty $E leaves no word
        (
            "python t.py ${D:-fallback} ${E:-x} ${E-y} ${D-z}",
            {"E": ""},
            ["python", "t.py", "fallback", "x", "z"],
        ),
        ("python t.py a\\ b 'c # d' e#f # a comment", {}, ["python", "t.py", "a b", "c # d", "e#f"]),
        ("python t.py ~/x --o=~/y", {"HOME": "/home/u"}, ["python", "t.py", "/home/u/x", "--o=~/y"]),
        ("python t.py {batch_size} $ x$", {}, ["python", "t.py", "{batch_size}", "$", "x$"]),
        ("#!/bin/bash\nset -euo pipefail\n\n  python \\\n  t.py\n", {}, ["python", "t.py"]),
    ],
)
def test_quotes_and_expansions(text: str, environ: dict[str, str], argv: list[str]) -> None:
    assert parse_launch_script(text, "l.sh", environ).argv == argv


def test_exports_cd_and_prefixes_follow_bash() -> None:
    text = (
        "export HF_HOME=/data/hf\n"
        "LOCAL=only-here\n"  # a shell variable: expanded, never exported
        "PATH=/venv/bin:$PATH\n"  # already in the environment, so exported
        "export PYTHONPATH=/mine\n"
        "cd /work && cd sub && TOKENIZERS_PARALLELISM=false python train.py --tag $LOCAL\n"
    )
    script = parse_launch_script(text, "l.sh", {"PATH": "/usr/bin"})
    assert script.argv == ["python", "train.py", "--tag", "only-here"]
    assert script.env == {
        "HF_HOME": "/data/hf",
        "PATH": "/venv/bin:/usr/bin",
        "PYTHONPATH": "/mine",
        "TOKENIZERS_PARALLELISM": "false",
    }
    assert script.cwd == "/work/sub" and script.line == 5


@pytest.mark.parametrize(
    ("text", "line", "needle"),
    [
        ("python t.py | tee log", 1, "a pipe"),
        ("export A=1\npython t.py; echo done", 2, "';' list"),
        ("python t.py > log 2>&1", 1, "redirection"),
        ("python t.py --x=$(date)", 1, "command substitution '$(...)'"),
        ("python t.py --x=`date`", 1, "backticks"),
        ('python t.py --x="`date`"', 1, "backticks"),
        ("python t.py \\\n  --model=$MODEL_NAME", 2, "$MODEL_NAME is not defined"),
        ("python t.py --x=${NOPE}", 1, "$NOPE is not defined"),
        ("python t.py ${TOKEN:?export TOKEN first}", 1, "export TOKEN first"),
        ("python t.py $1", 1, "script arguments"),
        ('python t.py "$@"', 1, "script arguments"),
        ("for i in 1 2\ndo python t.py\ndone", 1, "control flow ('for')"),
        ("if [ -d x ]\nthen python t.py\nfi", 1, "control flow ('if')"),
        ("source venv/bin/activate\npython t.py", 1, "runs another file"),
        ("pip install x\npython t.py", 2, "a second command ('python'; the first is on line 1)"),
        ("python t.py && echo ok", 1, "a second command"),
        ("python t.py &", 1, "background"),
        ("python t.py || exit 1", 1, "'||' list"),
        ("(cd x && python t.py)", 1, "subshell"),
        ("python 't.py", 1, "never closed"),
        ("export A=1 &&", 1, "'&&' with no command"),
        ("export A=1\n", 0, "no command found"),
    ],
)
def test_what_bash_would_need_is_refused_naming_the_line(text: str, line: int, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_launch_script(text, "/x/launch.sh", {})
    message = str(info.value)
    assert message.startswith(f"/x/launch.sh:{line}: " if line else "/x/launch.sh: "), message
    assert needle in message, message


@pytest.mark.parametrize(
    ("template", "shell"),
    [
        ("python train.py --bs {batch_size} x;y", False),
        ("python train.py --name 'a b'", False),
        ("python train.py --model $MODEL", True),
        ("cd /x && python train.py", True),
        ("HF_HOME=/h python train.py", True),
        ("export A=1\npython train.py", True),
        ("python train.py \\\n  --bs {batch_size}", False),  # one line, continued
    ],
)
def test_which_templates_are_launchers(template: str, shell: bool) -> None:
    assert uses_shell_syntax(template) is shell


# --- the sana adapter --------------------------------------------------------------------------


def _readme_launcher(tmp_path: Path, *, extra: str = "") -> Path:
    """The README block, run where the fake is linked under the real script's name, with the
    venv's ``accelerate`` on PATH."""
    (tmp_path / "train_dreambooth_lora_sana.py").symlink_to(FAKE_SANA)
    # On CPU: no bf16, no W&B; and the fake's step time, if asked for.
    text = README_SANA.replace('--mixed_precision="bf16"', "--mixed_precision=no")
    text = text.replace('--report_to="wandb"', "--report_to=tensorboard").replace(
        "--push_to_hub", extra + "--push_to_hub"
    )
    script = tmp_path / "launch.sh"
    script.write_text(
        "#!/bin/bash\nset -e\n"
        f"export PATH={Path(sys.executable).parent}:$PATH\n"
        f"export PYTHONPATH={tmp_path / 'mine'}\n"
        f"cd {tmp_path} &&\n" + text
    )
    return script


def _run(spec: LaunchSpec) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        spec.argv,
        cwd=spec.cwd,
        env={**os.environ, **spec.env},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


@pytest.mark.process
@pytest.mark.untimed
def test_the_readme_launcher_trains_through_the_sana_adapter(tmp_path: Path) -> None:
    adapter = get_adapter("sana", hook=False)
    baseline = adapter.load_baseline(_readme_launcher(tmp_path, extra="--step_sleep=0.02 \\\n  "))
    record = baseline.data
    assert record["launcher"] == ["accelerate", "launch"]
    assert record["script"] == "train_dreambooth_lora_sana.py" and record["cwd"] == str(tmp_path)
    assert record["env"]["MODEL_NAME"] == "Efficient-Large-Model/Sana_1600M_1024px_BF16_diffusers"
    assert adapter.baseline_params(baseline)["gradient_accumulation_steps"] == 4
    trial = tmp_path / "trial"
    spec = adapter.render(
        baseline, {"batch_size": 2}, gradient_accumulation_steps=1, steps=6, trial_dir=trial
    )
    assert spec.argv[:3] == ("accelerate", "launch", "train_dreambooth_lora_sana.py")
    assert spec.env["PYTHONPATH"] == str(tmp_path / "mine")  # the script's own, handed over
    assert spec.env["OUTPUT_DIR"] == "trained-sana-lora"
    done = _run(spec)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "model: Efficient-Large-Model/Sana_1600M_1024px_BF16_diffusers\n" in done.stdout
    assert "8-bit Adam: True" in done.stdout
    assert (trial / "output" / "pytorch_lora_weights.pt").is_file()
    metrics = adapter.read_metrics(trial, done.stdout + done.stderr)
    assert metrics.step_time_s is not None and metrics.samples_per_s is not None


def test_an_undefined_variable_in_a_sana_launcher_is_refused(tmp_path: Path) -> None:
    script = tmp_path / "launch.sh"
    script.write_text(
        README_SANA.replace(
            'export MODEL_NAME="Efficient-Large-Model/Sana_1600M_1024px_BF16_diffusers"\n', ""
        )
    )
    with pytest.raises(ConfigError, match=rf"^{script}:5: .*\$MODEL_NAME is not defined"):
        get_adapter("sana").load_baseline(script)


def test_the_written_winner_script_reads_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``final_config`` writes a launcher this reader reads: secrets come from the environment."""
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    script = tmp_path / "launch.sh"
    script.write_text("export HF_TOKEN=$HF_TOKEN\n" + README_SANA)
    adapter = get_adapter("sana")
    baseline = adapter.load_baseline(script)
    text = adapter.final_config(baseline, {"batch_size": 2}, gradient_accumulation_steps=2)
    assert "hf_secret" not in text
    again = adapter.baseline_from_text(text)  # type: ignore[attr-defined]
    assert again.data["env"]["HF_TOKEN"] == "hf_secret"
    assert again.data["args"] == adapter.knob_args(baseline, {"batch_size": 2}, 2)  # type: ignore[attr-defined]
    monkeypatch.delenv("HF_TOKEN")
    with pytest.raises(ConfigError, match=r"HF_TOKEN.*export HF_TOKEN first"):
        adapter.baseline_from_text(text)  # type: ignore[attr-defined]


# --- the command adapter -------------------------------------------------------------------------


def test_a_launcher_as_the_cmd_template(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATA", "/data/set")
    (tmp_path / "work").mkdir()
    template = (
        "export MODEL_NAME=gpt2-small\n"
        f"cd {tmp_path}/work && \\\n"
        "  python train.py --model $MODEL_NAME --data ${DATA} --bs {batch_size} --steps {steps}\n"
    )
    adapter = get_adapter("command", template=template)
    baseline = adapter.load_baseline(None)
    spec = adapter.render(
        baseline, {"batch_size": 4}, gradient_accumulation_steps=1, steps=7, trial_dir=tmp_path / "t"
    )
    assert spec.argv == (
        "python",
        "train.py",
        "--model",
        "gpt2-small",
        "--data",
        "/data/set",
        "--bs",
        "4",
        "--steps",
        "7",
    )
    assert spec.cwd == (tmp_path / "work").resolve()
    assert spec.env["MODEL_NAME"] == "gpt2-small"
    command = adapter.training_command(tmp_path / "best.yaml", Winner(steps=100))
    assert command == f"cd {(tmp_path / 'work').resolve()} && MODEL_NAME=gpt2-small python train.py " + (
        "--model gpt2-small --data /data/set --bs '{batch_size}' --steps 100"
    )
    # The report rebuilds the adapter with the folder the trials ran in: the same folder.
    again = get_adapter("command", template=template, cwd=str(spec.cwd))
    assert again.launch_folder() == spec.cwd


def test_a_bad_launcher_template_fails_before_anything_runs() -> None:
    with pytest.raises(UsageError, match=r"--cmd:2: .*\$MODEL_NAME is not defined"):
        get_adapter("command", template="cd /x &&\npython t.py --m $MODEL_NAME")


def test_a_launcher_given_as_the_command_config_says_where_it_goes(tmp_path: Path) -> None:
    script = tmp_path / "launch.sh"
    script.write_text(README_SANA)
    with pytest.raises(ConfigError, match=r"--cmd \"\$\(cat .*launch.sh\)\""):
        get_adapter("command", template="python t.py").load_baseline(script)


# --- --trainer-python --------------------------------------------------------------------------


def _venv_python(tmp_path: Path) -> Path:
    """A trainer's Python in a plain venv, standing in as a wrapper that logs how it was called."""
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "calls.log"}\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    return python


LTX2_CONFIG = """\
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
output_dir: outputs/x
"""


@pytest.mark.process
def test_trainer_python_runs_the_ltx2_trainer_without_uv(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    python = _venv_python(tmp_path)
    config = tmp_path / "plan.yaml"
    config.write_text(LTX2_CONFIG)
    argv = ["sweep", "--trainer", "ltx2", "--trainer-dir", str(FAKE_LTX2), "--config", str(config)]
    argv += ["--trainer-python", str(python), "--vram-gb", "80", "--max-trials", "2", "--steps", "60"]
    assert main([*argv, "--workdir", str(tmp_path / "runs")]) == 0, capsys.readouterr().err
    calls = (tmp_path / "calls.log").read_text().splitlines()
    assert len(calls) == 2
    for n, call in enumerate(calls):
        trial_config = tmp_path / "runs" / "ltx2-plan" / f"trial-{n:04d}" / "config.yaml"
        assert call == f"scripts/train.py {trial_config} --disable-progress-bars"
    report = (tmp_path / "runs" / "ltx2-plan" / "report.md").read_text()
    assert f"&& {python} scripts/train.py " in report  # the launch command runs the same Python


def test_trainer_python_on_several_gpus_runs_accelerate_as_a_module(tmp_path: Path) -> None:
    python = _venv_python(tmp_path)
    adapter = get_adapter("ltx2", trainer_dir=FAKE_LTX2, launcher=[str(python)], accelerate_config="none")
    baseline = adapter.baseline_from_text(LTX2_CONFIG)
    baseline.num_gpus = 2
    spec = adapter.render(baseline, {}, gradient_accumulation_steps=1, steps=60, trial_dir=tmp_path / "t")
    config = str((tmp_path / "t" / "config.yaml").resolve())
    assert list(spec.argv) == [
        str(python), "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
        "scripts/train.py", config, "--disable-progress-bars",
    ]  # fmt: skip
    # That Python really runs accelerate's launcher as a module (its --help, no GPU needed).
    done = subprocess.run(
        [*spec.argv[:3], "--help"], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0 and "--num_processes" in done.stdout, done.stderr[-2000:]


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda p: p / "missing" / "python", "no such file"),
        (lambda p: p, "a folder, not a program"),
        (lambda p: (p / "python").write_text("x") and p / "python", "not executable"),
    ],
)
def test_a_bad_trainer_python_is_refused_before_any_trial(
    tmp_path: Path,
    make: object,
    needle: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert callable(make)
    path = make(tmp_path)
    config = tmp_path / "plan.yaml"
    config.write_text(LTX2_CONFIG)
    monkeypatch.chdir(tmp_path)
    argv = ["sweep", "--trainer", "ltx2", "--config", str(config), "--trainer-python", str(path)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --trainer-python {path}: {needle}"), err
    assert not (tmp_path / "autotune-runs").exists()
    with pytest.raises(UsageError, match=needle):  # the adapter checks it too (a worker reads the study)
        get_adapter("ltx2", launcher=[str(path)])


def test_trainer_python_goes_with_python_trainers_only(tmp_path: Path) -> None:
    python = _venv_python(tmp_path)
    args = build_parser().parse_args(["sweep", "--cmd", "python t.py", "--trainer-python", str(python)])
    takers = " or ".join(n for n in adapter_names() if adapter_class(n).traits.takes_trainer_python)
    assert takers == "ai-toolkit or diffusion-pipe or ltx2 or musubi or reference or sana"
    with pytest.raises(UsageError, match=f"--trainer-python goes with --trainer {takers}, not command"):
        sweep_options(args)
    args = build_parser().parse_args(["sweep", "--trainer", "sana", "--trainer-python", str(python)])
    assert sweep_options(args).trainer_options == {"launcher": [str(python)]}


def test_check_program_keeps_a_venv_link(tmp_path: Path) -> None:
    """A venv's python is a link: resolving it would run the system Python without the venv."""
    link = tmp_path / "venv" / "bin" / "python"
    link.parent.mkdir(parents=True)
    link.symlink_to(sys.executable)
    assert check_program(str(link), "x") == str(link)
    with pytest.raises(UsageError, match="no such program on PATH"):
        check_program("surely-no-such-python-3.99", "--trainer-python")


def test_the_plan_launches_with_the_trainer_python(tmp_path: Path) -> None:
    from autotune.plan.baseline import make_plan, write_plan

    python = _venv_python(tmp_path)
    plan = make_plan(trainer="reference", vram_gb=48, output=tmp_path / "p.yaml", trainer_python=python)
    assert plan.launch is not None
    assert plan.launch.command == shlex.join(
        [str(python), "-m", "trials.reference", str(tmp_path / "p.yaml"), "--disable-progress-bars"]
    )
    write_plan(plan)
    assert plan.render_text().splitlines()[-1].endswith(f"--trainer-python {python}")
    with pytest.raises(UsageError, match=r"--trainer-python .*: no such file"):
        make_plan(
            trainer="reference", vram_gb=48, output=tmp_path / "p.yaml", trainer_python=tmp_path / "nope"
        )


# --- the real runs: the launcher form gives the argv the real script ran with ----------------------


SANA_REAL = shared_path("sana-diffusers-real")

#: bs1_ok's and accelerate-launch's baseline.yaml, written as a user writes a launcher.
REAL_LAUNCHER = """\
#!/bin/bash
set -e
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export MODEL_NAME="TINY/tiny-sana"
export INSTANCE_DIR="TINY/dog"
LAUNCH="{launch}"

cd DIFFUSERS/examples/dreambooth &&
$LAUNCH train_dreambooth_lora_sana.py \\
  --pretrained_model_name_or_path=$MODEL_NAME \\
  --instance_data_dir=${{INSTANCE_DIR}} \\
  --instance_prompt="a photo of sks dog" \\
  --resolution=32 \\
  --train_batch_size=1 \\
  --max_sequence_length=16 \\
  --mixed_precision="bf16" \\
  --report_to="tensorboard" \\
  --seed="0" \\
  --lr_warmup_steps=0 \\
  --validation_prompt="a photo of sks dog in a bucket" \\
  --push_to_hub
"""


@pytest.mark.parametrize(
    ("run", "launch"),
    [("bs1_ok", "VENV/bin/python"), ("accelerate-launch", "VENV/bin/accelerate launch --num_processes 1")],
)
def test_a_launcher_renders_the_argv_of_the_real_run(tmp_path: Path, run: str, launch: str) -> None:
    folder = need_shared(SANA_REAL / run)
    real = json.loads((folder / "argv.json").read_text())
    steps = int(real[real.index("--max_train_steps") + 1])
    adapter = get_adapter("sana")
    script = tmp_path / "launch.sh"
    script.write_text(REAL_LAUNCHER.format(launch=launch))
    from_yaml = adapter.load_baseline(folder / "baseline.yaml")
    from_script = adapter.load_baseline(script)
    assert from_script.data["env"] == {
        **from_yaml.data["env"],
        "MODEL_NAME": "TINY/tiny-sana",
        "INSTANCE_DIR": "TINY/dog",
    }  # LAUNCH is not exported
    where = Path("DIFFUSERS/examples/dreambooth")
    assert Path(from_yaml.data["cwd"]) == folder.resolve() / where
    assert Path(from_script.data["cwd"]) == tmp_path.resolve() / where
    for baseline in (from_yaml, from_script):
        trial = tmp_path / "trial"
        spec = adapter.render(baseline, {}, gradient_accumulation_steps=1, steps=steps, trial_dir=trial)
        argv = [a.replace(str(trial.resolve()), "TRIAL_DIR") for a in spec.argv]
        assert argv == real


def test_a_launcher_template_runs_with_its_exports(tmp_path: Path) -> None:
    template = (
        'export MSG="hello there"\n'
        f"cd {tmp_path} &&\n"
        f"{sys.executable} -c 'import os, sys; print(os.getcwd(), os.environ[\"MSG\"], sys.argv[1:])' \\\n"
        "  $MSG {batch_size}\n"
    )
    adapter = get_adapter("command", template=template)
    spec = adapter.render(
        adapter.load_baseline(None),
        {"batch_size": 4},
        gradient_accumulation_steps=1,
        steps=3,
        trial_dir=tmp_path / "t",
    )
    done = _run(spec)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{tmp_path.resolve()} hello there ['hello', 'there', '4']\n"
