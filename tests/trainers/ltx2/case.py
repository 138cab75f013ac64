"""The LTX-2 trainer in the contract suite (the fake checkout in tests/fakes/ltx2-trainer)."""

from __future__ import annotations

import sys
from pathlib import Path

from autotune.trainers import Baseline, TrainerAdapter, get_adapter
from tests.helpers import FAKES
from tests.trainers import Case

LTX2_LIKE = """\
# A small LTX-2-shaped config (comments must survive).
model:
  model_path: "m.safetensors"
  training_mode: "lora"
optimization:
  steps: 2000
  batch_size: 1
  gradient_accumulation_steps: 1
  optimizer_type: "adamw8bit"  # 8-bit AdamW
  enable_gradient_checkpointing: true
acceleration:
  quantization: "int8-quanto"
data:
  preprocessed_data_root: "DATA"
validation:
  samples:
    - prompt: "a cat"
  interval: 100
  skip_initial_validation: false
checkpoints:
  interval: 250
hub:
  push_to_hub: false
wandb:
  enabled: false
output_dir: "outputs/x"
"""
LTX2_PARAMS = {"quantization": "none", "optimizer": "adamw", "batch_size": 2, "gradient_checkpointing": False}
LTX2_OUTPUT = (
    "INFO     Step 20/50 - Loss: 0.1234, LR: 1.00e-04, Time/Step:      trainer.py:612\n"
    "         2.50s, Total Time: 0h 0m                                               \n"
    "INFO     Step 40/50 - Loss: 0.1234, LR: 1.00e-04, Time/Step:      trainer.py:612\n"
    "         1.00s, Total Time: 0h 1m                                               \n"
    "📊 Training Statistics:\n - Total time: 1.2 minutes\n - Training speed: 0.71 steps/second\n"
    " - Samples/second: 0.71\n - Peak GPU memory: 45.68 GB\n"
)


def _ltx2(tmp: Path) -> tuple[TrainerAdapter, Baseline]:
    (tmp / "base.yaml").write_text(LTX2_LIKE)
    adapter = get_adapter("ltx2", trainer_dir=FAKES / "ltx2-trainer", launcher=[sys.executable])
    return adapter, adapter.load_baseline(tmp / "base.yaml")


CASE = Case("ltx2", _ltx2, LTX2_PARAMS, LTX2_OUTPUT)
