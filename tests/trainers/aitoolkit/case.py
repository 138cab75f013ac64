"""ai-toolkit in the contract suite (the fake checkout in tests/fakes/ai-toolkit)."""

from __future__ import annotations

import sys
from pathlib import Path

from autotune.trainers import Baseline, TrainerAdapter, get_adapter
from tests.helpers import FAKES
from tests.trainers import Case

AITK_LIKE = """\
# An ai-toolkit job (config/examples/train_lora_qwen_image_24gb.yaml's shape; comments must survive).
job: extension
config:
  name: "my_lora_v1"
  process:
    - type: 'sd_trainer'
      training_folder: "output"
      save:
        save_every: 250 # save every this many steps
      datasets:
        - folder_path: "/data/images"
          resolution: [ 512, 768, 1024 ]  # flux enjoys multiple resolutions
      train:
        batch_size: 1
        steps: 2000
        gradient_accumulation: 1
        gradient_checkpointing: true  # need the on unless you have a ton of vram
        optimizer: "adamw8bit"
      model:
        name_or_path: "Qwen/Qwen-Image"
        arch: "qwen_image"  # a model class that reads the offload fraction (the legacy path does not)
        quantize: true  # run 4bit mixed precision
        qtype: "uint4"  # not qfloat8: with layer offloading ai-toolkit would swap it for torchao float8
"""
AITK_PARAMS = {
    "qtype": "none",
    "layer_offloading_transformer_percent": 0.5,
    "low_vram": True,
    "gradient_checkpointing": False,
    "optimizer": "adamw",
    "batch_size": 2,
}
AITK_OUTPUT = "my_lora_v1:  40%|####      | 4/10 [00:12<00:18,  3.02s/it, lr: 1.0e-04 loss: 1.234e-01]\r" * 3


def _aitk(tmp: Path) -> tuple[TrainerAdapter, Baseline]:
    (tmp / "job.yaml").write_text(AITK_LIKE)
    adapter = get_adapter("ai-toolkit", trainer_dir=FAKES / "ai-toolkit", launcher=[sys.executable])
    return adapter, adapter.load_baseline(tmp / "job.yaml")


CASE = Case("ai-toolkit", _aitk, AITK_PARAMS, AITK_OUTPUT)
