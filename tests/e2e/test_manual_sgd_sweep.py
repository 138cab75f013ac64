"""A script that updates its weights by hand, swept through the real ``autotune sweep --cmd``.

The subject (``tests/fakes/manual_sgd_lm.py``) trains as pytorch/examples' ``word_language_model``
does: ``loss.backward()`` then ``p.data.add_(p.grad, alpha=-lr)``, no ``torch.optim`` optimizer and no
``DataLoader``. Torch's optimizer step hook never fires, so before the hook timed ``backward()`` every
trial was a crash ("no step time or samples/s could be read"). Now the hook's backward lines are
its steps, the trial says so, the batch the template sets is credited per step, and the script's
own ``| ms/batch N |`` line is kept beside ours. Untimed: it checks outcomes, sources and the
arithmetic between the recorded figures, never how fast anything ran.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from autotune.trainers.kit.readers.hookfile import BACKWARD_NOTE
from tests.helpers import FAKES, cli_env, run_cli

pytest.importorskip("torch")
pytestmark = [pytest.mark.torch, pytest.mark.process, pytest.mark.untimed, pytest.mark.timeout(600)]

SCRIPT = FAKES / "manual_sgd_lm.py"
TEMPLATE = (
    f"{shlex.quote(sys.executable)} {shlex.quote(str(SCRIPT))} --batch_size {{batch_size}} "
    "--tokens 3000 --log-interval 4"
)


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, cwd=cwd, env=cli_env(drop=("AUTOTUNE_",), keep_pythonpath=False), timeout=500)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("manual-sgd")
    runs = tmp / "runs"
    done = _run(
        "sweep", "--workdir", str(runs), "--cmd", TEMPLATE, "--vram-gb", "1", "--batch-sizes", "2,4,8",
        "--max-trials", "3", cwd=tmp,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    shown = _run("report", "--storage", f"sqlite:///{runs / 'studies.db'}", "--format", "json", cwd=tmp)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    return dict(json.loads(shown.stdout))


def test_every_trial_is_timed_at_backward_and_says_so(report: dict[str, Any]) -> None:
    trials = report["trials"]
    assert len(trials) == 3, trials
    for t in trials:
        assert t["outcome"] == "ok", t
        assert t["timed_by"] == "hook", t
        assert BACKWARD_NOTE in t["reason"], t
        assert t["steps_run"] > 10 and t["steady_steps"] > 0, t


def test_samples_per_step_is_the_batch_the_template_sets(report: dict[str, Any]) -> None:
    # No DataLoader: the hook counted nothing, so each backward trained the --batch_size columns.
    for t in report["trials"]:
        assert t["effective_batch"] == t["params"]["batch_size"], t
        assert t["samples_per_s"] * t["step_time_s"] == pytest.approx(t["params"]["batch_size"], rel=5e-3)


def test_the_scripts_own_ms_per_batch_is_kept_beside_ours(report: dict[str, Any]) -> None:
    for t in report["trials"]:
        assert t["trainer_step_time_s"] > 0, t
        assert t["trainer_samples_per_s"] * t["trainer_step_time_s"] == pytest.approx(
            t["params"]["batch_size"], rel=5e-3
        )
        printed = (Path(t["trial_dir"]) / "stdout.log").read_text(errors="replace")
        assert "| ms/batch" in printed
