"""The built-in reference trainer in the contract suite: LTX-2's schema plus its own section."""

from __future__ import annotations

from pathlib import Path

from autotune.trainers import Baseline, TrainerAdapter, get_adapter
from tests.trainers import Case
from tests.trainers.ltx2.case import LTX2_LIKE, LTX2_OUTPUT, LTX2_PARAMS

REFERENCE_LIKE = LTX2_LIKE + "reference:\n  hidden_size: 64\n  device: cpu\n"


def _reference(tmp: Path) -> tuple[TrainerAdapter, Baseline]:
    (tmp / "base.yaml").write_text(REFERENCE_LIKE)
    adapter = get_adapter("reference")
    return adapter, adapter.load_baseline(tmp / "base.yaml")


CASE = Case("reference", _reference, LTX2_PARAMS, LTX2_OUTPUT)
