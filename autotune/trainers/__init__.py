"""Trainer adapters: one per trainer, behind ``TrainerAdapter``; look them up with ``get_adapter``."""

from autotune.trainers.base import TrainerAdapter
from autotune.trainers.registry import adapter_class, adapter_names, get_adapter
from autotune.trainers.values import Baseline, Winner

__all__ = ["Baseline", "TrainerAdapter", "Winner", "adapter_class", "adapter_names", "get_adapter"]
