"""diffusion-pipe in the contract suite (the fake checkout in tests/fakes/diffusion-pipe)."""

from __future__ import annotations

import sys
from pathlib import Path

from autotune.trainers import Baseline, TrainerAdapter, get_adapter
from tests.helpers import FAKES
from tests.trainers import Case

DPIPE_PARAMS = {
    "blocks_to_swap": 24,
    "transformer_dtype": "bfloat16",
    "activation_checkpointing": True,
    "optimizer": "adamw_optimi",
    "batch_size": 2,
}
DPIPE_OUTPUT = "".join(  # deepspeed/runtime/pipe/engine.py:396-406 @ 38327e0
    f"steps: {n} loss: 0.1234 iter time (s): 2.500 samples/sec: 0.800\n" for n in range(1, 8)
)


def _dpipe(tmp: Path) -> tuple[TrainerAdapter, Baseline]:
    from tests.trainers.dpipe.test_trainer_dpipe import write_dpipe_setup

    adapter = get_adapter("diffusion-pipe", trainer_dir=FAKES / "diffusion-pipe", launcher=[sys.executable])
    return adapter, adapter.load_baseline(write_dpipe_setup(tmp))


CASE = Case("diffusion-pipe", _dpipe, DPIPE_PARAMS, DPIPE_OUTPUT, trial_config="config.toml")
