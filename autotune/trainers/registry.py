"""The trainer registry: every built-in adapter by name, listed here and nowhere else.

An explicit table (not import-by-name): a new adapter is one import and one entry,
and an unknown name is answered with the names that exist.
"""

from __future__ import annotations

from typing import Any

from autotune.errors import UnknownTrainerError
from autotune.trainers.aitoolkit.adapter import AiToolkitAdapter
from autotune.trainers.base import TrainerAdapter
from autotune.trainers.command.adapter import CommandAdapter
from autotune.trainers.dpipe.adapter import DiffusionPipeAdapter
from autotune.trainers.ltx2.adapter import Ltx2Adapter
from autotune.trainers.musubi.adapter import MusubiAdapter
from autotune.trainers.reference.adapter import ReferenceAdapter
from autotune.trainers.sana.adapter import SanaAdapter

#: Trainer name -> adapter class.
ADAPTERS: dict[str, type[TrainerAdapter]] = {
    cls.name: cls
    for cls in (
        Ltx2Adapter,
        SanaAdapter,
        CommandAdapter,
        ReferenceAdapter,
        DiffusionPipeAdapter,
        AiToolkitAdapter,
        MusubiAdapter,
    )
}


def adapter_names() -> list[str]:
    """Every trainer name, sorted."""
    return sorted(ADAPTERS)


def adapter_class(name: str) -> type[TrainerAdapter]:
    """The adapter class called ``name`` (its class-level hooks answer without options);
    an unknown name is a usage error that lists the known ones."""
    try:
        return ADAPTERS[name]
    except KeyError:
        known = ", ".join(adapter_names()) or "(none)"
        raise UnknownTrainerError(
            f"unknown trainer {name!r}; known trainers: {known}. Pick one with --trainer NAME."
        ) from None


def get_adapter(name: str, **options: Any) -> TrainerAdapter:
    """The adapter called ``name``, made with its options (an unknown option is a ``UsageError``)."""
    return adapter_class(name)(**options)
