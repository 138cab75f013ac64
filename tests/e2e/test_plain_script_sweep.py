"""#15's "done when": a plain PyTorch script nobody here designed for autotune, swept through ``--cmd``.

The subject is ``tests/fakes/charlm_train.py``: its own loop, its own print format (no reader of ours
parses it), no metrics file, partial batches. On CPU the trial-side hook (on by default) is all that
measures it: step times, the loss given to ``backward()``, and peaks on the card ``--vram-gb`` emulates,
where larger batches raise torch's own OutOfMemoryError. The template names two knobs only.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import FAKES, autotune_argv, cli_env

CARD_GB = 0.01  # 10.24 MiB: batch 16 without checkpointing and 32 with it do not fit (see the fake)
# A ladder (--batch-sizes) keeps the sweep short for CI; the integer search is tested elsewhere.
SCRIPT = FAKES / "charlm_train.py"
TEMPLATE = (
    f"{shlex.quote(sys.executable)} {shlex.quote(str(SCRIPT))} --batch-size {{batch_size}} "
    "--grad-ckpt {gradient_checkpointing} --max-iters {steps} --out {trial_dir}/weights"
)

pytestmark = [pytest.mark.torch, pytest.mark.process, pytest.mark.timeout(900)]


def _run(argv: list[str], cwd: Path, timeout: float = 800) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=_clean_env(), capture_output=True, text=True, timeout=timeout)


def _clean_env() -> dict[str, str]:
    """No AUTOTUNE_ variable from outside, and this checkout alone on PYTHONPATH."""
    return cli_env(drop=("AUTOTUNE_",), keep_pythonpath=False)


def _sweep(tmp: Path, template: str, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = [
        sys.executable, "-m", "autotune", "sweep", "--workdir", str(tmp / "runs"), "--cmd", template,
        "--vram-gb", str(CARD_GB), "--steps", "8", "--batch-sizes", "1,2,4,8,16,32", *extra,
    ]  # fmt: skip
    return _run(argv, tmp)


def _report(tmp: Path) -> dict[str, Any]:
    storage = f"sqlite:///{tmp / 'runs' / 'studies.db'}"
    done = _run([*autotune_argv(), "report", "--storage", storage, "--format", "json"], tmp)
    assert done.returncode == 0, done.stdout + done.stderr
    return dict(json.loads(done.stdout))


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("charlm")
    started = time.monotonic()
    done = _sweep(tmp, TEMPLATE, "--full-steps", "20")
    wall = time.monotonic() - started
    assert done.returncode == 0, done.stdout + done.stderr
    return {"tmp": tmp, "stdout": done.stdout, "report": _report(tmp), "wall_s": wall}


def _argv_of(trial_dir: str) -> list[str]:
    record = json.loads((Path(trial_dir) / "adapter.json").read_text())
    return [str(a) for a in record["argv"]]


def test_only_the_templates_knobs_move_and_no_command_runs_twice(swept: dict[str, Any]) -> None:
    every = swept["report"]["trials"]
    for trial in every:
        assert set(trial["params"]) == {"batch_size", "gradient_checkpointing"}, trial
    # A near-tie's contenders may be re-measured at the end, named so; nothing else runs twice.
    trials = [t for t in every if "remeasure_of" not in t]
    assert len(trials) >= 4, trials
    for again in (t for t in every if "remeasure_of" in t):
        assert again["params"] == every[again["remeasure_of"]]["params"]
    seen = {(t["params"]["batch_size"], t["params"]["gradient_checkpointing"]) for t in trials}
    assert len(seen) == len(trials)
    ran = [tuple(re.sub(r"trial-[^/ ]+", "TRIAL", a) for a in _argv_of(t["trial_dir"])) for t in trials]
    assert len(set(ran)) == len(ran)
    warnings = " ".join(swept["report"]["warnings"])
    assert "quantiz" not in warnings.lower() and "LoRA" not in warnings and "clip" not in warnings


def test_ok_trials_are_measured_by_the_hook_and_big_batches_are_real_ooms(swept: dict[str, Any]) -> None:
    trials = swept["report"]["trials"]
    ok = [t for t in trials if t["outcome"] == "ok"]
    ooms = [t for t in trials if t["outcome"] == "oom"]
    assert ok and ooms, [(t["params"], t["outcome"]) for t in trials]
    for t in ok:
        assert t["peak_vram_gb"] and 0 < t["peak_vram_gb"] <= CARD_GB, t
        assert t["step_time_s"] and t["step_time_s"] > 0, t
    for t in ooms:
        assert t["params"]["batch_size"] >= 16, t
        output = (Path(t["trial_dir"]) / "stderr.log").read_text(errors="replace")
        assert "OutOfMemoryError" in output, output[-2000:]


def test_the_winner_fits_and_its_printed_command_runs(swept: dict[str, Any]) -> None:
    doc = swept["report"]
    best = doc["best"]
    assert best is not None and best["outcome"] == "ok"
    assert best["peak_vram_gb"] <= CARD_GB * (1 - doc["headroom"]), best
    command = doc["command"]
    assert command and "{" not in command
    elsewhere = swept["tmp"] / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    launched = subprocess.run(
        ["bash", "-c", command], cwd=elsewhere, env=_clean_env(),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert launched.returncode == 0, launched.stdout + launched.stderr
    assert "finished 20 iterations" in launched.stdout
    words = shlex.split(command.split("&&", 1)[1])
    assert words[words.index("--batch-size") + 1] == str(best["params"]["batch_size"])
    assert Path(words[words.index("--out") + 1]).joinpath("charlm.pt").is_file()


def test_a_learning_rate_that_makes_the_loss_nan_is_caught(tmp_path: Path) -> None:
    done = _sweep(tmp_path, TEMPLATE + " --lr 1e9", "--max-trials", "2")
    trials = _report(tmp_path)["trials"]
    assert trials and trials[0]["outcome"] == "nan", (done.stdout + done.stderr)[-3000:]
