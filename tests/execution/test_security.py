"""Security properties, proved with real processes.

- Trials never go through a shell: shell syntax in a template, a param value, a config
  value or the trial folder's own path reaches the trainer as one literal argument.
- YAML is read with a safe loader only: a ``!!python/...`` tag is refused, by name, at
  every place autotune reads YAML, and nothing it names ever runs.
- Secret-looking environment values never reach the disk: not in ``command.sh``, not in
  ``env.json``, not anywhere in the trial folder.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from autotune.errors import ConfigError
from autotune.execution.launch import REDACTED, LaunchSpec, is_secret_name
from autotune.execution.runner import RunLimits, run_trial
from autotune.trainers import Baseline, get_adapter
from tests.helpers import FAKES, REPO, cli_env

ARGV_TRAINER = FAKES / "argv_trainer.py"
LIMITS = RunLimits(wall_timeout_s=60, stall_timeout_s=60, grace_s=1)


def _nasty(tmp: Path) -> dict[str, str]:
    """Shell syntax that does harm only when a shell reads it: each leaves a trace if it runs."""
    pwned = tmp / "pwned"
    canary = tmp / "canary"
    canary.mkdir(exist_ok=True)
    (canary / "keep").write_text("still here\n")
    return {
        "semicolon": f"x; rm -rf {canary}",
        "subst": f"$(touch {pwned}-subst)",
        "backtick": f"`touch {pwned}-backtick`",
        "and": f"a && touch {pwned}-and",
        "pipe": f"| touch {pwned}-pipe",
        "redirect": f"> {pwned}-redirect",
        "quote": f"'; touch {pwned}-quote; '",
        "newline": f"a\ntouch {pwned}-newline",
        "glob": "*",
        "var": "$HOME ${PATH}",
    }


def _assert_nothing_ran(tmp: Path) -> None:
    assert not list(tmp.rglob("pwned*")), "a shell ran something"
    assert (tmp / "canary" / "keep").read_text() == "still here\n", "a shell ran rm -rf"


def _seen(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


@pytest.fixture
def nasty_dir(tmp_path: Path) -> Path:
    """A workdir whose own name is shell syntax: ``{trial_dir}`` and ``{config}`` carry it."""
    d = tmp_path / "w; touch pwned-dir $(touch pwned-dir2) `touch pwned-dir3` & x"  # relative: cwd is tmp
    d.mkdir()
    return d


def test_command_template_and_values_stay_literal(tmp_path: Path, nasty_dir: Path) -> None:
    nasty = _nasty(tmp_path)
    # Braces are the template's own syntax, doubled to stay literal; the rest is as written.
    quoted = " ".join(f"--{k} {_shquote(v.replace('{', '{{').replace('}', '}}'))}" for k, v in nasty.items())
    template = (
        f"{sys.executable} {ARGV_TRAINER} --out {{trial_dir}}/argv-seen.json {quoted} "
        "--q={quantization} --cfg {config} --bs {batch_size} --trial {trial_dir}"
    )
    adapter = get_adapter("command", template=template, cwd=str(tmp_path))
    baseline = adapter.load_baseline(None)
    trial_dir = nasty_dir / "trial-0000"
    spec = adapter.render(
        baseline,
        {"quantization": f"$(touch {tmp_path}/pwned-param)", "batch_size": 2},
        gradient_accumulation_steps=1,
        steps=3,
        trial_dir=trial_dir,
    )
    result = run_trial(spec, trial_dir, LIMITS)
    assert result.returncode == 0, result.output_tail

    argv = _seen(trial_dir / "argv-seen.json")["argv"]
    expected = ["--out", f"{trial_dir}/argv-seen.json"]
    for k, v in nasty.items():
        expected += [f"--{k}", v]
    expected += [
        f"--q=$(touch {tmp_path}/pwned-param)",
        "--cfg",
        str(trial_dir / "config.yaml"),
        "--bs",
        "2",
        "--trial",
        str(trial_dir),
    ]
    assert argv == expected
    _assert_nothing_ran(tmp_path)

    # command.sh, run by a real shell, starts the same argv: it is quoted, not just printed.
    (trial_dir / "argv-seen.json").unlink()
    replay = subprocess.run(["sh", str(trial_dir / "command.sh")], capture_output=True, text=True, timeout=60)
    assert replay.returncode == 0, replay.stderr
    assert _seen(trial_dir / "argv-seen.json")["argv"] == expected
    _assert_nothing_ran(tmp_path)


def test_config_values_stay_literal_for_a_flag_trainer(tmp_path: Path, nasty_dir: Path) -> None:
    """The sana adapter builds argv from the user's config: every value is one argv element."""
    nasty = _nasty(tmp_path)
    args = ["--pretrained_model_name_or_path=m", "--out={TRIAL}/argv-seen.json"]
    for k, v in nasty.items():
        args += [f"--{k}", v]
    trial_dir = nasty_dir / "trial-0001"
    config = {
        "script": str(ARGV_TRAINER),
        "launcher": [sys.executable],
        "cwd": str(trial_dir),
        "args": [a.replace("{TRIAL}", str(trial_dir)) for a in args],
    }
    path = tmp_path / "sana.yaml"
    path.write_text(json.dumps(config), encoding="utf-8")  # JSON is YAML
    adapter = get_adapter("sana", hook=False)
    baseline = adapter.load_baseline(path)
    trial_dir.mkdir(parents=True)
    spec = adapter.render(baseline, {}, gradient_accumulation_steps=1, steps=2, trial_dir=trial_dir)
    result = run_trial(spec, trial_dir, LIMITS)
    assert result.returncode == 0, result.output_tail
    argv = _seen(trial_dir / "argv-seen.json")["argv"]
    for k, v in nasty.items():
        i = argv.index(f"--{k}")
        assert argv[i + 1] == v
    _assert_nothing_ran(tmp_path)


def test_launch_spec_is_never_a_shell_string(tmp_path: Path) -> None:
    """The runner takes argv as given: a one-element argv with spaces is a program name, not a script."""
    spec = LaunchSpec(argv=(f"touch {tmp_path}/pwned; echo hi",), cwd=tmp_path)
    with pytest.raises(Exception, match="could not start"):
        run_trial(spec, tmp_path / "t", LIMITS)
    _assert_nothing_ran_simple(tmp_path)


def _assert_nothing_ran_simple(tmp: Path) -> None:
    assert not list(tmp.rglob("pwned*"))


def _shquote(text: str) -> str:
    import shlex

    return shlex.quote(text)


# --- YAML: the safe loader, everywhere ---------------------------------------------------------

TAGGED = 'optimization: !!python/object/apply:os.system ["touch {pwned}"]\n'


@pytest.mark.parametrize("trainer", ["ltx2", "reference", "command"])
def test_every_adapter_refuses_python_tags(trainer: str, tmp_path: Path) -> None:
    pwned = tmp_path / "pwned"
    cfg = tmp_path / "tagged.yaml"
    cfg.write_text(TAGGED.format(pwned=pwned), encoding="utf-8")
    options: dict[str, Any] = {"template": "python train.py {config}"} if trainer == "command" else {}
    with pytest.raises(ConfigError, match=r"tagged\.yaml:1:15: the tag !!python/object/apply:os.system"):
        get_adapter(trainer, **options).load_baseline(cfg)
    assert not pwned.exists()


def test_sana_yaml_with_a_python_tag_never_runs_it(tmp_path: Path) -> None:
    """sana reads a YAML record or a shell line: a tagged YAML is not loaded as YAML."""
    pwned = tmp_path / "pwned"
    cfg = tmp_path / "tagged.yaml"
    cfg.write_text(f'script: !!python/object/apply:os.system ["touch {pwned}"]\nargs: []\n', encoding="utf-8")
    try:
        baseline: Baseline | None = get_adapter("sana").load_baseline(cfg)
    except ConfigError:
        baseline = None
    assert not pwned.exists()
    if baseline is not None:  # then it was read as a command line: the tag is inert text
        assert baseline.data["script"] != "0"


def test_knob_files_are_read_safely(tmp_path: Path) -> None:
    from autotune.config.knobs import read_knob_file

    pwned = tmp_path / "pwned"
    knobs = tmp_path / "knobs.yaml"
    knobs.write_text(f'knobs: !!python/object/apply:os.system ["touch {pwned}"]\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="safe loader"):
        read_knob_file(knobs)
    assert not pwned.exists()


_UNSAFE_CALLS = {"unsafe_load", "full_load", "unsafe_load_all", "full_load_all", "load_all"}


def test_no_unsafe_yaml_loader_in_the_code() -> None:
    """A static guard: every ``yaml.load`` names a safe loader; no unsafe/full loaders; ruamel
    only in its safe or round-trip modes; no pickle, eval or exec of data."""
    offenders: list[str] = []
    for root in ("autotune", "trials", "configs"):
        for path in sorted((REPO / root).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if not isinstance(node, ast.Call):
                    continue
                name = _call_name(node.func)
                where = f"{path.relative_to(REPO)}:{node.lineno}"
                if name in {f"yaml.{n}" for n in _UNSAFE_CALLS}:
                    offenders.append(f"{where}: {name}")
                if name == "yaml.load":
                    loader = next((k.value for k in node.keywords if k.arg == "Loader"), None)
                    loader_name = _call_name(loader) if loader is not None else ""
                    if "Safe" not in loader_name and "_SafeUniqueLoader" not in loader_name:
                        offenders.append(f"{where}: yaml.load with Loader={loader_name or '(default)'}")
                if name.endswith("YAML"):
                    typ = next((k.value for k in node.keywords if k.arg == "typ"), None)
                    if isinstance(typ, ast.Constant) and typ.value not in ("rt", "safe"):
                        offenders.append(f"{where}: ruamel YAML(typ={typ.value!r})")
                if name in {"pickle.load", "pickle.loads", "eval", "exec"}:
                    offenders.append(f"{where}: {name}")
    assert offenders == []


def _call_name(node: ast.AST | None) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_call_name(node.value)}.{node.attr}"
    return ""


# --- secrets --------------------------------------------------------------------------------------

SECRETS = {
    "HF_TOKEN": "hf_SeCrEt111",
    "WANDB_API_KEY": "wandb-SeCrEt222",
    "AWS_SECRET_ACCESS_KEY": "aws-SeCrEt333",
    "DB_PASSWORD": "pw-SeCrEt444",
    "github_token": "gh-SeCrEt555",
}


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("HF_TOKEN", True),
        ("HUGGING_FACE_HUB_TOKEN", True),
        ("WANDB_API_KEY", True),
        ("OPENAI_APIKEY", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("PGPASSWORD", True),
        ("DB_PASSWD", True),
        ("GOOGLE_APPLICATION_CREDENTIALS", True),
        ("github_token", True),
        ("HF_HOME", False),
        ("PYTHONPATH", False),
        ("CUDA_VISIBLE_DEVICES", False),
        ("AUTOTUNE_METRICS_FILE", False),
    ],
)
def test_secret_names(name: str, secret: bool) -> None:
    assert is_secret_name(name) is secret


def _scan(folder: Path, needles: list[str]) -> list[str]:
    hits = []
    for f in folder.rglob("*"):
        if f.is_file():
            data = f.read_bytes()
            hits += [f"{f.name}: {n}" for n in needles if n.encode() in data]
    return hits


def test_secrets_reach_the_trial_but_never_its_folder(tmp_path: Path) -> None:
    trial_dir = tmp_path / "trial-0000"
    checks = [a for name in SECRETS for a in ("--check-env", name)]
    spec = LaunchSpec(
        argv=(sys.executable, str(ARGV_TRAINER), "--out", str(tmp_path / "seen.json"), *checks),
        cwd=tmp_path,
        env={**SECRETS, "HF_HOME": "/data/hf"},
    )
    result = run_trial(spec, trial_dir, LIMITS)
    assert result.returncode == 0, result.output_tail
    import hashlib

    got = _seen(tmp_path / "seen.json")["env_sha256"]
    assert got == {k: hashlib.sha256(v.encode()).hexdigest() for k, v in SECRETS.items()}, "not passed on"

    assert _scan(trial_dir, list(SECRETS.values())) == []
    command = (trial_dir / "command.sh").read_text()
    env = json.loads((trial_dir / "env.json").read_text())
    for name in SECRETS:
        assert f"{name}={REDACTED}" in command or f"{name}='{REDACTED}'" in command
        assert env[name] == REDACTED
    assert env["HF_HOME"] == "/data/hf" and "HF_HOME=/data/hf" in command


def test_secrets_in_a_flag_trainers_config_stay_out_of_the_trial_folder(tmp_path: Path) -> None:
    """sana's config may carry ``env:`` (a token for the hub): the trainer gets it, the disk does not."""
    trial_dir = tmp_path / "trial-0000"
    config = {
        "script": str(ARGV_TRAINER),
        "launcher": [sys.executable],
        "cwd": str(tmp_path),
        "args": ["--out", str(tmp_path / "seen.json"), "--check-env", "HF_TOKEN"],
        "env": {"HF_TOKEN": SECRETS["HF_TOKEN"], "HF_HOME": "/data/hf"},
    }
    path = tmp_path / "sana.yaml"
    path.write_text(json.dumps(config), encoding="utf-8")
    adapter = get_adapter("sana", hook=False)
    spec = adapter.render(
        adapter.load_baseline(path), {}, gradient_accumulation_steps=1, steps=2, trial_dir=trial_dir
    )
    result = run_trial(spec, trial_dir, LIMITS)
    assert result.returncode == 0, result.output_tail
    assert _seen(tmp_path / "seen.json")["env_sha256"]["HF_TOKEN"] is not None
    assert _scan(trial_dir, [SECRETS["HF_TOKEN"]]) == []


def test_process_environment_is_not_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Secrets autotune itself inherited (not added by an adapter) are passed on and never saved."""
    monkeypatch.setenv("HF_TOKEN", SECRETS["HF_TOKEN"])
    monkeypatch.setenv("MY_PLAIN_SETTING", "plain-value-xyz")
    trial_dir = tmp_path / "trial-0000"
    spec = LaunchSpec(
        argv=(
            sys.executable,
            str(ARGV_TRAINER),
            "--out",
            str(tmp_path / "seen.json"),
            "--check-env",
            "HF_TOKEN",
        ),
        cwd=tmp_path,
    )
    assert run_trial(spec, trial_dir, LIMITS).returncode == 0
    assert _seen(tmp_path / "seen.json")["env_sha256"]["HF_TOKEN"] is not None
    assert _scan(trial_dir, [SECRETS["HF_TOKEN"], "plain-value-xyz"]) == []


# --- secrets, end to end: a sweep, its study and its reports ----------------------------------------


@pytest.mark.process
def test_secrets_never_reach_the_study_or_the_reports(tmp_path: Path) -> None:
    """A token in autotune's own environment and one in a sana config's ``env:``: the trainer gets
    them; no file under the workdir (database included) and no report holds either."""
    inherited, configured = "hf_InHeRiTeD_0001", "hf_CoNfIgUrEd_0002"
    config = {
        "script": str(ARGV_TRAINER),
        "launcher": [sys.executable],
        "cwd": str(tmp_path),
        "args": [
            "--out",
            str(tmp_path / "seen.json"),
            "--check-env",
            "HF_TOKEN",
            "--check-env",
            "WANDB_API_KEY",
        ],
        "env": {"HF_TOKEN": configured},
    }
    (tmp_path / "sana.yaml").write_text(json.dumps(config), encoding="utf-8")
    env = cli_env(keep_pythonpath=False, WANDB_API_KEY=inherited)
    workdir = tmp_path / "runs"
    sweep = subprocess.run(
        [sys.executable, "-m", "autotune", "sweep", "--trainer", "sana", "--config", str(tmp_path / "sana.yaml"),
         "--workdir", str(workdir), "--vram-gb", "16", "--steps", "2", "--max-trials", "2"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert sweep.returncode == 0, sweep.stderr
    import hashlib

    seen = _seen(tmp_path / "seen.json")["env_sha256"]
    assert seen["HF_TOKEN"] == hashlib.sha256(configured.encode()).hexdigest()
    assert seen["WANDB_API_KEY"] == hashlib.sha256(inherited.encode()).hexdigest()
    for fmt in ("md", "html", "json"):
        report = subprocess.run(
            [sys.executable, "-m", "autotune", "report", "--workdir", str(workdir), "--format", fmt,
             "-o", str(tmp_path / f"report.{fmt}")],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert report.returncode == 0, report.stderr
        assert inherited not in report.stderr + report.stdout
    leaks = _scan(workdir, [inherited, configured]) + [
        f
        for f in (f"report.{x}" for x in ("md", "html", "json"))
        if _scan_file(tmp_path / f, [inherited, configured])
    ]
    assert leaks == []


def _scan_file(path: Path, needles: list[str]) -> bool:
    data = path.read_bytes()
    return any(n.encode() in data for n in needles)
