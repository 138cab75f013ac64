"""Opening a study database: the one way every part of autotune does it.

Why a module of its own: the sweep, ``autotune worker``, ``status``, ``report`` and the claims
of several workers all open the same database; each kind (SQLite, PostgreSQL) needs its own
care before Optuna touches it, and the errors must name the database and what to do. The
claims use this storage's engine (``optuna_private.engine``), never a second connection pool.

Storage: ``sqlite:///<workdir>/studies.db`` by default (journal in WAL mode and a connect
timeout, so a live reader never meets "database is locked"); any SQLAlchemy URL (PostgreSQL
for several machines) with ``--storage``.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from optuna.storages import RDBStorage

from autotune.errors import AutotuneError, StorageError, StudyNotFoundError, UsageError
from autotune.store import postgres
from autotune.store.optuna_private import engine
from autotune.store.sqlite import (
    SQLITE_TIMEOUT_S,
    check_sqlite_file,
    create_sqlite_file,
    enable_wal,
    fast_commits,
    read_only_uri,
    writable_problem,
)
from autotune.store.urls import check_storage_url, is_sqlite, missing_driver_advice, redact_url, sqlite_path


def open_storage(url: str, *, create: bool = True, read_only: bool = False) -> RDBStorage:
    """An ``RDBStorage`` for ``url``; ``create=False`` refuses to make a new database, and
    ``read_only=True`` opens it so that nothing can be written (``autotune report``).

    SQLite gets WAL journaling (readers and the writer do not block each other)
    and a long connect timeout. Errors become ``StorageError``/``UsageError`` with
    the URL and what to do.
    """
    if read_only:
        return _open_read_only(url)
    check_storage_url(url)
    engine_kwargs: dict[str, Any] = {}
    path = sqlite_path(url)
    if is_sqlite(url):
        engine_kwargs = {"connect_args": {"timeout": SQLITE_TIMEOUT_S}}
    if path is not None:
        if not create and not path.exists():
            raise UsageError(
                f"no study database at {path}; run 'autotune sweep' first, "
                "or point to the right one with --workdir DIR or --storage URL"
            )
        # Before anything writes (WAL, Optuna's tables): refuse a file that is not ours, untouched.
        check_sqlite_file(path)
        if create and (problem := writable_problem(path)) is not None:
            raise UsageError(
                f"the study database {path} cannot be written: {problem}. 'autotune status' and "
                "'autotune report' still read it; to run or resume the sweep, make it writable "
                "(remount read-write, or chmod u+w the file and its folder), or copy the workdir "
                "somewhere writable and pass --workdir there"
            )
        if create:  # a reader never writes, not even the journal mode
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                if not path.exists():
                    create_sqlite_file(path, engine_kwargs)
                enable_wal(path)
            except (OSError, sqlite3.Error) as exc:
                raise StorageError(f"cannot open the study database {path}: {exc}") from None
            except Exception as exc:  # sqlalchemy/optuna, making the new file's tables
                raise StorageError(
                    f"cannot create the study database {path}: {type(exc).__name__}: {exc}"
                ) from None
    try:
        storage = new_rdb_storage(url, engine_kwargs, create=create)
        if path is not None and create:
            fast_commits(engine(storage))
        return storage
    except ImportError as exc:
        raise StorageError(missing_driver_advice(url, exc)) from None
    except StorageError:
        raise  # ours: it says what and where already
    except Exception as exc:  # sqlalchemy/optuna raise many kinds; all mean the same to a user
        raise StorageError(
            f"cannot open the study database {redact_url(url)}: {type(exc).__name__}: {exc}"
        ) from None


def new_rdb_storage(
    url: str, engine_kwargs: dict[str, Any], *, create: bool, skip_compatibility_check: bool = False
) -> RDBStorage:
    """``RDBStorage(url)``; on PostgreSQL its start-up runs under the setup lock (``postgres``).

    SQLite is set up in ``open_storage`` itself; ``autotune report`` opens PostgreSQL through
    here too (read-only SQLite needs no lock).
    """
    options: dict[str, Any] = {
        "engine_kwargs": engine_kwargs,
        "skip_table_creation": not create,
        "skip_compatibility_check": skip_compatibility_check,
    }
    if not postgres.is_postgres(url):
        return RDBStorage(url, **options)
    with postgres.setup_lock(url, engine_kwargs, create=create):
        return RDBStorage(url, **options)


def _open_read_only(url: str) -> RDBStorage:
    """For readers that must never write (``autotune report``): SQLite's own read-only mode, so
    not even Optuna's start-up bookkeeping can write; a missing database is ``StudyNotFoundError``."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError:
        raise StudyNotFoundError(
            f"--storage {redact_url(url)!r} is not a database URL; use sqlite:///PATH/studies.db or "
            "postgresql://USER@HOST/DB"
        ) from None
    connect_args: dict[str, Any] = {}
    open_url = url
    if parsed.get_backend_name() == "sqlite":
        db = parsed.database or ""
        if db in ("", ":memory:") or not Path(db).is_file():
            raise StudyNotFoundError(
                f"no study database at {db or url!r}; run 'autotune sweep' first, or point to the "
                "right one with --workdir DIR or --storage URL"
            )
        check_sqlite_file(Path(db))  # not SQLite, damaged, another program's, a newer Optuna's
        # SQLite's own read-only mode: even Optuna's start-up bookkeeping cannot write.
        open_url = f"sqlite:///{read_only_uri(Path(db))}&uri=true"
        connect_args["timeout"] = 20  # a live sweep may hold the lock for a moment
    elif parsed.get_backend_name().startswith("postgres"):
        connect_args["connect_timeout"] = 20
    shown = redact_url(url)
    try:
        parsed.get_dialect()
    except Exception:  # sqlalchemy has no such database kind: the URL is wrong, not the database
        raise StudyNotFoundError(
            f"--storage {shown!r}: unknown database kind {parsed.drivername!r}; use sqlite:///PATH/studies.db "
            "or postgresql://USER@HOST/DB"
        ) from None
    try:
        return new_rdb_storage(
            open_url, {"connect_args": connect_args}, create=False, skip_compatibility_check=True
        )
    except ImportError as exc:
        raise StorageError(missing_driver_advice(url, exc)) from None
    except StorageError:
        raise
    except Exception as exc:
        raise StorageError(
            f"cannot read studies from {shown}: {first_line(exc)} (is it an autotune study database?)"
        ) from None


def first_line(exc: BaseException) -> str:
    """An exception as one line: its type and the first line of its message."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


#: What a database says when the disk under it is full (SQLite, PostgreSQL, an OS error).
_DISK_FULL = ("database or disk is full", "no space left on device", "diskfull", "could not extend file")
_READ_ONLY = ("attempt to write a readonly database", "read-only file system")


def storage_failure(exc: BaseException, url: str) -> AutotuneError | None:
    """The error to show for a database write that failed under a sweep because of where the
    database lives (its disk filled up, it became read-only), or None for any other error.

    Why: SQLite's and Optuna's own words ("internal error: OperationalError ... disk is full")
    say neither that the study is intact nor what to do. The write was rolled back whole, so
    the study holds everything recorded before it, and the trial that was running is left
    RUNNING: the resume recognises it and runs it again.
    """
    seen: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and e not in seen and len(seen) < 10:
        seen.append(e)
        e = e.__cause__ or e.__context__
    text = " | ".join(f"{type(x).__name__}: {x}" for x in seen).lower()
    path = sqlite_path(url)
    where = (
        f"the disk holding the study database {path}"
        if path
        else f"the database server's disk ({redact_url(url)})"
    )
    if any(m in text for m in _DISK_FULL) or any(getattr(x, "errno", None) == 28 for x in seen):
        return StorageError(
            f"{where} is full: the last write was rolled back, so the study is intact up to the trial "
            "that was running (it was not recorded). Free some space there, then run the same command "
            "again to resume: that trial runs again"
        )
    if any(m in text for m in _READ_ONLY):
        db = str(path) if path else redact_url(url)
        return StorageError(
            f"the study database {db} became read-only while the sweep ran: the study is intact up to "
            "the trial that was running. Make it writable again (remount read-write), then run the same "
            "command again to resume"
        )
    return None
