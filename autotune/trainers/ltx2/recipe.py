"""The LTX-2 trial's recipe: the keys a short trial sets besides the knobs.

Everything cites Lightricks/LTX-2 at 400fd31, ``packages/ltx-trainer/src/ltx_trainer/``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autotune.trainers.kit.yamlkeys import STEPS_KEY


def short_run_recipe(steps: int, trial_dir: Path) -> list[tuple[str, Any]]:
    """The keys a short trial overrides: no validation, samples, checkpoints, W&B or hub; own output dir.

    ``checkpoints.no_resume``: a baseline whose ``model.load_checkpoint`` names a checkpoint with a
    ``training_state_step_N.pt`` beside it would otherwise resume at step N and train ``steps - N``
    steps, or die with "No remaining training steps" (trainer.py:181-186, 527-566). With it the
    trainer still loads those weights (trainer.py:484-504) but starts from step 0 with a fresh
    optimizer and scheduler.
    """
    return [
        (STEPS_KEY, steps),
        ("checkpoints.no_resume", True),
        ("validation.interval", None),
        ("validation.skip_initial_validation", True),
        ("validation.samples", []),
        ("checkpoints.interval", None),
        ("checkpoints.save_training_state", "off"),
        ("wandb.enabled", False),
        ("hub.push_to_hub", False),
        ("output_dir", str(trial_dir / "output")),
    ]


#: Denoising steps of the trial's validation pass: each step runs the same forwards at the same
#: size, so two reach the pass's peak (the first allocates, the second meets what the first left).
TRIAL_INFERENCE_STEPS = 2
#: The trainer's code default for ``validation.interval`` when the key is omitted (config.py:503-507).
DEFAULT_VALIDATION_INTERVAL = 100


#: Steps a trial needs for its one validation pass: the pass follows step ``steps - 1`` (the
#: trainer validates at every multiple of ``validation.interval``, trainer.py:247-253), so 2 steps
#: would mean ``interval: 1``: a pass after step 1 AND step 2. From 3 steps the interval is at least
#: 2 and ``steps - 1`` is its only multiple up to ``steps``: one pass, one step trained after it.
MIN_STEPS_FOR_VALIDATION = 3


def no_validation_warning(steps: int) -> str:
    """Why trials of ``steps`` (< ``MIN_STEPS_FOR_VALIDATION``) run no validation pass."""
    return (
        f"warning: trials of --steps {steps} run no validation pass, so its peak is not measured: the pass "
        f"follows step steps-1 with one step trained after it, which takes {MIN_STEPS_FOR_VALIDATION} steps "
        "(at 2 the LTX-2 trainer would validate after both, as it validates at every multiple of "
        f"validation.interval, trainer.py:247-253); pass --steps {MIN_STEPS_FOR_VALIDATION} or more to measure it"
    )


TEXT_ENCODER_8BIT_KEY = "acceleration.load_text_encoder_in_8bit"
#: Why a trial without CUDA loads the text encoder in full precision (``without_cuda``).
TEXT_ENCODER_8BIT_OFF = (
    "no CUDA device: the trials' validation pass loads the text encoder without 8-bit "
    f"({TEXT_ENCODER_8BIT_KEY}: false), since the LTX-2 trainer's 8-bit Gemma needs CUDA and refuses "
    "to start without it (gemma_8bit.py:81-86); the full run on a CUDA card keeps the baseline's 8-bit "
    "text encoder, whose validation peak these trials did not see"
)


def validates_with_8bit_text_encoder(data: Mapping[str, Any]) -> bool:
    """Whether the full run's validation pass loads the 8-bit text encoder (CUDA only)."""
    section = data.get("acceleration")
    return (
        baseline_validates(data)
        and isinstance(section, Mapping)
        and section.get("load_text_encoder_in_8bit") is True
    )


def trial_recipe(
    data: Mapping[str, Any], steps: int, trial_dir: Path, *, validation: bool = True, cuda: bool = True
) -> list[tuple[str, Any]]:
    """Every key a trial sets besides the knobs: the short run, plus one validation pass with the
    baseline's settings when it validates and ``validation`` (see ``trial_validation_recipe``),
    else no validation and no text encoder at all. Without ``cuda`` that pass loads the text
    encoder without 8-bit (``TEXT_ENCODER_8BIT_OFF``)."""
    short = short_run_recipe(steps, trial_dir)
    if validation and steps >= MIN_STEPS_FOR_VALIDATION and baseline_validates(data):
        phases = trial_validation_recipe(data, steps)
        if not cuda and validates_with_8bit_text_encoder(data):
            phases.append((TEXT_ENCODER_8BIT_KEY, False))
        keep = {"validation.samples", *(k for k, _ in phases)}
        return [(k, v) for k, v in short if k not in keep] + phases
    section = data.get("validation")
    if isinstance(section, Mapping) and section.get("prompts"):
        short.append(("validation.prompts", []))  # else turned into samples again (config.py:656-675)
    return short


def baseline_validates(data: Mapping[str, Any]) -> bool:
    """Whether the full run samples validation videos: an interval and samples (or the legacy
    ``prompts`` the trainer converts into samples, config.py:656-675)."""
    section = data.get("validation")
    section = section if isinstance(section, Mapping) else {}
    interval = section.get("interval", DEFAULT_VALIDATION_INTERVAL)
    return bool(interval) and bool(section.get("samples") or section.get("prompts"))


def trial_validation_recipe(data: Mapping[str, Any], steps: int) -> list[tuple[str, Any]]:
    """The keys that give a trial one validation pass with the baseline's own settings.

    The pass runs after optimizer step ``steps - 1`` (``interval: steps - 1``; the trainer
    validates when the step counter is a multiple of it, trainer.py:246-254), so one more step
    trains after it, as after every interval of the real run, and the hook's step events tell the
    training peak from the validation peak (``readers.phases``). The samples (prompts, conditions,
    ``video_dims``, ``frame_rate``, audio), the text-encoder load and its 8-bit setting
    (``acceleration.load_text_encoder_in_8bit``, read by the ValidationRunner at start-up,
    trainer.py:111-118, validation_runner.py:321-368) and ``offload_optimizer_during_validation``
    stay as written; only ``inference_steps`` is cut to ``TRIAL_INFERENCE_STEPS``.
    """
    section = data.get("validation")
    section = section if isinstance(section, Mapping) else {}
    inference = section.get("inference_steps", 30)
    inference = inference if isinstance(inference, int) and not isinstance(inference, bool) else 30
    return [
        ("validation.interval", steps - 1),
        ("validation.skip_initial_validation", True),
        ("validation.inference_steps", min(inference, TRIAL_INFERENCE_STEPS)),
    ]
