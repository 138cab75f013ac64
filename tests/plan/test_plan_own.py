"""``autotune plan --trainer X --config FILE`` for the trainers that ship no baseline per card tier:
the user's own config checked as the sweep reads it, the knobs the sweep would try, and a ``Next:``
sweep command that runs as printed, from another folder (the fakes stand in for the trainers)."""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import FAKES, run_cli
from tests.musubi_setup import make_setup
from tests.trainers.aitoolkit.test_trainer_aitoolkit import JOB
from tests.trainers.dpipe.test_trainer_dpipe import write_dpipe_setup

pytestmark = [pytest.mark.process, pytest.mark.timeout(300)]


def _musubi(tmp: Path) -> tuple[Path, list[str]]:
    return make_setup(tmp / "m"), []


def _dpipe(tmp: Path) -> tuple[Path, list[str]]:
    (tmp / "d").mkdir()
    return write_dpipe_setup(tmp / "d"), ["--trainer-dir", str(FAKES / "diffusion-pipe")]


def _aitk(tmp: Path) -> tuple[Path, list[str]]:
    (tmp / "job.yaml").write_text(JOB)
    return tmp / "job.yaml", ["--trainer-dir", str(FAKES / "ai-toolkit")]


#: trainer: (its setup, a knob its config receives, a card its baseline fits on)
CASES: dict[str, tuple[Callable[[Path], tuple[Path, list[str]]], str, str]] = {
    "musubi": (_musubi, "blocks_to_swap", "80"),
    "diffusion-pipe": (_dpipe, "blocks_to_swap", "24"),
    "ai-toolkit": (_aitk, "layer_offloading_transformer_percent", "80"),
}


@pytest.mark.parametrize("trainer", sorted(CASES))
def test_plan_checks_your_config_and_prints_a_sweep_that_runs_as_printed(
    tmp_path: Path, trainer: str
) -> None:
    setup, knob, card = CASES[trainer]
    config, where = setup(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    args = ["plan", "--trainer", trainer, "--config", str(config), *where]
    done = run_cli(*args, "--trainer-python", sys.executable, "--vram-gb", card, cwd=elsewhere)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"Config: {config}" in done.stdout
    assert f"  {knob}: " in done.stdout and "  batch_size: *" in done.stdout  # * marks the config's value
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("Next: ")]
    argv = shlex.split(line.removeprefix("Next: "))
    assert argv[:4] == ["autotune", "sweep", "--trainer", trainer] and str(config) in argv
    assert "--vram-gb" in argv and "--trainer-python" in argv
    as_json = run_cli(*args, "--trainer-python", sys.executable, "--vram-gb", card, "--json", cwd=elsewhere)
    data = json.loads(as_json.stdout)
    assert data["next"] == argv and knob in [k["name"] for k in data["knobs"]]
    runs = tmp_path / "runs"
    swept = run_cli(*argv[1:], "--max-trials", "1", "--steps", "3", "--workdir", str(runs), cwd=tmp_path)
    assert swept.returncode == 0, swept.stdout[-3000:] + swept.stderr[-3000:]
    (report,) = runs.glob("*/report.json")
    trials = json.loads(report.read_text())["trials"]
    assert [t["outcome"] for t in trials] == ["ok"], trials


def test_without_a_config_plan_says_the_command_to_run(tmp_path: Path) -> None:
    done = run_cli("plan", "--trainer", "musubi", "--vram-gb", "24", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("error:") == 1
    assert "add --config FILE" in done.stderr
    assert "'autotune sweep --trainer musubi --config FILE --vram-gb N'" in done.stderr


def test_flags_that_patch_a_shipped_config_are_refused_for_your_own(tmp_path: Path) -> None:
    config, _ = _musubi(tmp_path)
    done = run_cli("plan", "--trainer", "musubi", "--config", str(config), "--model", "x", cwd=tmp_path)
    assert done.returncode == 2 and "--model" in done.stderr and "edit your config" in done.stderr
