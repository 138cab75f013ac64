"""The trainer registry: every built-in adapter by name, listed here and nowhere else.

A table of import strings (``"module:Class"``, as Ray Tune's search-algorithm table), imported on
first use: a ``--cmd`` sweep imports the command adapter alone, and ``--help`` lists every trainer
without importing any. A new trainer is one folder under ``trainers/`` and one line here; an
unknown name is answered with the names that exist.
"""

from __future__ import annotations

import importlib
from typing import Any, NamedTuple

from autotune.errors import UnknownTrainerError
from autotune.trainers.base import TrainerAdapter


class Plugin(NamedTuple):
    """Where a trainer's adapter lives and the one line ``--trainer``'s help says about it."""

    target: str  # "package.module:Class"
    summary: str
    #: ``autotune plan`` knows its tier baselines (its ``traits.plan_baselines``, told here too so
    #: ``plan --help`` imports no adapter; a test keeps the two the same).
    plans: bool = False


#: Trainer name -> its adapter: a ``Plugin`` (imported on first use) or, for adapters made in code
#: (tests), the class itself.
ADAPTERS: dict[str, Plugin | type[TrainerAdapter]] = {
    "ltx2": Plugin("autotune.trainers.ltx2.adapter:Ltx2Adapter", "the LTX-2 trainer, from a YAML config ('autotune plan' writes one)", plans=True),
    "sana": Plugin("autotune.trainers.sana.adapter:SanaAdapter", "diffusers-style flag scripts, like Sana's LoRA trainer"),
    "command": Plugin("autotune.trainers.command.adapter:CommandAdapter", "any trainer, from a --cmd command template"),
    "reference": Plugin("autotune.trainers.reference.adapter:ReferenceAdapter", "the built-in reference trainer: the demo", plans=True),
    "diffusion-pipe": Plugin("autotune.trainers.dpipe.adapter:DiffusionPipeAdapter", "tdrussell/diffusion-pipe, from its TOML config"),
    "ai-toolkit": Plugin("autotune.trainers.aitoolkit.adapter:AiToolkitAdapter", "ostris/ai-toolkit, from its YAML job config"),
    "musubi": Plugin("autotune.trainers.musubi.adapter:MusubiAdapter", "kohya-ss/musubi-tuner, from its launch command"),
}  # fmt: skip

#: The trainer a ``--cmd`` template runs when no ``--trainer`` is named (its ``takes_template`` is set).
CMD_TRAINER = "command"

_loaded: dict[str, type[TrainerAdapter]] = {}


def adapter_names() -> list[str]:
    """Every trainer name, sorted."""
    return sorted(ADAPTERS)


def summary(name: str) -> str:
    """The one line ``--trainer``'s help says about ``name`` (no import)."""
    entry = ADAPTERS[name]
    return entry.summary if isinstance(entry, Plugin) else entry.traits.label


def trainer_help(*, plans: bool = False) -> str:
    """``--trainer``'s list of trainers (``plans``: those ``autotune plan`` knows), one ``name: summary``
    each, built from the table without importing an adapter."""
    names = [n for n in adapter_names() if not plans or _plans(n)]
    return "; ".join(f"{name}: {summary(name)}" for name in names)


def _plans(name: str) -> bool:
    entry = ADAPTERS[name]
    return entry.plans if isinstance(entry, Plugin) else entry.traits.plan_baselines


def adapter_class(name: str) -> type[TrainerAdapter]:
    """The adapter class called ``name`` (its ``traits`` answer without options), imported now if
    it was not; an unknown name is a usage error that lists the known ones."""
    try:
        entry = ADAPTERS[name]
    except KeyError:
        known = ", ".join(adapter_names()) or "(none)"
        raise UnknownTrainerError(
            f"unknown trainer {name!r}; known trainers: {known}. Pick one with --trainer NAME."
        ) from None
    if not isinstance(entry, Plugin):
        return entry
    if entry.target not in _loaded:
        module, _, attr = entry.target.partition(":")
        cls = getattr(importlib.import_module(module), attr)
        if not (isinstance(cls, type) and issubclass(cls, TrainerAdapter)):
            raise TypeError(f"trainer {name!r}: {entry.target} is not a TrainerAdapter")
        _loaded[entry.target] = cls
    return _loaded[entry.target]


def get_adapter(name: str, **options: Any) -> TrainerAdapter:
    """The adapter called ``name``, made with its options (an unknown option is a ``UsageError``)."""
    return adapter_class(name)(**options)
