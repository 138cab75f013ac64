"""VRAM tiers: which baseline a card starts from, decided by its nominal size.

The rules are data (``configs/tiers.yaml``); ``classify`` is the one pure function
that applies them. It takes what NVML reports (GiB, a little under the nominal size)
or what the user typed with ``--vram-gb``, finds the card's nominal class (an H100
reporting 79.6 is an 80 GB card), and returns the tier, the baseline kind and file,
and whether the sweep is expected to relax that baseline.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from autotune.core.yamltext import load_yaml
from autotune.errors import ConfigError

TIER_IDS = ("below-32GB", "32GB", "40-60GB", "80GB+")
#: A known-class card reporting less than this share of its nominal size gets a note (ECC, MIG...).
_SHORTFALL_NOTE = 0.97


@dataclass(frozen=True)
class TierRule:
    """One row of the tier table."""

    id: str
    from_gb: float
    baseline: str
    relax: bool
    supported: bool
    note: str
    named_up_to_gb: float | None = None


@dataclass(frozen=True)
class TierTable:
    """The parsed ``tiers.yaml``: nominal classes, tolerances, tiers, baseline files."""

    classes: tuple[float, ...]
    under: float
    over: float
    tiers: tuple[TierRule, ...]
    baselines: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    @classmethod
    def from_data(cls, data: Any, source: str) -> TierTable:
        """Build and check a table; a malformed file is a ``ConfigError`` naming ``source``."""
        try:
            classes = tuple(sorted(float(c) for c in data["classes"]))
            tol = data["tolerance"]
            tiers = tuple(
                TierRule(
                    id=str(t["id"]),
                    from_gb=float(t["from_gb"]),
                    baseline=str(t["baseline"]),
                    relax=bool(t["relax"]),
                    supported=bool(t["supported"]),
                    note=str(t.get("note", "")),
                    named_up_to_gb=(
                        float(t["named_up_to_gb"]) if t.get("named_up_to_gb") is not None else None
                    ),
                )
                for t in data["tiers"]
            )
            baselines = {str(k): {str(a): str(b) for a, b in v.items()} for k, v in data["baselines"].items()}
            table = cls(classes, float(tol["under"]), float(tol["over"]), tiers, baselines)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ConfigError(
                f"{source}: malformed tier table ({type(exc).__name__}: {exc}); "
                "it needs classes, tolerance {under, over}, tiers and baselines"
            ) from None
        if (
            not tiers
            or tiers[0].from_gb != 0
            or [t.from_gb for t in tiers] != sorted(t.from_gb for t in tiers)
        ):
            raise ConfigError(f"{source}: tiers must start at from_gb 0 and be listed smallest first")
        if not (0 <= table.under < 1 and 0 <= table.over < 1):
            raise ConfigError(f"{source}: tolerance.under and tolerance.over must be fractions in [0, 1)")
        for t in tiers:
            if any(t.baseline not in files for files in baselines.values()):
                raise ConfigError(
                    f"{source}: tier {t.id} names baseline {t.baseline!r}, missing in baselines"
                )
        return table


@dataclass(frozen=True)
class TierInfo:
    """The verdict for one card size."""

    reported_gb: float  # what NVML reported or the user typed
    nominal_gb: float  # the card class it belongs to (or the reported size, if none fits)
    known_class: bool  # False: no class in the table fits; the reported size was used as it is
    tier: str  # one of TIER_IDS
    baseline: str  # baseline kind: "low_vram" or "standard"
    baseline_files: Mapping[str, str]  # trainer name -> config file for that kind
    relax: bool  # the sweep is expected to relax the baseline's memory savers
    supported: bool  # False below 32 GB: plan and sweep refuse unless --force
    between_tiers: bool  # a 64/72 GB card: starts like 40-60GB
    note: str
    notes: tuple[str, ...] = ()

    def baseline_file(self, trainer: str) -> str:
        """The config file ``trainer`` ships for this tier's baseline kind."""
        try:
            return self.baseline_files[trainer]
        except KeyError:
            known = ", ".join(sorted(self.baseline_files)) or "(none)"
            raise ConfigError(
                f"the tier table has no baseline files for trainer {trainer!r} (it has: {known})"
            ) from None

    def label(self) -> str:
        """``"80 GB class"`` or ``"36.0 GiB, no known class"``, for messages."""
        if self.known_class:
            return f"{_num(self.nominal_gb)} GB class"
        return f"{self.reported_gb:.1f} GiB, no known card class"

    def to_json(self) -> dict[str, Any]:
        return {
            "tier": self.tier,
            "reported_gb": round(self.reported_gb, 2),
            "nominal_gb": self.nominal_gb,
            "known_class": self.known_class,
            "baseline": self.baseline,
            "baseline_files": dict(self.baseline_files),
            "relax": self.relax,
            "supported": self.supported,
            "between_tiers": self.between_tiers,
            "note": self.note,
            "notes": list(self.notes),
        }


@lru_cache(maxsize=1)
def _shipped_table() -> TierTable:
    from configs import config_file

    node = config_file("tiers.yaml")
    return TierTable.from_data(
        load_yaml(node.read_text(encoding="utf-8"), "configs/tiers.yaml"), "configs/tiers.yaml"
    )


def load_tier_table(path: Path | None = None) -> TierTable:
    """The shipped table (cached), or the one at ``path``."""
    if path is None:
        return _shipped_table()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read tier table {path}: {exc.strerror}") from None
    return TierTable.from_data(load_yaml(text, str(path)), str(path))


def nominal_class(reported_gb: float, table: TierTable) -> float | None:
    """The nominal class a reported size belongs to, or ``None`` when none fits.

    The first class at or above the reading (allowing ``over`` for rounding) wins when
    the reading is no more than ``under`` below it.
    """
    for c in table.classes:
        if reported_gb <= c * (1 + table.over):
            return c if reported_gb >= c * (1 - table.under) else None
    return None


def classify(reported_gb: float, table: TierTable | None = None) -> TierInfo:
    """Tier of a card with ``reported_gb`` of memory (NVML GiB or ``--vram-gb``). Pure given ``table``."""
    if not (isinstance(reported_gb, (int, float)) and math.isfinite(reported_gb) and reported_gb > 0):
        raise ValueError(f"a card's memory must be a positive finite number of GB, got {reported_gb!r}")
    table = table or load_tier_table()
    cls = nominal_class(reported_gb, table)
    nominal = cls if cls is not None else round(reported_gb, 1)
    rule = table.tiers[0]
    for t in table.tiers:
        if nominal >= t.from_gb:
            rule = t
    between = rule.named_up_to_gb is not None and nominal > rule.named_up_to_gb
    notes: list[str] = []
    if between:
        notes.append(
            f"a {_num(nominal)} GB card lies between the named tiers: it starts like {rule.id} "
            "(the low-VRAM baseline) and the sweep relaxes it"
        )
    if cls is not None and reported_gb < cls * _SHORTFALL_NOTE:
        notes.append(
            f"the card reports {reported_gb:.1f} GiB, {100 * (1 - reported_gb / cls):.0f}% under its "
            f"nominal {_num(cls)} GB (ECC on, or memory held back): the tier's baseline was tested "
            "with the full size, so expect less headroom"
        )
    if cls is None:
        notes.append(f"{reported_gb:.1f} GiB matches no known card class; tiered by the reported size")
    return TierInfo(
        reported_gb=float(reported_gb),
        nominal_gb=nominal,
        known_class=cls is not None,
        tier=rule.id,
        baseline=rule.baseline,
        baseline_files={trainer: files[rule.baseline] for trainer, files in table.baselines.items()},
        relax=rule.relax,
        supported=rule.supported,
        between_tiers=between,
        note=rule.note,
        notes=tuple(notes),
    )


def _num(x: float) -> str:
    return f"{x:g}"
