"""Every bad input over the command line: exit 2, one clear ``error:`` message, no traceback.

One table for all commands. A row is the argv (with ``{tmp}``-style placeholders for
files the ``world`` fixture writes) and the fragments the message must contain: what
was wrong, where (flag, file:line:col), and a hint how to fix it. Every row also runs
with ``--debug``, which must add the traceback and keep the exit code.

The rows run in-process through ``autotune.cli.main`` (fast); a sample runs as a real
``python -m autotune`` process, which is what users meet.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from autotune.cli import main
from tests.helpers import cli_env


@dataclass(frozen=True)
class Row:
    id: str
    argv: tuple[str, ...]
    expect: tuple[str, ...]


def row(id: str, argv: str | list[str], *expect: str) -> Row:
    """``argv`` as a string is split on spaces (placeholders never contain spaces)."""
    return Row(id, tuple(argv.split() if isinstance(argv, str) else argv), expect)


_MINIMAL_LTX2 = """\
model:
  model_path: "/models/ltx-2.safetensors"
  text_encoder_path: "/models/gemma"
  training_mode: "lora"
data:
  preprocessed_data_root: "/data/preprocessed"
optimization:
  learning_rate: 1e-4
  steps: 100
  batch_size: 1
  gradient_accumulation_steps: 1
output_dir: "outputs/run"
"""


@pytest.fixture(scope="module")
def study_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An Optuna study database with one study, ``s1``, for the commands that read one."""
    import optuna

    db = tmp_path_factory.mktemp("db") / "studies.db"
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    optuna.create_study(storage=f"sqlite:///{db}", study_name="s1")
    return db


@pytest.fixture
def world(tmp_path: Path, study_db: Path) -> dict[str, str]:
    """The files the rows point at; returns the placeholder -> path map."""
    files = {
        # A stray indent on line 3: the parser reports 3:14.
        "indent.yaml": "optimization:\n  steps: 10\n   batch_size: 2\n",
        "unclosed.yaml": "optimization:\n  steps: [1, 2\n",
        "typo.yaml": "optimization:\n  stepz: 10\n",
        "unknown_section.yaml": "optimisation:\n  steps: 10\n",
        "dup.yaml": "optimization:\n  steps: 10\n  steps: 20\n",
        "tag.yaml": 'optimization: !!python/object/apply:os.system ["touch {tmp}/pwned"]\n',
        "list.yaml": "- a\n- b\n",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text.replace("{tmp}", str(tmp_path)), encoding="utf-8")
    (tmp_path / "latin1.yaml").write_bytes("optimization:\n  name: caf\xe9\n".encode("latin-1"))
    (tmp_path / "afile").write_text("x\n")
    (tmp_path / "empty-dir").mkdir()
    (tmp_path / "dir.yaml").mkdir()
    # A minimal LTX-2 checkout (packages/ltx-trainer with its configs) and the assets to patch in.
    pkg = tmp_path / "LTX-2" / "packages" / "ltx-trainer"
    (pkg / "configs").mkdir(parents=True)
    (pkg / "scripts").mkdir()
    (pkg / "scripts" / "train.py").write_text("# stand-in\n")
    for name in ("t2v_lora.yaml", "t2v_lora_low_vram.yaml"):
        (pkg / "configs" / name).write_text(_MINIMAL_LTX2)
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "ltx-2.safetensors").write_bytes(b"\0")
    (tmp_path / "models" / "model.bin").write_bytes(b"\0")
    return {"{tmp}": str(tmp_path), "{ltx2}": str(tmp_path / "LTX-2"), "{db}": f"sqlite:///{study_db}"}


def expand(argv: tuple[str, ...], subs: dict[str, str]) -> list[str]:
    out = []
    for a in argv:
        for k, v in subs.items():
            a = a.replace(k, v)
        out.append(a)
    return out


P = "plan --vram-gb 48"  # a plan that needs no GPU
PL = f"{P} --trainer-dir {{ltx2}}"  # ... with an LTX-2 checkout
S = "sweep --cmd x --workdir {tmp}/runs"  # a sweep that reaches each check before any trial
PR = "plan --trainer reference --vram-gb 48 -o {tmp}/out.yaml --config"  # a plan of one's own YAML

ROWS: list[Row] = [
    # --- the command line itself ------------------------------------------------------------------
    row("unknown-command", "sweeep", "invalid choice: 'sweeep'", "choose from", "--help"),
    row("unknown-flag", "probe --no-such-flag", "--no-such-flag", "--help"),
    row("stray-argument", "probe extra", "unrecognized arguments: extra", "see 'autotune probe --help'"),
    # a flag of another command: the help of the command it was given to, not the top-level one
    row("sweep-flag-to-plan", "plan --max-trials 3", "autotune plan: unrecognized", "see 'autotune plan --help'"),
    row("cmd-to-plan", ["plan", "--cmd", "python train.py"], "unrecognized arguments: --cmd",
        "nothing for a --cmd template", "run 'autotune sweep --cmd TEMPLATE'", "see 'autotune plan --help'"),
    row("flag-missing-value", "plan --vram-gb", "--vram-gb", "expected one argument", "--help"),
    # --- plan: wrong types and ranges -------------------------------------------------------------
    row("vram-not-a-number", "plan --vram-gb abc", "--vram-gb", "'abc'", "like 48"),
    row("vram-negative", "plan --vram-gb -3", "--vram-gb", "positive"),
    row("vram-zero", "plan --vram-gb 0", "--vram-gb", "positive"),
    row("vram-nan", "plan --vram-gb nan", "--vram-gb", "positive"),
    row("vram-inf", "plan --vram-gb inf", "--vram-gb", "positive"),
    row("gpus-not-a-number", f"{P} --gpus x", "--gpus", "whole number, like 8", "'x'"),
    row("gpus-fraction", f"{P} --gpus 1.5", "--gpus", "whole number", "'1.5'"),
    row("gpus-zero", f"{P} --gpus 0", "--gpus", "at least 1"),
    row("gpus-negative", f"{P} --gpus -2", "--gpus", "at least 1"),
    row("card-too-small", "plan --vram-gb 8", "8 GB", "32 GB", "--force", "--vram-gb N"),
    # --- plan: trainers ------------------------------------------------------------------------
    row("unknown-trainer", f"{P} --trainer nope", "unknown trainer 'nope'", "ltx2, reference", "--trainer"),
    row("trainer-without-baselines", f"{P} --trainer sana", "add --config FILE", "autotune sweep --trainer sana --config"),
    # --- plan: missing and wrong paths ------------------------------------------------------------
    row("trainer-dir-missing", f"{P} --trainer-dir {{tmp}}/nope", "--trainer-dir", "no such directory", "LTX-2"),
    row("trainer-dir-is-file", f"{P} --trainer-dir {{tmp}}/afile", "--trainer-dir", "is a file"),
    row(
        "trainer-dir-not-checkout",
        f"{P} --trainer-dir {{tmp}}/empty-dir",
        "not an LTX-2 checkout",
        "packages/ltx-trainer",
    ),
    row("config-name-unknown", f"{PL} --config nope", "nope.yaml", "shipped configs", "--config NAME"),
    row("config-file-missing", f"{P} --config {{tmp}}/missing.yaml", "--config", "missing.yaml", "no such file", "check the path"),
    row("model-missing", f"{PL} --model {{tmp}}/no.safetensors", "--model", "no such file", ".safetensors"),
    row("model-not-safetensors", f"{PL} --model {{tmp}}/models/model.bin", "--model", ".safetensors"),
    row("model-url", f"{PL} --model https://hf.co/x.safetensors", "--model", "URL", "local path"),
    row("text-encoder-missing", f"{PL} --text-encoder {{tmp}}/nope", "--text-encoder", "no such file"),
    row("data-missing", f"{PL} --data {{tmp}}/nope", "--data", "no such directory", "process_dataset.py"),
    row("data-not-preprocessed", f"{PL} --data {{tmp}}/models", "--data", "missing", "conditions/"),
    row("output-dir-is-file", f"{PL} --output-dir {{tmp}}/afile", "--output-dir", "a file is in the way"),
    row("paths-without-checkout", f"{P} --model {{tmp}}/x.safetensors", "--model", "--trainer-dir DIR"),
    row("output-without-checkout", f"{P} -o {{tmp}}/plan.yaml", "-o", "--trainer-dir DIR"),
    # --- plan: YAML content -------------------------------------------------------------------
    row("yaml-bad-indent", f"{PR} {{tmp}}/indent.yaml", "indent.yaml:3:14", "YAML syntax error", "Fix the file"),
    row("yaml-unclosed", f"{PR} {{tmp}}/unclosed.yaml", "unclosed.yaml:3:1", "YAML syntax error", "Fix the file"),
    row("yaml-unknown-key", f"{PR} {{tmp}}/typo.yaml", "typo.yaml:2:3", "'optimization.stepz'", "did you mean 'steps'"),
    row("yaml-unknown-section", f"{PR} {{tmp}}/unknown_section.yaml", "unknown_section.yaml:1:1", "optimisation"),
    row("yaml-duplicate-key", f"{PR} {{tmp}}/dup.yaml", "dup.yaml:3:3", "duplicate key 'steps'", "line 2", "delete"),
    row("yaml-python-tag", f"{PR} {{tmp}}/tag.yaml", "tag.yaml:1:15", "!!python/object/apply:os.system", "safe loader"),
    row("yaml-not-a-mapping", f"{PR} {{tmp}}/list.yaml", "list.yaml", "mapping of sections", "found a list"),
    row("yaml-not-utf8", f"{PR} {{tmp}}/latin1.yaml", "latin1.yaml", "not UTF-8", "save"),
    # --- sweep: wrong types and ranges ----------------------------------------------------------
    row("steps-not-a-number", f"{S} --steps x", "--steps", "whole number", "'x'"),
    row("steps-zero", f"{S} --steps 0", "--steps", "at least 1"),
    row("max-trials-zero", f"{S} --max-trials 0", "--max-trials", "at least 1"),
    row("max-batch-size-negative", f"{S} --max-batch-size -4", "--max-batch-size", "at least 1"),
    row("budget-not-a-duration", f"{S} --budget abc", "--budget", "'abc'", "like 90s, 20m, 8h or 1h30m"),
    row("budget-zero", f"{S} --budget 0", "--budget", "more than zero"),
    row("trial-timeout-negative", f"{S} --trial-timeout -1", "--trial-timeout", "more than zero"),
    row("stall-timeout-bad-unit", f"{S} --stall-timeout 5d", "--stall-timeout", "'5d'", "like 90s"),
    row("headroom-too-big", f"{S} --headroom 1.5", "--headroom", "below 1"),
    row("headroom-not-a-number", f"{S} --headroom lots", "--headroom", "like 0.1 (or 10%)"),
    row("sweep-vram-zero", f"{S} --vram-gb 0", "--vram-gb", "positive"),
    # --- sweep: trainers, templates, configs ----------------------------------------------------
    row("sweep-unknown-trainer", "sweep --trainer nope", "unknown trainer 'nope'", "--trainer NAME"),
    row("sweep-ltx2-without-config", "sweep --trainer ltx2", "needs a config", "autotune plan -o plan.yaml"),
    row("cmd-unknown-placeholder", f"{S} --cmd x{{bogus}}", "{bogus}", "unknown placeholder", "known ones"),
    row("cmd-bad-brace", ["sweep", "--cmd", "python t.py {batch_size"], "{batch_size", "{{ and }}"),
    row("cmd-unclosed-quote", ["sweep", "--cmd", 'python t.py "x'], "No closing quotation"),
    row("cmd-with-other-trainer", f"{S} --trainer ltx2", "--cmd goes with --trainer command", "drop one"),
    row("sweep-config-missing", "sweep --trainer ltx2 --config {tmp}/nope.yaml", "nope.yaml", "not found"),
    row("sweep-config-bad-yaml", "sweep --trainer ltx2 --config {tmp}/indent.yaml", "indent.yaml:3:14", "Fix"),
    row("sweep-config-tag", "sweep --trainer ltx2 --config {tmp}/tag.yaml", "tag.yaml:1:15", "safe loader"),
    row("sweep-config-duplicate", "sweep --trainer ltx2 --config {tmp}/dup.yaml", "dup.yaml:3:3", "duplicate key"),
    row("sweep-card-too-small", "sweep --trainer ltx2 --config {tmp}/typo.yaml --vram-gb 8", "32 GB", "--force"),
    # --- sweep and status: storage and names ---------------------------------------------------
    row("sweep-storage-not-url", f"{S} --storage notaurl", "--storage", "not a database URL", "sqlite:///"),
    row("sweep-storage-unknown-kind", f"{S} --storage foo://u:hunter2@h/db", "unknown database kind 'foo'", "u:***@h"),
    row("study-dotdot", f"{S} --study ../x", "--study '../x'", "not a valid study name", "e.g. --study"),
    row("study-absolute", f"{S} --study /abs", "--study '/abs'", "not a valid study name"),
    row("study-slash", f"{S} --study a/b", "--study 'a/b'", "not a valid study name"),
    row("study-nul", [*S.split(), "--study", "a\0b"], "not a valid study name"),
    row("study-dot", f"{S} --study .", "not a valid study name"),
    row("status-storage-not-url", "status --storage notaurl", "--storage", "not a database URL"),
    row("status-storage-unknown-kind", "status --storage foo://x", "unknown database kind 'foo'"),
    row("status-no-database", "status --workdir {tmp}/nope", "no study database", "--workdir DIR"),
    row("status-study-unknown", "status --storage {db} --study nope", "no study named 'nope'", "s1"),
    # --- report ---------------------------------------------------------------------------------
    row("report-format", "report --format pdf", "--format", "invalid choice: 'pdf'", "md"),
    row("report-storage-not-url", "report --storage notaurl", "--storage", "not a database URL", "sqlite:///"),
    row("report-storage-unknown-kind", "report --storage foo://x", "unknown database kind 'foo'", "sqlite:///"),
    row("report-storage-password-hidden", "report --storage foo://u:hunter2@h/db", "u:***@h"),
    row("report-no-database", "report --workdir {tmp}/nope", "no study database", "autotune sweep"),
    row("report-study-unknown", "report --storage {db} --study nope", "no study named 'nope'", "s1"),
    row("report-study-path", "report --storage {db} --study ../s1", "no study named '../s1'", "s1"),
    row("report-study-missing-value", "report --study", "--study", "expected one argument"),
    row("yaml-is-a-directory", f"{PR} {{tmp}}/dir.yaml", "dir.yaml", "is a directory", "the YAML file itself"),
]  # fmt: skip


@pytest.mark.parametrize("case", ROWS, ids=[r.id for r in ROWS])
def test_bad_input_exits_2_with_a_clear_message(
    case: Row, world: dict[str, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(world["{tmp}"])
    argv = expand(case.argv, world)
    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc == 2, f"exit {rc}\nstdout: {out}\nstderr: {err}"
    assert err.startswith("error: "), err
    assert "Traceback" not in err and "internal error" not in err, err
    for fragment in case.expect:
        assert fragment in err, f"{fragment!r} not in: {err}"
    assert not Path(world["{tmp}"], "pwned").exists()
    assert "hunter2" not in err
    # Refused before anything was written: no workdir, no database, no trial folder.
    assert not Path(world["{tmp}"], "runs").exists() and not Path(world["{tmp}"], "autotune-runs").exists()

    rc = main(["--debug", *argv])
    _, err = capsys.readouterr()
    assert rc == 2 and "Traceback (most recent call last)" in err and "error: " in err, err


@pytest.mark.parametrize(
    "case",
    [
        r
        for r in ROWS
        if r.id in {"unknown-command", "vram-not-a-number", "yaml-bad-indent", "unknown-trainer"}
    ],
    ids=lambda r: r.id,
)
def test_bad_input_as_a_real_process(case: Row, world: dict[str, str]) -> None:
    """What a user meets: ``python -m autotune ...`` exits 2 with one message, no traceback."""
    env = cli_env(keep_pythonpath=False)
    proc = subprocess.run(
        [sys.executable, "-m", "autotune", *expand(case.argv, world)],
        capture_output=True,
        text=True,
        env=env,
        cwd=world["{tmp}"],
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr, proc.stderr
    assert all(f in proc.stderr for f in case.expect), proc.stderr
    assert proc.stdout == ""
