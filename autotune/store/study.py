"""The study: an ordinary Optuna study in a relational database, and everything resume needs.

Why a module of its own: the sweep, ``autotune status`` and the report all read
the same study, and a resume must decide safely whether a stored study is the
same sweep, which trials a dead orchestrator left RUNNING, and how much of the
budget is already spent. Everything here uses Optuna's public storage API, so
``optuna-dashboard`` and the ``optuna`` CLI show the study as it is.

Storage: ``sqlite:///<workdir>/studies.db`` by default (journal in WAL mode and a
connect timeout, so a live reader never meets "database is locked"); any
SQLAlchemy URL (PostgreSQL for several machines) with ``--storage``.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import logging
import os
import re
import socket
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import psutil
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution
from optuna.storages import RDBStorage
from optuna.trial import FrozenTrial, TrialState, create_trial

from autotune.core.outcome import Outcome
from autotune.core.record import TrialRecord
from autotune.core.space import to_study_value
from autotune.errors import StorageError, StudyMismatchError, UsageError
from autotune.store.sqlite import check_sqlite_file, redact_url

DEFAULT_WORKDIR = Path("autotune-runs")
DB_FILE = "studies.db"
#: Seconds a SQLite connection waits for a lock before failing. Long enough for any
#: writer we have (a handful of rows per trial); a reader never fails on a live sweep.
SQLITE_TIMEOUT_S = 60.0
#: Environment variable that tags every process of a trial (inherited by its children),
#: so a resume can find orphans even when their pid was never recorded.
TRIAL_TAG_ENV = "AUTOTUNE_TRIAL_ID"

_STUDY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
#: Settings that describe the run, not the sweep: they may differ on resume.
_INFORMATIONAL_SETTINGS = frozenset({"config_path"})

log = logging.getLogger(__name__)


# --- storage ---------------------------------------------------------------------------------------


def default_storage_url(workdir: Path) -> str:
    """``sqlite:///<absolute workdir>/studies.db``."""
    return f"sqlite:///{(workdir.expanduser().resolve() / DB_FILE).as_posix()}"


def sqlite_path(url: str) -> Path | None:
    """The database file of a ``sqlite:///`` URL (``None`` for other databases or in-memory)."""
    if not url.startswith("sqlite:///"):
        return None
    rest = url[len("sqlite:///") :].split("?", 1)[0]
    if not rest or rest == ":memory:":
        return None
    return Path(rest)


def open_storage(url: str, *, create: bool = True) -> RDBStorage:
    """An ``RDBStorage`` for ``url``; ``create=False`` refuses to make a new database.

    SQLite gets WAL journaling (readers and the writer do not block each other)
    and a long connect timeout. Errors become ``StorageError``/``UsageError`` with
    the URL and what to do.
    """
    check_storage_url(url)
    engine_kwargs: dict[str, Any] = {}
    path = sqlite_path(url)
    if url.startswith("sqlite"):
        engine_kwargs = {"connect_args": {"timeout": SQLITE_TIMEOUT_S}}
    if path is not None:
        if not create and not path.exists():
            raise UsageError(
                f"no study database at {path}; run 'autotune sweep' first, "
                "or point to the right one with --workdir DIR or --storage URL"
            )
        # Before anything writes (WAL, Optuna's tables): refuse a file that is not ours, untouched.
        check_sqlite_file(path)
        if create:  # a reader never writes, not even the journal mode
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                if not path.exists():
                    _create_sqlite_file(path, engine_kwargs)
                _enable_wal(path)
            except (OSError, sqlite3.Error) as exc:
                raise StorageError(f"cannot open the study database {path}: {exc}") from None
            except Exception as exc:  # sqlalchemy/optuna, making the new file's tables
                raise StorageError(
                    f"cannot create the study database {path}: {type(exc).__name__}: {exc}"
                ) from None
    try:
        storage = new_rdb_storage(url, engine_kwargs, create=create)
        if path is not None and create:
            _fast_sqlite_commits(storage)
        return storage
    except ImportError as exc:
        raise StorageError(
            f"the database driver for {_redact_url(url)} is not installed ({exc}); "
            "for PostgreSQL install the 'postgres' extra: pip install 'autotune[postgres]'"
        ) from None
    except StorageError:
        raise  # ours: it says what and where already
    except Exception as exc:  # sqlalchemy/optuna raise many kinds; all mean the same to a user
        raise StorageError(
            f"cannot open the study database {_redact_url(url)}: {type(exc).__name__}: {exc}"
        ) from None


def check_storage_url(url: str) -> str:
    """A usage error for anything that is not an SQLAlchemy database URL (checked before any work)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url) if "://" in url else None
        ok = parsed is not None and bool(parsed.drivername)
    except (ArgumentError, ValueError):
        parsed, ok = None, False
    if not ok:
        raise UsageError(
            f"--storage {_redact_url(url)!r} is not a database URL; write it like "
            "sqlite:///path/to/studies.db or postgresql://user@host/dbname"
        )
    assert parsed is not None
    try:
        parsed.get_dialect()
    except ImportError:
        pass  # a known kind whose driver is missing: open_storage says which extra to install
    except Exception:  # sqlalchemy knows no such database kind
        raise UsageError(
            f"--storage {_redact_url(url)!r}: unknown database kind {parsed.drivername!r}; write it like "
            "sqlite:///path/to/studies.db or postgresql://user@host/dbname"
        ) from None
    return url


def _create_sqlite_file(path: Path, engine_kwargs: Mapping[str, Any]) -> None:
    """Make a new study database complete (WAL, Optuna's tables, its schema version) under a
    temporary name beside ``path``, then link it into place in one step.

    Why: whoever opens a half-made file (``optuna trials``, optuna-dashboard, a second
    ``autotune`` process) creates the missing tables too, and two of them stamping the
    schema version at once fail with "UNIQUE constraint failed: alembic_version". A file
    that appears only complete leaves nothing for anyone else to create. ``os.link``
    never replaces: when another process links its file first, we use theirs.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.new")
    try:
        _enable_wal(tmp)
        made = RDBStorage(f"sqlite:///{tmp.as_posix()}", engine_kwargs=dict(engine_kwargs))
        made.engine.dispose()
        conn = sqlite3.connect(str(tmp), timeout=SQLITE_TIMEOUT_S)
        try:  # everything into the main file: the link below carries no -wal with it
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another process made it first: theirs is just as complete
        except OSError:
            pass  # a file system without hard links: RDBStorage makes the tables in place, as before
    finally:
        for leftover in (tmp, tmp.with_name(tmp.name + "-wal"), tmp.with_name(tmp.name + "-shm")):
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()


def _enable_wal(path: Path) -> None:
    """Switch a SQLite file to WAL journaling (persistent in the file): readers never block the writer."""
    conn = sqlite3.connect(str(path), timeout=SQLITE_TIMEOUT_S)
    try:
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        if str(mode).lower() != "wal":
            conn.execute("PRAGMA journal_mode=WAL")
    finally:
        conn.close()


def _fast_sqlite_commits(storage: RDBStorage) -> None:
    """``synchronous=NORMAL`` on the writer's connections: with WAL a commit then survives any
    process kill (SIGKILL included) and only a power cut can lose the last ones, while each of
    the dozen writes per trial stops waiting for an fsync."""
    from sqlalchemy import event

    def on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.execute("PRAGMA synchronous=NORMAL")

    event.listen(storage.engine, "connect", on_connect)
    storage.engine.dispose()  # connections made before the listener reconnect with it


# --- PostgreSQL: Optuna's start-up, one process at a time -------------------------------------------

#: Advisory lock key ("autotune" in ASCII) under which Optuna sets its tables up in PostgreSQL.
PG_SETUP_LOCK_KEY = int.from_bytes(b"autotune", "big")
#: How long opening a PostgreSQL study database waits for another process's start-up to end.
PG_SETUP_LOCK_TIMEOUT_S = 120


def new_rdb_storage(
    url: str, engine_kwargs: dict[str, Any], *, create: bool, skip_compatibility_check: bool = False
) -> RDBStorage:
    """``RDBStorage(url)``; on PostgreSQL its start-up runs under a database-wide advisory lock.

    Why: Optuna's start-up writes even with ``skip_table_creation``: once the tables exist it
    adds the version row and stamps ``alembic_version``. On a fresh database, a worker polling
    for the study (``create=False``) and the sweep creating it stamped at the same moment and
    one of them died on ``alembic_version`` (UniqueViolation or DuplicateTable): when it was the
    sweep, its workers waited for a study that never came. Under the lock every start-up sees
    the schema either absent or complete. It is held only for the start-up (milliseconds) and
    ends with its transaction, whatever happens. SQLite is set up in ``open_storage`` itself;
    ``autotune report`` opens PostgreSQL through here too (read-only SQLite needs no lock).
    """
    import sqlalchemy
    from sqlalchemy.engine import make_url
    from sqlalchemy.pool import NullPool

    options: dict[str, Any] = {
        "engine_kwargs": engine_kwargs,
        "skip_table_creation": not create,
        "skip_compatibility_check": skip_compatibility_check,
    }
    if make_url(url).get_backend_name() != "postgresql":
        return RDBStorage(url, **options)
    lock = sqlalchemy.create_engine(url, poolclass=NullPool, **engine_kwargs)
    try:
        with lock.begin() as conn:  # a transaction-level lock: released when this transaction ends
            conn.execute(sqlalchemy.text(f"SET LOCAL lock_timeout = '{PG_SETUP_LOCK_TIMEOUT_S}s'"))
            conn.execute(sqlalchemy.text("SELECT pg_advisory_xact_lock(:key)"), {"key": PG_SETUP_LOCK_KEY})
            if not create and not sqlalchemy.inspect(conn).has_table("version_info"):
                # Optuna would say "exceeding max length" here: say what it is (a worker polls on it).
                raise StorageError(
                    f"{_redact_url(url)} holds no study yet (none of Optuna's tables are there): run "
                    "'autotune sweep' first, or check the database name in the URL"
                )
            return RDBStorage(url, **options)
    finally:
        lock.dispose()


def _redact_url(url: str) -> str:
    """A URL with its password hidden, for messages."""
    return redact_url(url)


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
            )
        )
    return out


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


# --- settings ----------------------------------------------------------------------------------------


def settings_diff(stored: Mapping[str, Any], current: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Human lines naming every setting that differs, like ``steps: the study has 30, this run 50``."""
    lines: list[str] = []
    for key in sorted(set(stored) | set(current), key=str):
        if not prefix and key in _INFORMATIONAL_SETTINGS:
            continue
        name = f"{prefix}{key}"
        a, b = stored.get(key, _MISSING), current.get(key, _MISSING)
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            lines.extend(settings_diff(a, b, name + "."))
        elif _norm(a) != _norm(b):
            lines.append(f"{name}: the study has {_show(a)}, this run {_show(b)}")
    return lines


class _Missing:
    def __repr__(self) -> str:
        return "(not set)"


_MISSING = _Missing()


def _norm(value: Any) -> Any:
    """Compare JSON round-tripped values: tuples and lists alike, ints and equal floats alike."""
    if isinstance(value, (list, tuple)):
        return [_norm(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _norm(v) for k, v in value.items()}
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _show(value: Any) -> str:
    if value is _MISSING:
        return "(not set)"
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 120 else text[:117] + "..."


# --- the study ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Orchestrator:
    """Who is running a trial: enough to tell later whether that process is still alive."""

    pid: int
    host: str
    create_time: float

    @classmethod
    def me(cls) -> Orchestrator:
        return cls(os.getpid(), socket.gethostname(), psutil.Process().create_time())

    def as_attrs(self) -> dict[str, Any]:
        return {
            "orchestrator_pid": self.pid,
            "orchestrator_host": self.host,
            "orchestrator_start": self.create_time,
        }

    @classmethod
    def from_attrs(cls, attrs: Mapping[str, Any]) -> Orchestrator | None:
        try:
            return cls(
                int(attrs["orchestrator_pid"]),
                str(attrs["orchestrator_host"]),
                float(attrs["orchestrator_start"]),
            )
        except (KeyError, TypeError, ValueError):
            return None

    def alive(self) -> bool:
        """True when this process still runs (same pid and start time: a reused pid is not it)."""
        if self.host != socket.gethostname():
            return True  # another machine's: we cannot tell, so assume it is alive
        return process_alive(self.pid, self.create_time)


def process_alive(pid: int, create_time: float | None = None) -> bool:
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return create_time is None or abs(proc.create_time() - create_time) < 1.0
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


@dataclass
class Recovered:
    """A trial a dead orchestrator left RUNNING, now marked FAIL/interrupted."""

    number: int
    params: dict[str, Any]
    killed_pids: list[int]


class SweepStudy:
    """One sweep's Optuna study with the settings, resume and bookkeeping rules of autotune."""

    def __init__(self, storage: RDBStorage, study: optuna.Study) -> None:
        self.storage = storage
        self.study = study
        self.name = study.study_name
        self._study_id = storage.get_study_id_from_name(study.study_name)
        # Trials as last read; every write of ours drops it, so it is never older than our last
        # write (other writers' trials show up at our next write or ``refresh``).
        self._trials: list[FrozenTrial] | None = None
        self._read_at = 0.0  # time.monotonic() of the last full read

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
        stored = study.user_attrs.get("settings")
        if existed and stored is not None:
            diff = settings_diff(stored, settings)
            if diff:
                raise StudyMismatchError(
                    f"study {name!r} was started with different settings, so this is not a resume of it:\n  "
                    + "\n  ".join(diff)
                    + "\nRun with the study's settings to resume it, or start a new study with "
                    "--study OTHER_NAME (or another --workdir)."
                )
        else:
            study.set_user_attr("settings", dict(settings))
            if workdir is not None:
                study.set_user_attr("workdir", str(workdir.resolve()))
        return handle, existed and stored is not None

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
    def user_attrs(self) -> dict[str, Any]:
        return self.storage.get_study_user_attrs(self._study_id)

    def set_attr(self, key: str, value: Any) -> None:
        self.storage.set_study_user_attr(self._study_id, key, value)

    def refresh(self) -> None:
        """Read every trial again at the next look (other writers' trials, after a resume)."""
        self._trials = None

    def refresh_if_changed(self, max_age_s: float = 10.0) -> None:
        """``refresh`` when another writer added trials (one COUNT query), or the last full read
        is older than ``max_age_s`` (another worker may have finished one of its trials)."""
        if self._trials is None:
            return
        if time.monotonic() - self._read_at > max_age_s or (
            self.storage.get_n_trials(self._study_id) != len(self._trials)
        ):
            self._trials = None

    def _reread(self, trial_id: int, fresh: FrozenTrial | None = None) -> None:
        """Our own write changed one trial: read only that one back into the cache.

        Re-reading every trial after each of the dozen writes per trial made a sweep's own
        bookkeeping grow with its length (O(n) per trial: 0.6 s per trial at 200 trials).
        Other writers' trials show up at the next ``refresh`` (the sweep refreshes once per
        candidate it picks).
        """
        if self._trials is None:
            return
        trial = fresh if fresh is not None else self.storage.get_trial(trial_id)
        for i, t in enumerate(self._trials):
            if t._trial_id == trial_id:
                self._trials[i] = trial
                return
        self._trials.append(trial)

    def trials(self, states: Iterable[TrialState] | None = None) -> list[FrozenTrial]:
        if self._trials is None:
            self._trials = list(self.storage.get_all_trials(self._study_id, deepcopy=False))
            self._read_at = time.monotonic()
        trials = self._trials
        if states is None:
            return list(trials)
        wanted = tuple(states)
        return [t for t in trials if t.state in wanted]

    def trial(self, number: int) -> FrozenTrial:
        for t in self.trials():
            if t.number == number:
                return t
        raise StorageError(f"study {self.name!r} has no trial {number}")

    def counted_trials(self) -> int:
        """Trials that count against ``--max-trials``: finished ones, except those interrupted (run again)."""
        return sum(1 for t in self.trials((TrialState.COMPLETE, TrialState.FAIL)) if not is_interrupted(t))

    def spent_s(self, now: _dt.datetime | None = None) -> float:
        """Seconds of trial time spent so far, across every run of this study (``--budget``)."""
        total = 0.0
        now = now or _dt.datetime.now()
        for t in self.trials():
            if t.datetime_start is None:
                continue
            recorded = TrialRecord.from_trial(t).spent_s
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
        self._reread(trial_id, trial)
        return trial

    def set_trial_attrs(self, trial: FrozenTrial, attrs: Mapping[str, Any]) -> None:
        """Set several user attrs of a running trial in one transaction (one commit, all or none)."""
        set_user_attrs(self.storage, trial._trial_id, attrs)
        self._reread(trial._trial_id)

    def finish_trial(self, trial: FrozenTrial, attrs: Mapping[str, Any], value: float | None) -> FrozenTrial:
        """Write the trial's user attrs, then COMPLETE with ``value`` (measured ok) or FAIL."""
        set_user_attrs(self.storage, trial._trial_id, attrs)
        if value is not None and attrs.get("outcome") == Outcome.OK.value:
            finished = self.study.tell(trial.number, value, state=TrialState.COMPLETE)
        else:
            finished = self.study.tell(trial.number, state=TrialState.FAIL)
        self._reread(trial._trial_id)
        return finished

    # resume

    def check_not_running_elsewhere(self, me: Orchestrator) -> None:
        """Refuse to run a study that another live orchestrator on this machine is running."""
        other = Orchestrator.from_attrs(self.user_attrs.get("orchestrator") or {})
        if (
            other is None
            or other.host != me.host
            or (other.pid, other.create_time) == (me.pid, me.create_time)
        ):
            return
        if other.alive():
            raise UsageError(
                f"study {self.name!r} is being run right now by another autotune (pid {other.pid}); "
                "watch it with 'autotune status', or stop it first (Ctrl-C in its shell, or kill "
                f"{other.pid}) and run this command again to resume"
            )

    def claim(self, me: Orchestrator) -> None:
        self.set_attr("orchestrator", me.as_attrs())

    def recover_stale(
        self, me: Orchestrator, *, kill: Callable[[FrozenTrial], list[int]] | None = None
    ) -> list[Recovered]:
        """Mark trials that a dead orchestrator of this machine left RUNNING as FAIL/``interrupted``.

        ``kill`` ends what is left of each such trial's processes (returns the pids it
        ended); ``end_trial_processes`` is the default. Trials of live orchestrators
        and of other machines are left alone.
        """
        kill = kill or end_trial_processes
        recovered = []
        for t in self.trials((TrialState.RUNNING,)):
            owner = Orchestrator.from_attrs(t.user_attrs)
            if owner is not None and (owner.host != me.host or (owner.alive() and owner != me)):
                continue
            killed = kill(t)
            reason = "the orchestrator stopped while this trial ran (found on resume); it is run again"
            attrs = TrialRecord.attrs_of(outcome=Outcome.INTERRUPTED.value, reason=reason)
            spent = _last_activity_s(t)
            if spent is not None:  # not the hours between the crash and this resume
                attrs.update(TrialRecord.attrs_of(spent_s=spent))
            self.set_trial_attrs(t, attrs)
            self.study.tell(t.number, state=TrialState.FAIL, skip_if_finished=True)
            self._trials = None
            recovered.append(Recovered(t.number, dict(t.params), killed))
        return recovered


def set_user_attrs(storage: RDBStorage, trial_id: int, attrs: Mapping[str, Any]) -> None:
    """All of ``attrs`` in one transaction. Optuna's public API commits each key on its own
    (a dozen commits per trial, and a kill in between leaves half of them); this uses the
    same internals as ``RDBStorage.set_trial_user_attr``, falling back to it when they move."""
    try:
        from optuna.storages._rdb import models
        from optuna.storages._rdb.storage import _create_scoped_session

        setter = storage._set_trial_attr_without_commit
    except (ImportError, AttributeError):  # pragma: no cover - another Optuna layout
        for key, value in attrs.items():
            storage.set_trial_user_attr(trial_id, key, value)
        return
    with _create_scoped_session(storage.scoped_session, True) as session:
        for key, value in attrs.items():
            setter(session, models.TrialUserAttributeModel, trial_id, key, value)


def is_interrupted(trial: FrozenTrial) -> bool:
    return TrialRecord.from_trial(trial).is_interrupted


def trial_tag(storage_url: str, study: str, number: int) -> str:
    """The value of ``AUTOTUNE_TRIAL_ID`` for one trial: unique per database, study and trial."""
    import hashlib

    db = hashlib.sha1(storage_url.encode()).hexdigest()[:12]
    return f"{db}:{study}:{number}"


def end_trial_processes(trial: FrozenTrial, *, grace_s: float = 5.0) -> list[int]:
    """End an orphaned trial: its recorded process group, and any process tagged with its trial id.

    The pid is only trusted when its start time matches the recorded one (pids are reused).
    """
    rec = TrialRecord.from_trial(trial)
    victims: dict[int, psutil.Process] = {}
    pid, started = rec.pid, rec.pid_start
    if pid is not None:
        try:
            proc = psutil.Process(pid)
            if started is None or abs(proc.create_time() - started) < 1.0:
                victims[pid] = proc
                for child in proc.children(recursive=True):
                    victims[child.pid] = child
        except psutil.Error:
            pass
        pgid = rec.pgid if rec.pgid is not None else pid
        if pgid in victims:
            for p in psutil.process_iter():
                try:
                    if os.getpgid(p.pid) == pgid:
                        victims[p.pid] = p
                except (OSError, psutil.Error):
                    continue
    tag = rec.trial_tag
    if tag is not None:
        victims.update({p.pid: p for p in processes_tagged(tag)})
    mark = rec.process_mark or _runner_mark(rec.trial_dir)
    if mark:
        from autotune.execution.proctree import marked_processes

        victims.update({p.pid: p for p in marked_processes(mark)})
    victims.pop(os.getpid(), None)
    _signal_all(victims.values(), "terminate")
    if not _wait_gone(victims.values(), grace_s):
        _signal_all(victims.values(), "kill")
        _wait_gone(victims.values(), grace_s)
    return sorted(victims)


def _last_activity_s(trial: FrozenTrial) -> float | None:
    """Seconds from a trial's start to the last write in its folder: the time it really ran."""
    folder = TrialRecord.from_trial(trial).trial_dir
    if trial.datetime_start is None or folder is None:
        return None
    try:
        last = max((p.stat().st_mtime for p in Path(folder).iterdir()), default=None)
    except OSError:
        return None
    if last is None:
        return 0.0
    return max(0.0, last - trial.datetime_start.timestamp())


def _runner_mark(trial_dir: str | None) -> str | None:
    """The environment mark the runner gave the trial's processes (``process.json``), if it got that far."""
    if trial_dir is None:
        return None
    try:
        info = json.loads((Path(trial_dir) / "process.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    mark = info.get("mark") if isinstance(info, dict) else None
    return mark if isinstance(mark, str) else None


def _signal_all(procs: Iterable[psutil.Process], how: str) -> None:
    for p in procs:
        with contextlib.suppress(psutil.Error):
            getattr(p, how)()


def _wait_gone(procs: Iterable[psutil.Process], timeout_s: float) -> bool:
    """Wait until none of ``procs`` runs (a zombie counts as gone: its parent reaps it)."""
    procs = list(procs)
    deadline = time.monotonic() + timeout_s
    while True:
        if not any(_running(p) for p in procs):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def processes_tagged(tag: str) -> list[psutil.Process]:
    """Processes of this user whose environment carries ``AUTOTUNE_TRIAL_ID=tag``."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.environ().get(TRIAL_TAG_ENV) == tag:
                found.append(p)
        except (psutil.Error, OSError):
            continue
    return found
