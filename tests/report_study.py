"""A hand-built study that follows the sweep's contract, and a small YAML adapter, for report tests.

The study is what a sweep on a 48 GB card would leave behind: a baseline, relaxations
that fit, one that fits but is above the headroom limit, an OOM, a candidate ruled
out by dominance, and a trial still running. Deterministic: no clocks, no randomness.
"""

from __future__ import annotations

import shlex
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution
from optuna.trial import TrialState
from sqlalchemy import event

from autotune.config.yamlconf import RoundTripConfig
from autotune.core.metrics import TrialMetrics
from autotune.core.yamltext import load_yaml
from autotune.trainers.base import TrainerAdapter, TrainerTraits
from autotune.trainers.values import NO_WINNER, Baseline, Params, TrialLaunch, TrialRun, Winner

TEST_TRAINER = "yaml-test"

#: study param -> LTX-2 config key (the schema the reference trainer shares).
KNOB_KEYS = {
    "quantization": "acceleration.quantization",
    "optimizer": "optimization.optimizer_type",
    "batch_size": "optimization.batch_size",
    "gradient_checkpointing": "optimization.enable_gradient_checkpointing",
}

DISTRIBUTIONS: dict[str, BaseDistribution] = {
    "quantization": CategoricalDistribution(["int8-quanto", "none"]),
    "optimizer": CategoricalDistribution(["adamw8bit", "adamw"]),
    "batch_size": CategoricalDistribution([1, 2, 4]),
    "gradient_checkpointing": CategoricalDistribution([True, False]),
}

BASE = {
    "quantization": "int8-quanto",
    "optimizer": "adamw8bit",
    "batch_size": 1,
    "gradient_checkpointing": True,
}


class YamlTestAdapter(TrainerAdapter):
    """A real (if small) adapter over LTX-2-style YAML: edits the baseline text in place.

    Not registered at import (other tests list the registry): tests add it with
    ``monkeypatch.setitem(registry.ADAPTERS, TEST_TRAINER, YamlTestAdapter)``.
    """

    name: ClassVar[str] = TEST_TRAINER
    knob_file: ClassVar[str] = "yaml-test.yaml"
    traits: ClassVar[TrainerTraits] = TrainerTraits(
        tiered=True,  # LTX-2-style: its reports name the card's tier
        longer_input="a longer clip in the data",
    )

    def load_baseline(self, config: Path | None) -> Baseline:
        assert config is not None
        text = config.read_text(encoding="utf-8")
        return Baseline(trainer=self.name, text=text, data=load_yaml(text, str(config)), path=config)

    def baseline_params(self, baseline: Baseline) -> dict[str, Any]:
        doc = RoundTripConfig.from_text(baseline.text)
        out = {k: doc.get(key) for k, key in KNOB_KEYS.items()}
        out["quantization"] = out["quantization"] or "none"
        out["gradient_accumulation_steps"] = doc.get("optimization.gradient_accumulation_steps")
        return out

    def write_trial(self, baseline: Baseline, params: Params, run: TrialRun) -> TrialLaunch:
        raise NotImplementedError("reports never render trials")

    def read_metrics(self, trial_dir: Path, output: str) -> TrialMetrics:
        return TrialMetrics()

    def final_config(self, baseline: Baseline, params: Params, *, gradient_accumulation_steps: int) -> str:
        doc = RoundTripConfig.from_text(baseline.text, str(baseline.path))
        wanted = {
            key: (None if params[k] == "none" else params[k]) for k, key in KNOB_KEYS.items() if k in params
        }
        wanted["optimization.gradient_accumulation_steps"] = gradient_accumulation_steps
        for key, value in wanted.items():
            if not doc.has(key) or doc.get(key) != value:  # unchanged lines stay byte-identical (quotes too)
                doc.set(key, value)
        return doc.dump()

    def training_command(self, config_path: Path, winner: Winner = NO_WINNER) -> str:
        return f"cd /opt/trainer && python scripts/train.py {shlex.quote(str(config_path))} --disable-progress-bars"


def _trial(
    params: Mapping[str, Any],
    attrs: Mapping[str, Any],
    state: TrialState = TrialState.COMPLETE,
) -> optuna.trial.FrozenTrial:
    value = attrs.get("samples_per_s") if state == TrialState.COMPLETE else None
    return optuna.trial.create_trial(
        state=state,
        value=value,
        params=dict(params),
        distributions={k: DISTRIBUTIONS[k] for k in params},
        user_attrs=dict(attrs),
    )


def _ok(
    number: int,
    workdir: Path,
    step: float,
    spread: float,
    batch: int,
    gas: int,
    peak: float,
    trainer_peak: float | None,
    card: float = 47.99,
    limit: float = 43.191,
) -> dict[str, Any]:
    folder = workdir / f"trial-{number:03d}"
    return {
        "outcome": "ok",
        "reason": "finished and measured",
        "gradient_accumulation_steps": gas,
        "effective_batch": batch * gas,
        "log_path": str(folder / "stdout.log"),
        "trial_dir": f"trial-{number:03d}",
        "command": f"cd {folder} && python train.py config.yaml",
        "step_time_s": step,
        "step_time_spread_s": spread,
        "samples_per_s": round(batch * gas / step, 4),
        "peak_vram_gb": peak,
        "measured_peak_vram_gb": peak,
        "fits": peak <= limit,
        "headroom_gb": round(card - peak, 2),
    } | ({"trainer_peak_vram_gb": trainer_peak} if trainer_peak is not None else {})


def write_timeline(folder: Path, peak: float, seconds: int = 40) -> None:
    """A memory.csv like the runner's: load, warm up, then a plateau at ``peak``."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = ["t_s,vram_gb,host_rss_gb"]
    for i in range(seconds * 2):
        t = i / 2
        vram = peak * min(1.0, 0.3 + t / 10) - (0.4 if i % 7 == 0 else 0.0)
        lines.append(f"{t:.1f},{vram:.3f},{12.5 + t / 100:.3f}")
    lines.append("20.5,,12.9")  # a sample without NVML: skipped by the reader
    (folder / "memory.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")


def build_study(
    workdir: Path,
    *,
    trainer: str = TEST_TRAINER,
    baseline_config: Path | None = None,
    name: str = "demo-48gb",
    extra_attrs: Mapping[str, Any] | None = None,
    with_running: bool = True,
    base_gas: int = 4,
    trainer_peaks: bool = True,
) -> tuple[str, optuna.Study]:
    """Create the known study in ``workdir/studies.db``; returns (storage URL, study).
    ``trainer_peaks`` False: the trainer printed no peak of its own (a CPU run)."""
    workdir.mkdir(parents=True, exist_ok=True)
    url = f"sqlite:///{workdir}/studies.db"
    study = optuna.create_study(study_name=name, storage=fast_storage(url), direction="maximize")
    settings = {
        "trainer": trainer,
        "config_path": str(baseline_config) if baseline_config else str(workdir / "baseline.yaml"),
        "base_config_hash": "",
        "knobs": ["quantization", "optimizer", "batch_size", "gradient_checkpointing"],
        "steps": 30,
        "headroom": 0.1,
        "max_batch_size": 4,
        "keep_effective_batch": True,
        "allow_extra_savers": False,
        "card": {"name": "NVIDIA RTX 6000 Ada Generation", "vram_gb": 47.99, "count": 1, "tier": "40-60GB"},
    }
    study.set_user_attr("settings", settings)
    study.set_user_attr("baseline_params", {**BASE, "gradient_accumulation_steps": base_gas})
    study.set_user_attr("workdir", str(workdir))
    study.set_user_attr("baseline_trial", 0)
    study.set_user_attr(
        "ruled_out",
        [
            {
                "params": {**BASE, "quantization": "none", "optimizer": "adamw", "batch_size": 4},
                "reason": "needs at least the memory of trial 3, which ran out of memory",
                "by_trials": [3],
            }
        ],
    )

    def tp(figure: float) -> float | None:
        return figure if trainer_peaks else None

    for key, value in (extra_attrs or {}).items():
        study.set_user_attr(key, value)

    study.add_trial(_trial(BASE, _ok(0, workdir, 8.0, 0.2, 1, base_gas, 30.1, tp(31.25))))
    study.add_trial(
        _trial({**BASE, "quantization": "none"}, _ok(1, workdir, 6.4, 0.16, 1, base_gas, 38.5, tp(39.4)))
    )
    study.add_trial(
        _trial(
            {**BASE, "quantization": "none", "optimizer": "adamw"},
            _ok(2, workdir, 6.2, 0.2, 1, base_gas, 41.0, tp(41.9)),
        )
    )
    oom = {
        "outcome": "oom",
        "reason": "CUDA out of memory",
        "gradient_accumulation_steps": 2,
        "effective_batch": 4,
        "log_path": str(workdir / "trial-003" / "stdout.log"),
        "trial_dir": "trial-003",
        "command": "python train.py config.yaml",
        "measured_peak_vram_gb": 46.8,
        "oom_tried_gb": 2.0,
        "oom_free_gb": 1.12,
        "oom_total_gb": 47.99,
    }
    study.add_trial(
        _trial({**BASE, "quantization": "none", "optimizer": "adamw", "batch_size": 2}, oom, TrialState.FAIL)
    )
    study.add_trial(
        _trial(
            {**BASE, "optimizer": "adamw", "batch_size": 2}, _ok(4, workdir, 3.0, 0.1, 2, 1, 40.2, tp(41.0))
        )
    )
    study.add_trial(
        _trial(
            {**BASE, "gradient_checkpointing": False}, _ok(5, workdir, 5.0, 0.1, 1, base_gas, 45.5, tp(46.1))
        )
    )
    if with_running:
        study.enqueue_trial(
            {**BASE, "quantization": "none", "optimizer": "adamw", "gradient_checkpointing": False}
        )
        running = study.ask(fixed_distributions=dict(DISTRIBUTIONS))
        running.set_user_attr("trial_dir", "trial-006")
    for number, peak in ((0, 30.1), (2, 41.0), (4, 40.2), (1, 38.5)):
        write_timeline(workdir / f"trial-{number:03d}", peak)
    return url, study


def fast_storage(url: str) -> optuna.storages.RDBStorage:
    """Test databases need no durability: skipping fsync makes building a study ~3x faster."""
    storage = optuna.storages.RDBStorage(url)

    @event.listens_for(storage.engine, "connect")
    def _no_sync(conn: Any, _record: Any) -> None:
        conn.execute("PRAGMA synchronous=OFF")

    storage.engine.dispose()
    return storage


def clone_study(
    template: Path,
    workdir: Path,
    *,
    settings: Mapping[str, Any] | None = None,
    extra_attrs: Mapping[str, Any] | None = None,
) -> tuple[str, optuna.Study]:
    """Copy a built study folder to ``workdir`` and point it there (much faster than building)."""
    shutil.copytree(template, workdir)
    url = f"sqlite:///{workdir}/studies.db"
    study = optuna.load_study(study_name=None, storage=fast_storage(url))
    merged = {
        **study.user_attrs["settings"],
        "config_path": str(workdir / "baseline.yaml"),
        **(settings or {}),
    }
    study.set_user_attr("settings", merged)
    study.set_user_attr("workdir", str(workdir))
    for key, value in (extra_attrs or {}).items():
        study.set_user_attr(key, value)
    return url, study
