"""Opening a study for the report, read-only: never creates a database, never writes to one."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

import optuna

from autotune.errors import StorageError, StudyNotFoundError
from autotune.store.sqlite import check_sqlite_file
from autotune.store.storage import new_rdb_storage
from autotune.store.urls import DB_FILE, DEFAULT_WORKDIR, redact_url


def default_storage(workdir: Path | None = None) -> str:
    return f"sqlite:///{(workdir or DEFAULT_WORKDIR).as_posix()}/{DB_FILE}"


def open_storage(url: str) -> optuna.storages.RDBStorage:
    """The study storage, opened for reading: never creates a database or its tables."""
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
                f"no study database at {db or url!r}; run 'autotune sweep' first, or point "
                "--storage (or --workdir) at the sweep's studies.db"
            )
        check_sqlite_file(Path(db))  # not SQLite, damaged, another program's, a newer Optuna's
        # SQLite's own read-only mode: even Optuna's start-up bookkeeping cannot write.
        open_url = f"sqlite:///file:{quote(str(Path(db).resolve()))}?mode=ro&uri=true"
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
    except StorageError:
        raise
    except Exception as exc:
        raise StorageError(
            f"cannot read studies from {shown}: {_first_line(exc)} (is it an autotune study database?)"
        ) from None


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


def open_study(url: str, name: str | None) -> optuna.Study:
    """Load study ``name`` (or the only one) from ``url`` without writing to it."""
    storage = open_storage(url)
    try:
        names = optuna.study.get_all_study_names(storage=storage)
    except Exception as exc:
        raise StorageError(
            f"cannot read studies from {redact_url(url)}: {_first_line(exc)} (is it an autotune study database?)"
        ) from None
    if name is None:
        if not names:
            raise StudyNotFoundError(f"{redact_url(url)} holds no study yet; run 'autotune sweep' first")
        if len(names) > 1:
            listed = ", ".join(sorted(names))
            raise StudyNotFoundError(
                f"{redact_url(url)} holds several studies ({listed}); pick one with --study NAME"
            )
        name = names[0]
    elif name not in names:
        listed = ", ".join(sorted(names)) or "none"
        raise StudyNotFoundError(f"no study named {name!r} in {redact_url(url)} (studies there: {listed})")
    return optuna.load_study(study_name=name, storage=storage)
