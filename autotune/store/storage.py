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
from typing import Any

from optuna.storages import RDBStorage

from autotune.errors import StorageError, UsageError
from autotune.store import postgres
from autotune.store.optuna_private import engine
from autotune.store.sqlite import (
    SQLITE_TIMEOUT_S,
    check_sqlite_file,
    create_sqlite_file,
    enable_wal,
    fast_commits,
)
from autotune.store.urls import check_storage_url, is_sqlite, redact_url, sqlite_path


def open_storage(url: str, *, create: bool = True) -> RDBStorage:
    """An ``RDBStorage`` for ``url``; ``create=False`` refuses to make a new database.

    SQLite gets WAL journaling (readers and the writer do not block each other)
    and a long connect timeout. Errors become ``StorageError``/``UsageError`` with
    the URL and what to do.
    """
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
        raise StorageError(
            f"the database driver for {redact_url(url)} is not installed ({exc}); "
            "for PostgreSQL install the 'postgres' extra: pip install 'autotune[postgres]'"
        ) from None
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
