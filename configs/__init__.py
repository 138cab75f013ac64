"""Data, not code: the tier table, knob definitions per trainer, the reference trainer's baselines."""

from __future__ import annotations

from importlib.resources import files
from importlib.resources.abc import Traversable


def config_file(*parts: str) -> Traversable:
    """A file shipped under ``configs/``, whether installed or run from a checkout."""
    node: Traversable = files(__name__)
    for part in parts:
        node = node / part
    return node
