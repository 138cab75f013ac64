"""Trainer adapters: one per trainer, behind ``TrainerAdapter``; look them up with ``get_adapter``."""

from autotune.trainers.base import Baseline, TrainerAdapter, adapter_names, get_adapter, register

__all__ = ["Baseline", "TrainerAdapter", "adapter_names", "get_adapter", "register"]
