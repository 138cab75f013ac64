"""The trainer registry: import strings resolved on first use, and the ``--trainer`` help built from it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.cli.parser import build_parser
from autotune.trainers import TrainerAdapter, adapter_class, adapter_names, registry
from tests.helpers import REPO

#: A trainer of one optimizer step per line that writes the metrics file ``--cmd`` trainers may write.
TRAIN = """\
import json, os, sys
batch = int(sys.argv[1])
with open(os.environ["AUTOTUNE_METRICS_FILE"], "w") as fh:
    json.dump({"step_time_s": 0.01 * batch, "peak_vram_gb": 0.5 * batch}, fh)
"""

#: Runs a --cmd sweep in this process, then prints which trainer modules it imported.
PROBE = """\
import json, sys
from autotune.cli import main
rc = main(sys.argv[1:])
print(json.dumps({"rc": rc, "modules": sorted(m for m in sys.modules if m.startswith("autotune.trainers"))}))
"""


@pytest.mark.process
def test_a_cmd_sweep_imports_the_command_adapter_and_no_other_trainer(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(TRAIN, encoding="utf-8")
    argv = [
        sys.executable, "-c", PROBE, "sweep", "--cmd", f"{sys.executable} train.py {{batch_size}}",
        "--workdir", str(tmp_path / "runs"), "--vram-gb", "16", "--steps", "3", "--max-trials", "2",
        "--max-batch-size", "2", "--no-hook",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["rc"] == 0, done.stdout + done.stderr
    packages = {m.split(".")[2] for m in report["modules"] if m.count(".") >= 2}
    assert "command" in packages
    # values: the contract's value types (trainers/values.py, re-exported by base), no trainer's own
    assert packages <= {"base", "values", "registry", "kit", "command"}, packages


def test_every_entry_imports_the_adapter_of_its_name() -> None:
    for name in adapter_names():
        entry = registry.ADAPTERS[name]
        assert isinstance(entry, registry.Plugin), name
        assert adapter_class(name).name == name
        assert registry.summary(name) and "\n" not in registry.summary(name)
        assert entry.plans == adapter_class(name).traits.plan_baselines, name  # plan --help tells the truth
    assert adapter_class(registry.CMD_TRAINER).traits.takes_template


def test_a_trainer_that_says_what_its_full_run_drops_has_the_trait_the_report_asks() -> None:
    """The report reads the baseline again only for ``drops_data`` trainers: one that overrides
    ``data_warnings`` without the trait would never have its warnings shown."""
    for name in adapter_names():
        cls = adapter_class(name)
        overrides = cls.data_warnings is not TrainerAdapter.data_warnings
        assert overrides == cls.traits.drops_data, name
    assert adapter_class("diffusion-pipe").traits.drops_data


def _trainer_help(command: str) -> str:
    sub = next(a for a in build_parser()._actions if a.dest == "command")  # the subcommands
    parser = sub.choices[command]  # type: ignore[index]
    action = next(a for a in parser._actions if a.dest == "trainer")
    return str(action.help)


def test_sweep_help_lists_every_trainer_with_its_line_and_plan_those_it_plans() -> None:
    sweep = _trainer_help("sweep")
    for name in adapter_names():
        assert f"{name}: {registry.summary(name)}" in sweep
    plan = _trainer_help("plan")
    planned = [n for n in adapter_names() if adapter_class(n).traits.plan_baselines]
    assert planned and all(f"{n}: " in plan for n in planned)
    assert not any(f" {n}: " in plan for n in adapter_names() if n not in planned)
