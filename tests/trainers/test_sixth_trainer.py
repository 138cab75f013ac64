"""A sixth trainer costs one folder, one registry line and one knob file: a stub trainer, written as a
plugin would be in a temporary package, passes the contract suite and runs a sweep from the CLI
with nothing else in autotune touched."""

from __future__ import annotations

import inspect
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import tests.trainers.test_trainer_contract as contract
from autotune.cli import main
from autotune.cli.parser import build_parser
from autotune.trainers import Baseline, TrainerAdapter, adapter_names, get_adapter, registry
from tests.trainers import Case

#: The whole plugin: its adapter (built from trainers/kit only), its knob file and its trainer.
ADAPTER = '''\
"""The sixth trainer: a YAML config, a Python script, its metrics file and its printed lines."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, ClassVar

from autotune.config.yamlconf import RoundTripConfig
from autotune.core.metrics import Readings, TrialMetrics
from autotune.core.verdict import combine
from autotune.core.yamltext import load_yaml
from autotune.errors import UsageError
from autotune.trainers.base import TrainerAdapter, TrainerTraits
from autotune.trainers.values import NO_WINNER, Baseline, Params, TrialLaunch, TrialRun, Winner
from autotune.trainers.kit.common import (
    check_params, effective_batch_of, hook_option, read_trial_record, take_options,
)
from autotune.trainers.kit.output import read_output, trainer_reading
from autotune.trainers.kit.readers.chain import printed_readings
from autotune.trainers.kit.readers.metricsfile import METRICS_FILE_NAME, read_metrics_file

HERE = Path(__file__).resolve().parent
KEYS = {"optimizer": "train.optimizer", "batch_size": "train.batch_size"}
ACCUM, STEPS = "train.accumulation", "train.steps"


class SixthAdapter(TrainerAdapter):
    name: ClassVar[str] = "sixth"
    knob_file: ClassVar[str] = str(HERE / "knobs.yaml")
    traits: ClassVar[TrainerTraits] = TrainerTraits(label="the sixth trainer", takes_hook=True)

    def __init__(self, **options: Any) -> None:
        take_options(options, self.name, ("hook",))
        self.hook = hook_option(options, self.name)

    def load_baseline(self, config: Path | None) -> Baseline:
        if config is None:
            raise UsageError("the sixth trainer sweeps your own config: pass --config FILE")
        text = config.read_text(encoding="utf-8")
        return Baseline(trainer=self.name, text=text, data=load_yaml(text, str(config)), path=config.resolve())

    def baseline_params(self, baseline: Baseline) -> dict[str, Any]:
        doc = RoundTripConfig.from_text(baseline.text)
        return {**{k: doc.get(key) for k, key in KEYS.items()}, "gradient_accumulation_steps": doc.get(ACCUM)}

    def _text(self, baseline: Baseline, params: Params, accum: int, steps: int | None = None) -> str:
        check_params(params, KEYS, self.name)
        doc = RoundTripConfig.from_text(baseline.text)
        edits = {KEYS[k]: v for k, v in params.items()} | {ACCUM: accum}
        doc.set_many(edits | ({STEPS: steps} if steps is not None else {}))
        return doc.dump()

    def write_trial(self, baseline: Baseline, params: Params, run: TrialRun) -> TrialLaunch:
        run.trial_dir.mkdir(parents=True, exist_ok=True)
        config = run.trial_dir / "config.yaml"
        config.write_text(self._text(baseline, params, run.gradient_accumulation_steps, run.steps), encoding="utf-8")
        batch = int(params.get("batch_size", self.baseline_params(baseline)["batch_size"]))
        return TrialLaunch(argv=(sys.executable, str(HERE / "train.py"), str(config)), cwd=run.trial_dir, batch_size=batch)

    def read_metrics(self, trial_dir: Path, output: str) -> TrialMetrics:
        text = read_output(trial_dir, output)
        own = trainer_reading(read_metrics_file(trial_dir / METRICS_FILE_NAME), *printed_readings(text), own_rate=True)
        return combine(Readings(trainer=own, effective_batch=effective_batch_of(read_trial_record(trial_dir))))

    def final_config(self, baseline: Baseline, params: Params, *, gradient_accumulation_steps: int) -> str:
        return self._text(baseline, params, gradient_accumulation_steps)

    def training_command(self, config_path: Path, winner: Winner = NO_WINNER) -> str:
        return f"{sys.executable} {HERE / 'train.py'} {config_path}"
'''
KNOBS = """\
knobs:
  - name: optimizer
    values: [adamw8bit, adamw]
  - name: batch_size
    type: int
fidelity: {optimizer: adamw}
"""
#: A trainer whose memory grows with the batch (2 GB a sample) and that runs out past 12 GB.
TRAIN = """\
import json, os, sys
conf = dict(l.split(":", 1) for l in open(sys.argv[1]).read().splitlines() if ":" in l and l.startswith("  "))
batch, steps = int(conf["  batch_size"]), int(conf.get("  steps", 3))
if 2 * batch > 12:
    sys.exit("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
for i in range(1, steps + 1):
    print(f"iter {i}: loss 0.5000, time {10 + batch}.00ms", flush=True)
with open(os.environ["AUTOTUNE_METRICS_FILE"], "w") as fh:
    json.dump({"step_time_s": (10 + batch) / 1000, "peak_vram_gb": 2.0 * batch}, fh)
"""
CONFIG = """\
# my sixth trainer's config (comments must survive)
train:
  optimizer: adamw8bit  # 8-bit
  batch_size: 1
  accumulation: 1
  steps: 1000
"""
OUTPUT = "".join(f"iter {i}: loss 0.5000, time 12.00ms\n" for i in range(1, 8))


@pytest.fixture
def sixth(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The plugin in its own folder, and its one registry line."""
    root = tmp_path / "plugins" / "sixth"
    root.mkdir(parents=True)
    for name, text in {
        "__init__.py": "",
        "adapter.py": ADAPTER,
        "knobs.yaml": KNOBS,
        "train.py": TRAIN,
    }.items():
        (root / name).write_text(text, encoding="utf-8")
    monkeypatch.syspath_prepend(str(root.parent))
    monkeypatch.setitem(registry.ADAPTERS, "sixth", registry.Plugin("sixth.adapter:SixthAdapter", "a stub"))
    yield root
    for name in [m for m in sys.modules if m == "sixth" or m.startswith("sixth.")]:
        del sys.modules[name]


def _make(tmp: Path) -> tuple[TrainerAdapter, Baseline]:
    (tmp / "sixth.yaml").write_text(CONFIG, encoding="utf-8")
    adapter = get_adapter("sixth")
    return adapter, adapter.load_baseline(tmp / "sixth.yaml")


def test_the_stub_passes_every_contract_test(sixth: Path, tmp_path: Path) -> None:
    case = Case("sixth", _make, {"optimizer": "adamw", "batch_size": 2}, OUTPUT)
    suite = [
        f
        for n, f in vars(contract).items()
        if n.startswith("test_") and "case" in inspect.signature(f).parameters
    ]
    assert len(suite) >= 9
    for i, test in enumerate(suite):
        folder = tmp_path / f"{i}-{test.__name__}"  # each in its own folder, as pytest gives them
        folder.mkdir()
        test(case, folder)
    assert "sixth" in adapter_names()


def test_the_cli_lists_the_stub(sixth: Path) -> None:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    trainer = next(a for a in sub.choices["sweep"]._actions if a.dest == "trainer")  # type: ignore[index]
    assert "sixth: a stub" in str(trainer.help)


@pytest.mark.process
def test_a_sweep_of_the_stub_from_the_cli_finds_the_largest_batch_that_fits(
    sixth: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "sixth.yaml").write_text(CONFIG, encoding="utf-8")
    argv = [
        "sweep",
        "--trainer",
        "sixth",
        "--config",
        str(tmp_path / "sixth.yaml"),
        "--workdir",
        str(tmp_path / "runs"),
        "--vram-gb",
        "16",
        "--steps",
        "5",
        "--max-batch-size",
        "8",
        "--no-hook",
    ]
    assert main(argv) == 0, capsys.readouterr().err
    storage = f"sqlite:///{tmp_path / 'runs' / 'studies.db'}"
    capsys.readouterr()
    assert main(["report", "--storage", storage, "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    outcomes = {t["params"]["batch_size"]: t["outcome"] for t in report["trials"]}
    assert outcomes.get(8) == "oom" or outcomes.get(7) == "oom", outcomes
    assert report["best"]["params"]["optimizer"] == "adamw"
    assert report["best"]["peak_vram_gb"] <= 16 * 0.9
    best = tmp_path / "best.yaml"
    assert main(["report", "--storage", storage, "--write-config", str(best)]) == 0
    assert "# my sixth trainer's config" in best.read_text()
