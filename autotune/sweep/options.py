"""What a sweep is run with and what it returns: the CLI's flags resolved, the defaults, the result.

Light on purpose (no Optuna): the CLI reads the defaults from here while it builds its parser.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.core.timing import MIN_STEADY_STEPS

#: Default fraction of the card kept free. Why 10 %: a short trial sees neither
#: validation nor checkpoint saving nor the slow growth of fragmentation (an A100
#: 80 GB run of the LTX-2 trainer hit OOM only after 2000 steps), the trainer's own
#: peak is sampled sparsely (nvidia-smi every 200 steps), and peers aim at 80-95 %
#: of the card (OTX 80-85 %, Lightning a 5 % margin in-process). 10 % leaves 8 GB
#: on an 80 GB card and ~4.8 GB on a 48 GB one, about one activation set of a
#: batch step; it rejects what sits at the edge, like the 5090 at 31 of 32 GB.
DEFAULT_HEADROOM = 0.10
DEFAULT_MAX_BATCH_SIZE = 16
DEFAULT_STEPS = 50  # LTX-2's own autotune runs 50-step trials; Step lines come every 20 steps
DEFAULT_TRIAL_TIMEOUT_S = 30 * 60.0  # loading a 22B model takes minutes
DEFAULT_STALL_TIMEOUT_S = 10 * 60.0
CONFIRM_STEPS_FACTOR = 4  # --confirm re-runs the winner this many times longer
CONFIRM_ATTEMPTS = 3  # winners tried in turn when a confirmation fails
DRAIN_TIMEOUT_S = 120.0

# The demo: the built-in reference trainer on CPU with an emulated card, about a minute.
DEMO_STUDY = "demo"
#: The fewest steps a trial can be timed in (``core.timing``: the warm-up takes half of a short run,
#: and MIN_STEADY_STEPS must be left past it); fewer and every demo line said "too short to time".
DEMO_STEPS = 2 * MIN_STEADY_STEPS
DEMO_MAX_BATCH_SIZE = 4  # the search ends on its own (about 10 trials, two real OOMs, a batch-3 winner)
DEMO_TRIAL_TIMEOUT_S = 120.0
DEMO_STALL_TIMEOUT_S = 120.0  # the reference trainer prints every 20 steps: a demo trial only at its end
#: The demo is bounded by trials, never by seconds: on a loaded host a time budget cut it to 4 trials
#: with no OOM and a flattering speed-up. Its OOMs come after its knob relaxations (by trial 16 in
#: every run on this loaded 2-core box); its search ends on its own in about 10 on a quiet host,
#: while a noisy one adds re-measures of near-ties until this cap (24 trials in 213 s here).
DEMO_MAX_TRIALS = 24

#: Study user attr with the options the sweep was started with, so ``autotune worker`` needs
#: only the study's name and database.
OPTIONS_ATTR = "sweep_options"


def _default_workdir() -> Path:
    from autotune.store.urls import DEFAULT_WORKDIR

    return DEFAULT_WORKDIR


@dataclass
class SweepOptions:
    """Everything a sweep is run with (the CLI's flags, resolved)."""

    trainer: str = "reference"
    config: Path | None = None
    study: str | None = None
    storage: str | None = None
    workdir: Path = field(default_factory=_default_workdir)
    vram_gb: float | None = None
    steps: int | None = None
    budget_s: float | None = None
    max_trials: int | None = None
    trial_timeout_s: float | None = None
    stall_timeout_s: float | None = None
    headroom: float = DEFAULT_HEADROOM
    #: ``--host-ram-gb``: the host RAM a trial may use (its process tree's RSS); ``None``: this machine's.
    host_ram_gb: float | None = None
    max_batch_size: int | None = None
    #: ``--batch-sizes``: only these batch sizes (a ladder); None: every integer up to the maximum.
    batch_sizes: tuple[int, ...] | None = None
    keep_effective_batch: bool = False
    allow_extra_savers: bool = False
    confirm: bool = False
    force: bool = False
    cmd: str | None = None
    #: Optimizer steps of the full training, for the report's launch command (``{steps}``); ``None``:
    #: the baseline config's own count, where the trainer's config has one.
    full_steps: int | None = None
    trainer_options: dict[str, Any] = field(default_factory=dict)
    #: Knobs declared with ``--knob`` (the flags as written): a ``--cmd`` trainer's own knobs.
    knobs: list[str] = field(default_factory=list)
    #: A knob file to use instead of ``configs/knobs/<trainer>.yaml`` (tests, custom trainers).
    knob_file: Path | None = None
    #: How long to wait after a trial for the GPU's memory to come back to its pre-trial level.
    drain_timeout_s: float = DRAIN_TIMEOUT_S
    demo: bool = False
    #: Inject the trial-side hook into PyTorch trainers (``--no-hook``: off): step times, memory,
    #: losses, real batches, and the ``--vram-gb`` card emulated.
    hook: bool = True

    @classmethod
    def demo_defaults(cls, **overrides: Any) -> SweepOptions:
        """``autotune sweep`` with no arguments: the reference trainer's low-VRAM baseline on CPU."""
        base: dict[str, Any] = {
            "trainer": "reference",
            "study": DEMO_STUDY,
            "steps": DEMO_STEPS,
            "max_batch_size": DEMO_MAX_BATCH_SIZE,
            "trial_timeout_s": DEMO_TRIAL_TIMEOUT_S,
            "stall_timeout_s": DEMO_STALL_TIMEOUT_S,
            "max_trials": DEMO_MAX_TRIALS,
            "demo": True,
        }
        base.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**base)


@dataclass
class SweepResult:
    study: str
    storage: str
    best_trial: int | None
    best_params: dict[str, Any] | None
    best_samples_per_s: float | None
    baseline_samples_per_s: float | None
    trials_run: int
    stop_reason: str
    reports: list[Path]
    wall_s: float
    best_fit_measured: bool | None = None  # False: the winner is only the fastest (no peak read)
    trials_interrupted: int = 0  # cut short and run again: not in ``trials_run``
    busy_note: str | None = None  # the winner's or baseline's speed was measured on a busy host
    search_left: str | None = None  # stopped on a limit: what could still beat the best


# --- options stored on the study, for ``autotune worker`` -------------------------------------------

_NOT_STORED = {"study", "storage", "workdir", "confirm", "demo"}


def options_to_attr(opts: SweepOptions) -> dict[str, Any]:
    """The sweep's options as JSON, minus where it ran (study, storage, workdir) and its conclusion."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(opts):
        if f.name in _NOT_STORED:
            continue
        value = getattr(opts, f.name)
        if isinstance(value, Path):
            value = str(value)
        elif isinstance(value, dict):
            value = {k: str(v) if isinstance(v, Path) else v for k, v in value.items()}
        out[f.name] = value
    out["demo"] = opts.demo
    return out


def options_from_attr(stored: Mapping[str, Any], **where: Any) -> SweepOptions:
    names = {f.name for f in dataclasses.fields(SweepOptions)}
    kwargs = {k: v for k, v in stored.items() if k in names}
    for key in ("config", "knob_file"):
        if kwargs.get(key) is not None:
            kwargs[key] = Path(kwargs[key])
    kwargs.update(where)
    kwargs["confirm"] = False
    return SweepOptions(**kwargs)
