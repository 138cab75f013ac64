"""The command-template trainer in the contract suite: a config of the user's own, keys mapped."""

from __future__ import annotations

from pathlib import Path

from autotune.trainers import Baseline, TrainerAdapter, get_adapter
from tests.trainers import Case
from tests.trainers.ltx2.case import LTX2_OUTPUT, LTX2_PARAMS

COMMAND_CONFIG = """\
# my own trainer's config
train:
  batch: 1
  accum: 1
  optimizer: adamw8bit
  quant: int8-quanto
  checkpointing: true
  max_steps: 1000
"""
COMMAND_KEYS = {
    "batch_size": "train.batch",
    "gradient_accumulation_steps": "train.accum",
    "optimizer": "train.optimizer",
    "quantization": "train.quant",
    "gradient_checkpointing": "train.checkpointing",
    "steps": "train.max_steps",
}


def _command(tmp: Path) -> tuple[TrainerAdapter, Baseline]:
    (tmp / "mine.yaml").write_text(COMMAND_CONFIG)
    adapter = get_adapter(
        "command",
        template="python train.py --config {config} --bs {batch_size} --out {trial_dir}/out",
        config_keys=COMMAND_KEYS,
        cwd=tmp,
    )
    return adapter, adapter.load_baseline(tmp / "mine.yaml")


CASE = Case("command", _command, LTX2_PARAMS, LTX2_OUTPUT)
