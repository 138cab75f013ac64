"""The built-in reference trainer (``python -m trials.reference``), driven as LTX-2.

It reads the LTX-2 config schema (the keys that matter) and prints LTX-2's Step
lines and statistics block, so this adapter is the LTX-2 adapter with another
launch line and default baseline. It also writes ``AUTOTUNE_METRICS_FILE`` with
every step's time, which beats the Step lines (one sample per 20 steps).
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

from autotune.config.yamlconf import RoundTripConfig
from autotune.core.metrics import TrialMetrics
from autotune.core.yamltext import load_yaml
from autotune.errors import ConfigError, UsageError
from autotune.trainers.base import TrainerTraits
from autotune.trainers.kit.common import take_options
from autotune.trainers.ltx2.adapter import Ltx2Adapter
from autotune.trainers.values import Baseline

DEFAULT_BASELINE = ("reference", "low_vram.yaml")
MODULE = "trials.reference"


class ReferenceAdapter(Ltx2Adapter):
    """Options: ``launcher`` (argv that runs Python, default this interpreter), ``accelerate_config``
    (used with several GPUs; default none), ``hook`` (default on; the trainer emulates its card
    itself, so the hook is never given one)."""

    name: ClassVar[str] = "reference"
    knob_file: ClassVar[str] = "reference.yaml"
    #: The reference trainer reads a subset of the schema: add no section it may not know.
    create_missing_sections: ClassVar[bool] = False
    traits: ClassVar[TrainerTraits] = replace(
        Ltx2Adapter.traits,
        label="the reference trainer",
        bundled_baselines="reference",
        config_sections=("reference",),
        loads_model_paths=False,  # synthetic latents: no model, no data
        single_device=True,
        longer_input="a longer clip in the data",
        needs_tier_gate=False,  # any card: it is the demo
        emulates_vram=True,
        peak_note="",  # it reports torch's own peak, not nvidia-smi's
        validates_in_trials=False,  # its baselines sample no validation videos
    )
    times_from_step_lines: ClassVar[bool] = False  # its metrics file times every step

    def __init__(self, **options: Any) -> None:
        take_options(options, self.name, ("launcher", "accelerate_config", "hook"))
        options.setdefault("accelerate_config", "none")
        super().__init__(**options)

    def load_baseline(self, config: Path | None) -> Baseline:
        if config is None:
            from configs import config_file

            default = Path(str(config_file(*DEFAULT_BASELINE)))
            if not default.is_file():
                raise ConfigError(
                    f"the reference trainer's default baseline {default} is missing; "
                    "reinstall autotune or pass --config FILE"
                )
            config = default
        return super().load_baseline(config)

    def emulated_vram_gb(self, baseline: Baseline) -> float | None:
        """``reference.emulated_vram_gb``: the card the trainer enforces on CPU (or caps a GPU to)."""
        section = baseline.data.get("reference")
        value = section.get("emulated_vram_gb") if isinstance(section, dict) else None
        return float(value) if isinstance(value, (int, float)) and value > 0 else None

    def hook_vram_gb(self, baseline: Baseline) -> float | None:
        """None: the trainer counts (or caps) its own card; a second counter would count it twice."""
        return None

    def with_emulated_vram(self, baseline: Baseline, vram_gb: float) -> Baseline:
        """Make the trainer's emulated budget the card the sweep judges (the text keeps its comments)."""
        ref = baseline.data.get("reference")
        if not isinstance(ref, dict) or ref.get("emulated_vram_gb") == vram_gb:
            return baseline
        doc = RoundTripConfig.from_text(baseline.text)
        doc.set("reference.emulated_vram_gb", vram_gb)
        text = doc.dump()
        return replace(baseline, text=text, data=load_yaml(text, str(baseline.path or "<baseline>")))

    def cwd(self, baseline: Baseline) -> Path:
        """The folder that holds the ``trials`` package, so ``python -m trials.reference`` imports."""
        spec = importlib.util.find_spec("trials")
        if spec is None or not spec.submodule_search_locations:
            raise UsageError("the built-in reference trainer (package 'trials') is not installed")
        return Path(next(iter(spec.submodule_search_locations))).resolve().parent

    def script_argv(self, config_path: Path) -> list[str]:
        return ["-m", MODULE, str(config_path)]

    def accelerate_script_argv(self, script: list[str]) -> list[str]:
        return script  # accelerate launch takes ``-m MODULE`` as well

    def python_launcher(self) -> list[str]:
        return self.launcher if self.launcher is not None else [sys.executable]

    def accelerate_launcher(self) -> list[str]:
        return [*self.python_launcher(), "-m", "accelerate.commands.launch"]

    def _trainer_order(self, log: TrialMetrics, file: TrialMetrics) -> list[TrialMetrics]:
        return [file, log]  # its metrics file times every step, its Step lines one in 20
