"""musubi-tuner in the contract suite (the fake checkout from tests/musubi_setup.py)."""

from __future__ import annotations

import sys
from pathlib import Path

from autotune.trainers import Baseline, TrainerAdapter, get_adapter
from tests.trainers import Case

MUSUBI_PARAMS = {
    "blocks_to_swap": 24,
    "precision": "bf16",
    "gradient_checkpointing": True,
    "gradient_checkpointing_cpu_offload": 1,
    "optimizer": "adamw",
    "split_attn": True,
    "batch_size": 2,
}
MUSUBI_OUTPUT = "".join(  # trainer_base.py:1920,2116-2118 @ 30c658c (musubi-tuner)
    f"steps: {n * 10:3d}%|█         | {n}/10 [00:{2 * n:02d}<00:10,  2.00s/it, avr_loss=0.123]\r"
    for n in (1, 2, 3, 4)
)


def _musubi(tmp: Path) -> tuple[TrainerAdapter, Baseline]:
    from tests.musubi_setup import make_setup

    adapter = get_adapter("musubi", launcher=[sys.executable])
    return adapter, adapter.load_baseline(make_setup(tmp / "user"))


CASE = Case("musubi", _musubi, MUSUBI_PARAMS, MUSUBI_OUTPUT, yaml_config=False)
