"""The Sana (diffusers flag script) trainer in the contract suite (tests/fakes/fake_sana_train.py)."""

from __future__ import annotations

import sys
from pathlib import Path

from autotune.trainers import Baseline, TrainerAdapter, get_adapter
from tests.helpers import FAKES
from tests.trainers import Case

SANA_PARAMS = {
    "offload": False,
    "cache_latents": True,
    "optimizer": "adamw",
    "batch_size": 2,
    "gradient_checkpointing": False,
}
SANA_OUTPUT = "Steps:  40%|████      | 4/10 [00:02<00:03,  1.95it/s, loss=0.123, lr=0.0001]\r" * 3


def _sana(tmp: Path) -> tuple[TrainerAdapter, Baseline]:
    (tmp / "sana.yaml").write_text(
        f"script: {FAKES / 'fake_sana_train.py'}\nlauncher: [{sys.executable}]\n"
        "args: [--pretrained_model_name_or_path=Efficient-Large-Model/Sana, --train_batch_size=1,\n"
        "       --gradient_checkpointing, --use_8bit_adam, --offload, --mixed_precision=bf16,\n"
        "       --validation_prompt, a photo of sks dog, --checkpointing_steps=100]\n"
    )
    adapter = get_adapter("sana")
    return adapter, adapter.load_baseline(tmp / "sana.yaml")


CASE = Case("sana", _sana, SANA_PARAMS, SANA_OUTPUT, yaml_config=False)
