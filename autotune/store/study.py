"""The study: an ordinary Optuna study, and the bookkeeping rules of autotune on it.

Why a module of its own: the sweep, ``autotune status`` and the report all read the same
study, and a resume must decide safely whether a stored study is the same sweep
(``autotune.store.settings``), which trials a dead orchestrator left RUNNING
(``autotune.store.recovery``), and how much of the budget is already spent. Everything here
uses Optuna's public API (the few private reaches are in ``autotune.store.optuna_private``),
so ``optuna-dashboard`` and the ``optuna`` CLI show the study as it is. The database is
opened by ``autotune.store.storage``.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
import warnings
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution
from optuna.storages import RDBStorage
from optuna.trial import FrozenTrial, TrialState, create_trial

from autotune.core import verdict
from autotune.core.record import TrialCounts, TrialRecord, count_trials
from autotune.core.space import Knob, to_study_value
from autotune.errors import StorageError, StudyMismatchError, UsageError
from autotune.store import generation, recovery
from autotune.store import optuna_private as op
from autotune.store.identity import ProcessIdentity
from autotune.store.recovery import Recovered
from autotune.store.settings import UPDATED_ON_RESUME, settings_diff
from autotune.store.trialcache import TrialCache

#: Study attr: the card size fit is judged on, unrounded (the settings keep it to 0.01 GB, too coarse
#: for a small emulated card's fit constraint); studies without it use the settings' figure.
CARD_GB_ATTR = "card_vram_gb"
#: Study attr: the card size in bytes, exact (an emulated 16.4 MiB card is 17196646, not "0.02 GB").
CARD_BYTES_ATTR = "card_vram_bytes"
GIB = 2**30
T = TypeVar("T")


def card_gb_of(attrs: Mapping[str, Any]) -> float | None:
    """The study's card size in GiB, as exact as it was stored: its bytes, else the unrounded GiB,
    else (a study from before either) the settings' two-decimal figure. Every reader asks here."""
    exact = attrs.get(CARD_BYTES_ATTR)
    if isinstance(exact, int) and not isinstance(exact, bool) and exact > 0:
        return exact / GIB
    gb = attrs.get(CARD_GB_ATTR)
    if isinstance(gb, (int, float)) and not isinstance(gb, bool):
        return float(gb)
    settings = attrs.get("settings")
    card = settings.get("card") if isinstance(settings, Mapping) else None
    rounded = card.get("vram_gb") if isinstance(card, Mapping) else None
    return float(rounded) if isinstance(rounded, (int, float)) and not isinstance(rounded, bool) else None


#: The name of the study's value, for Optuna's tools (the dashboard's axis, ``optuna`` CLI).
METRIC_NAME = "samples_per_s"
_STUDY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def validate_study_name(name: str) -> str:
    """Study names become folder names under the workdir: letters, digits, ``. _ -`` only."""
    if not _STUDY_NAME.match(name) or name in {".", ".."} or ".." in name:
        raise UsageError(
            f"--study {name!r} is not a valid study name: use letters, digits, '.', '_' and '-' "
            "(at most 100, starting with a letter or digit), e.g. --study ltx2-h100"
        )
    return name


def study_names(storage: RDBStorage) -> list[str]:
    return [s.study_name for s in storage.get_all_studies()]


# --- params and their Optuna distributions ---------------------------------------------------------


@dataclass(frozen=True)
class KnobDef:
    """One knob of a knob file: its values ordered memory-saving -> hungry (``None`` for YAML null)."""

    name: str
    values: tuple[Any, ...] = ()
    extra_savers: tuple[Any, ...] = ()
    is_int: bool = False
    #: ``int`` (batch size), ``choice``, ``count`` or ``fraction`` (``autotune.core.space.KINDS``).
    kind: str = "choice"


def knob_defs(data: Mapping[str, Any]) -> list[KnobDef]:
    """The knobs of a parsed knob file (``configs/knobs/<trainer>.yaml``)."""
    out = []
    for item in data.get("knobs") or []:
        out.append(
            KnobDef(
                name=str(item["name"]),
                values=tuple(item.get("values") or ()),
                extra_savers=tuple(item.get("extra_savers") or ()),
                is_int=item.get("type") == "int",
                kind="int" if item.get("type") == "int" else "choice",
            )
        )
    return out


def knob_def_of(knob: Knob, listed: KnobDef) -> KnobDef:
    """A count or fraction knob as the space spells it (every value, saving first); any other as
    its file lists it (so a study stored before these kinds resumes with the same settings)."""
    if knob.kind in ("count", "fraction"):
        return KnobDef(name=knob.name, values=knob.values, kind=knob.kind)
    return listed


def distributions(knobs: Sequence[KnobDef], max_batch_size: int) -> dict[str, BaseDistribution]:
    """Optuna distributions for the knobs: categorical (extra savers included) or a log int range."""
    out: dict[str, BaseDistribution] = {}
    for k in knobs:
        if k.is_int:
            out[k.name] = IntDistribution(1, max(1, max_batch_size), log=True)
        else:
            choices = [to_study_value(v) for v in (*k.extra_savers, *k.values)]
            out[k.name] = CategoricalDistribution(list(dict.fromkeys(choices)))
    return out


# --- the study ---------------------------------------------------------------------------------------


class SweepStudy:
    """One sweep's Optuna study with the settings, resume and bookkeeping rules of autotune."""

    def __init__(self, storage: RDBStorage, study: optuna.Study) -> None:
        self.storage = storage
        self.study = study
        self.name = study.study_name
        self._study_id = storage.get_study_id_from_name(study.study_name)
        # Trials as last read; each write of ours puts its trial back as written. Other writers'
        # trials show up after ``refresh`` (only what may have changed is read again).
        self.cache = TrialCache(storage, self._study_id)
        #: Where the sweep keeps its count of what it recorded (``autotune.store.generation``).
        self.mark_folder: Path | None = None

    # opening

    @classmethod
    def open_or_create(
        cls, storage: RDBStorage, name: str, settings: Mapping[str, Any], *, workdir: Path | None = None
    ) -> tuple[SweepStudy, bool]:
        """Open study ``name`` (refusing different settings) or create it; returns ``(study, resumed)``."""
        validate_study_name(name)
        existed = name in study_names(storage)
        try:
            study = optuna.create_study(
                storage=storage,
                study_name=name,
                direction="maximize",
                load_if_exists=True,
                sampler=optuna.samplers.RandomSampler(seed=0),
            )
        except Exception as exc:
            raise StorageError(f"cannot create or load study {name!r}: {type(exc).__name__}: {exc}") from None
        handle = cls(storage, study)
        if study.metric_names != [METRIC_NAME]:  # the dashboard's axis says what the value is
            with warnings.catch_warnings():  # "experimental" since Optuna 3.2; nothing for our user to do
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                study.set_metric_names([METRIC_NAME])
        resumed = _settle_settings(study, settings, existed=existed, workdir=workdir)
        if existed:
            handle.fill_in_constraints()
        return handle, resumed

    # Optuna's view of fit

    def fit_constraint(self, attrs: Mapping[str, Any], line: tuple[float, float] | None = None) -> float:
        """The Optuna constraint value of a trial with these attrs (``verdict.fit_constraint``),
        on the card and headroom the study was started with (``line``: ``fit_line()``, read once)."""
        card_gb, limit = line or self.fit_line()
        record = TrialRecord(-1, attrs=dict(attrs))
        return verdict.fit_constraint(verdict.record_fits(record, limit), record.peak_vram_gb, limit, card_gb)

    def fit_line(self) -> tuple[float, float]:
        """``(card GB, the most peak that fits)``: the exact card where the sweep recorded it."""
        attrs_now = self.user_attrs
        settings = attrs_now.get("settings") or {}
        card_gb = card_gb_of(attrs_now) or 0.0
        return card_gb, verdict.fit_limit_gb(card_gb, float(settings.get("headroom") or 0.0))

    def fill_in_constraints(self) -> int:
        """Give every finished trial stored without a fit constraint (a study made before they
        were written) its value, so Optuna's tools judge old trials as new ones; returns how many."""
        missing = [t for t in self.trials() if t.state.is_finished() and not op.has_constraints(t)]
        if not missing:
            return 0
        line = self.fit_line()
        for t in missing:
            op.set_trial_constraints(self.storage, op.trial_id(t), [self.fit_constraint(t.user_attrs, line)])
        self.cache.drop()  # finished trials changed: read them all again (once, on resume)
        return len(missing)

    @classmethod
    def load(cls, storage: RDBStorage, name: str | None) -> SweepStudy:
        """An existing study, for reading (``name=None``: the only study in the storage)."""
        names = study_names(storage)
        if name is None:
            if len(names) == 1:
                name = names[0]
            elif not names:
                raise StorageError("the study database holds no study yet; start one with 'autotune sweep'")
            else:
                raise UsageError(
                    "the study database holds several studies; pick one with --study NAME: "
                    + ", ".join(names)
                )
        elif name not in names:
            known = ", ".join(names) or "(none)"
            raise UsageError(f"no study named {name!r} in this database; its studies: {known}")
        return cls(storage, optuna.load_study(study_name=name, storage=storage))

    # reading

    @property
    def study_id(self) -> int:
        """The study's id in its storage (claims are kept per study id)."""
        return self._study_id

    @property
    def user_attrs(self) -> dict[str, Any]:
        return self.storage.get_study_user_attrs(self._study_id)

    def set_attr(self, key: str, value: Any) -> None:
        self.storage.set_study_user_attr(self._study_id, key, value)

    def refresh(self) -> None:
        """Look for other writers' changes at the next look: trials added since, and the ones
        that were unfinished (a finished trial never changes, so it is never read again)."""
        self.cache.refresh()

    def refresh_if_changed(self, max_age_s: float = 10.0) -> None:
        """``refresh`` when another writer added trials, or the last look is older than ``max_age_s``."""
        self.cache.refresh_if_changed(max_age_s)

    def trials(self, states: Iterable[TrialState] | None = None) -> list[FrozenTrial]:
        return self.cache.trials(states)

    def record(self, trial: FrozenTrial) -> TrialRecord:
        """``TrialRecord.from_trial(trial)``, decoded once per trial as read (``TrialCache.memo``)."""
        return self.cache.record(trial)

    def memo(self, trial: FrozenTrial, key: Hashable, build: Callable[[FrozenTrial], T]) -> T:
        """``build(trial)`` once per trial as read (``TrialCache.memo``)."""
        return self.cache.memo(trial, key, build)

    def trial(self, number: int) -> FrozenTrial:
        for t in self.trials():
            if t.number == number:
                return t
        raise StorageError(f"study {self.name!r} has no trial {number}")

    def counted_trials(self) -> int:
        """Trials that count against ``--max-trials``: finished ones, except those interrupted (run again)."""
        return self.trial_counts().finished

    def trial_counts(self) -> TrialCounts:
        """The study's trial counts (``core.record.count_trials``: the one count every view says)."""
        return count_trials(self.record(t) for t in self.trials())

    def spent_s(self, now: _dt.datetime | None = None) -> float:
        """Seconds of trial time spent so far, across every run of this study (``--budget``)."""
        total = 0.0
        now = now or _dt.datetime.now()
        for t in self.trials():
            if t.datetime_start is None:
                continue
            recorded = self.record(t).spent_s
            if recorded is not None:
                total += recorded
                continue
            end = t.datetime_complete or (now if t.state == TrialState.RUNNING else None)
            if end is not None:
                total += max(0.0, (end - t.datetime_start).total_seconds())
        return total

    # writing trials

    def start_trial(
        self, params: Mapping[str, Any], dists: Mapping[str, BaseDistribution], attrs: Mapping[str, Any]
    ) -> FrozenTrial:
        """Create a RUNNING trial with its params and user attrs in one database transaction."""
        template = create_trial(
            state=TrialState.RUNNING,
            params={k: to_study_value(v) for k, v in params.items()},
            distributions={k: dists[k] for k in params},
            user_attrs=dict(attrs),
        )
        trial_id = self.storage.create_new_trial(self._study_id, template_trial=template)
        trial = self.storage.get_trial(trial_id)
        self.cache.put(trial)
        return trial

    def set_trial_attrs(self, trial: FrozenTrial, attrs: Mapping[str, Any]) -> None:
        """Set several user attrs of a running trial in one transaction (one commit, all or none)."""
        tid = op.trial_id(trial)
        op.write_trial_attrs(self.storage, tid, attrs)
        self.cache.put_attrs(tid, attrs)

    def finish_trial(self, trial: FrozenTrial, attrs: Mapping[str, Any], value: float | None) -> FrozenTrial:
        """Write the trial's user attrs and its fit constraint (one transaction), then COMPLETE with
        ``value`` or FAIL when it is ``None`` (``verdict.judge`` decides the value: set only for a
        measured ok run; a non-finite one fails, as ``Study.tell`` fails it), and read it back."""
        tid = op.trial_id(trial)
        op.write_trial_attrs(
            self.storage, tid, attrs, {op.CONSTRAINTS_KEY: [float(self.fit_constraint(attrs))]}
        )
        ok = value is not None and math.isfinite(value)
        if not self.storage.set_trial_state_values(
            tid,
            TrialState.COMPLETE if ok else TrialState.FAIL,
            [float(value)] if ok and value is not None else None,
        ):
            raise StorageError(f"trial {trial.number} of study {self.name!r} could not be finished")
        finished = self.storage.get_trial(tid)
        self.cache.put(finished)
        held = self.cache.held()
        if self.mark_folder is not None and held is not None:
            generation.write_mark(self.mark_folder, generation.of_trials(held))
        return finished

    # resume

    def check_not_running_elsewhere(self, me: ProcessIdentity) -> None:
        """Refuse to run a study that another live orchestrator on this machine is running."""
        other = ProcessIdentity.from_attrs(self.user_attrs.get("orchestrator") or {})
        if other is None or not other.same_machine(me) or other == me:
            return
        if other.alive():
            raise UsageError(
                f"study {self.name!r} is being run right now by another autotune (pid {other.pid}); "
                "watch it with 'autotune status', or stop it first (Ctrl-C in its shell, or kill "
                f"{other.pid}) and run this command again to resume"
            )

    def claim(self, me: ProcessIdentity) -> None:
        self.set_attr("orchestrator", me.as_attrs())

    def recover_stale(
        self, me: ProcessIdentity, *, kill: Callable[[FrozenTrial], list[int]] | None = None
    ) -> list[Recovered]:
        """Mark trials that a dead orchestrator of this machine left RUNNING as FAIL/``interrupted``
        (``autotune.store.recovery.recover_stale``; ``kill`` ends each one's processes)."""
        return recovery.recover_stale(self, me, kill=kill)


def _settle_settings(
    study: optuna.Study, settings: Mapping[str, Any], *, existed: bool, workdir: Path | None
) -> bool:
    """Refuse a stored study started with different settings (``settings_diff``), record those a
    resume may change, or store them on a new study; returns whether this resumes the study."""
    stored = study.user_attrs.get("settings")
    if existed and stored is not None:
        diff = settings_diff(stored, settings)
        if diff:
            raise StudyMismatchError(
                f"study {study.study_name!r} was started with different settings, so this is not a resume "
                "of it:\n  "
                + "\n  ".join(diff)
                + "\nRun with the study's settings to resume it, or start a new study with "
                "--study OTHER_NAME (or another --workdir)."
            )
        updates = {k: settings[k] for k in UPDATED_ON_RESUME if settings.get(k) not in (None, stored.get(k))}
        if updates:
            study.set_user_attr("settings", {**stored, **updates})
        return True
    study.set_user_attr("settings", dict(settings))
    if workdir is not None:
        study.set_user_attr("workdir", str(workdir.resolve()))
    return False
