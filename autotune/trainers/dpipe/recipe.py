"""The short-run recipe for a diffusion-pipe trial: exactly ``steps`` optimizer steps, no eval,
one save at the end (the one the full run makes at its end too), output under the trial folder.

From train.py and utils/saver.py @ 8f83dbf:
- ``max_steps`` ends the loop after that step (train.py:961-963); ``epochs`` must be there and
  ends it first when smaller (saver.py:140), so the trial keeps at least ``steps`` epochs (an epoch
  is at least one step);
- after the loop the trainer always saves the training state and the model unless that step
  already did (train.py:967-971): the full run's end-of-training save, kept. Every periodic save
  goes: ``save_every_n_epochs``/``save_every_n_examples``, ``checkpoint_every_n_epochs``/
  ``checkpoint_every_n_minutes`` (saver.py:20-45, 130-170). One of the ``save_every_*`` keys must be
  present (train.py:95 asserts it), so ``save_every_n_steps = steps``: the model saved at the last
  step, and not again after the loop;
- eval: ``eval_before_first_step = false`` (default true, train.py:141, 908), no ``eval_every_*``
  and no ``eval_datasets`` (train.py:437, 945);
- ``steps_per_print = 1`` (train.py:428): DeepSpeed prints every step's time;
- ``output_dir`` in the trial folder (train.py:547), ``dataset`` the trial's own copy
  (train.py:393), no ``resume_from_checkpoint`` (train.py:301-304), W&B off (train.py:561).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

CONFIG_NAME = "config.toml"
DATASET_NAME = "dataset.toml"
OUTPUT_DIR = "output"

#: Keys a trial drops (``None``): periodic saves and evals, resuming.
_DROPPED = (
    "save_every_n_epochs",
    "save_every_n_examples",
    "checkpoint_every_n_epochs",
    "checkpoint_every_n_minutes",
    "eval_every_n_epochs",
    "eval_every_n_steps",
    "eval_every_n_examples",
    "eval_datasets",
    "resume_from_checkpoint",
)


def recipe_edits(data: Mapping[str, Any], steps: int, trial_dir: Path) -> dict[str, Any]:
    """Config key -> value (``None``: removed) that turns the baseline into a trial of ``steps`` steps."""
    epochs = data.get("epochs")
    edits: dict[str, Any] = {key: None for key in _DROPPED if key in data}
    edits.update(
        {
            "max_steps": steps,
            "epochs": epochs
            if isinstance(epochs, int) and not isinstance(epochs, bool) and epochs >= steps
            else steps,
            "save_every_n_steps": steps,
            "eval_before_first_step": False,
            "steps_per_print": 1,
            "output_dir": str(trial_dir / OUTPUT_DIR),
            "dataset": str(trial_dir / DATASET_NAME),
        }
    )
    monitoring = data.get("monitoring")
    if isinstance(monitoring, Mapping) and monitoring.get("enable_wandb"):
        edits["monitoring.enable_wandb"] = False
    return edits
