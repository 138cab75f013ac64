"""SQLite study files: looked at before anything writes to them, and made whole in one step.

Why the check: Optuna's ``RDBStorage`` creates its tables in whatever database it is given,
so pointed at someone else's SQLite file it would add a dozen tables to it, and
SQLite's own errors on a damaged file ("file is not a database") do not say what
to do. This check reads the file read-only and refuses, with the path and a way
out, a file that is not SQLite, is damaged, belongs to another program, or was
written by an Optuna newer than ours. A refused file is never written to.

Why the making: a new file appears complete (WAL, Optuna's tables, its schema version) or not
at all, so two processes never both stamp its schema; and its writer commits without waiting
for an fsync (``fast_commits``), which WAL makes safe against any process kill.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from optuna.storages import RDBStorage

from autotune.errors import StorageError
from autotune.store.optuna_private import engine, schema_versions_folder

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

SQLITE_MAGIC = b"SQLite format 3\x00"
#: Tables every Optuna RDB schema since 1.0 has; a file with tables but not these is not a study database.
OPTUNA_CORE_TABLES = frozenset({"studies", "trials"})
_WAY_OUT = (
    "autotune never writes to such a file: point --workdir (or --storage) somewhere else, "
    "or move the file away"
)
#: Seconds a SQLite connection waits for a lock before failing. Long enough for any
#: writer we have (a handful of rows per trial); a reader never fails on a live sweep.
SQLITE_TIMEOUT_S = 60.0


def check_sqlite_file(path: Path) -> None:
    """Raise ``StorageError`` unless ``path`` is absent, empty, or an Optuna study database we can read.

    Opens the file read-only (``mode=ro``): nothing is created, converted or journaled.
    """
    path = Path(path)
    try:
        if not path.exists() or path.stat().st_size == 0:
            return
        with path.open("rb") as fh:
            head = fh.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise StorageError(f"cannot read the study database {path}: {exc.strerror or exc}") from None
    if path.is_dir():
        raise StorageError(f"the study database {path} is a directory; {_WAY_OUT}")
    if head != SQLITE_MAGIC:
        raise StorageError(
            f"{path} is not an SQLite database (its first bytes are {head[:16]!r}), so it is not an "
            f"autotune study; {_WAY_OUT}"
        )
    wal = path.with_name(path.name + "-wal")
    try:
        tables, version = _inspect(path, immutable=not wal.exists())
    except sqlite3.Error as exc:
        try:  # a writer may have opened it meanwhile: look again the way live readers do
            if not wal.exists():
                raise
            tables, version = _inspect(path, immutable=False)
        except sqlite3.Error:
            raise StorageError(
                f"the study database {path} is damaged ({exc}); a copy in a backup may still be "
                f"whole. {_WAY_OUT[0].upper()}{_WAY_OUT[1:]}"
            ) from None
    if tables and not tables >= OPTUNA_CORE_TABLES:
        listed = ", ".join(sorted(tables)[:8]) + (", ..." if len(tables) > 8 else "")
        raise StorageError(
            f"{path} is an SQLite database of another program (its tables: {listed}), not an Optuna "
            f"study database; {_WAY_OUT}"
        )
    known = optuna_schema_versions()
    if version is not None and known and version not in known:
        import optuna

        raise StorageError(
            f"{path} was written by a newer Optuna (schema {version}; Optuna {optuna.__version__} here "
            f"knows up to {max(known)}): upgrade Optuna (pip install -U optuna) to read it; {_WAY_OUT}"
        )


def _inspect(path: Path, *, immutable: bool) -> tuple[set[str], str | None]:
    """(table names, Optuna schema revision) read without writing anything.

    ``immutable=1`` when no writer has the file open in WAL mode (no ``-wal`` beside it):
    even a read-only connection would otherwise leave ``-wal``/``-shm`` files behind.
    """
    mode = "immutable=1" if immutable else "mode=ro"
    conn = sqlite3.connect(f"file:{quote(str(path.resolve()))}?{mode}", uri=True, timeout=30)
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        ok = conn.execute("PRAGMA quick_check").fetchone()
        if ok is None or ok[0] != "ok":
            raise sqlite3.DatabaseError(f"quick_check says {ok[0] if ok else 'nothing'}")
        version = None
        if "alembic_version" in tables:
            row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
            version = str(row[0]) if row else None
        return tables, version
    finally:
        conn.close()


@functools.lru_cache(maxsize=1)
def optuna_schema_versions() -> frozenset[str]:
    """The schema revisions the installed Optuna knows (its alembic migration ids); empty if unknown."""
    folder = schema_versions_folder()
    if folder is None:
        return frozenset()
    found = set()
    for f in folder.glob("*.py"):
        m = re.search(r"""^revision\s*=\s*["']([^"']+)["']""", f.read_text(encoding="utf-8"), re.M)
        if m:
            found.add(m.group(1))
    return frozenset(found)


# --- making a study file ------------------------------------------------------------------------------


def create_sqlite_file(path: Path, engine_kwargs: Mapping[str, Any]) -> None:
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
        enable_wal(tmp)
        made = RDBStorage(f"sqlite:///{tmp.as_posix()}", engine_kwargs=dict(engine_kwargs))
        engine(made).dispose()
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


def enable_wal(path: Path) -> None:
    """Switch a SQLite file to WAL journaling (persistent in the file): readers never block the writer."""
    conn = sqlite3.connect(str(path), timeout=SQLITE_TIMEOUT_S)
    try:
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        if str(mode).lower() != "wal":
            conn.execute("PRAGMA journal_mode=WAL")
    finally:
        conn.close()


def fast_commits(engine: Engine) -> None:
    """``synchronous=NORMAL`` on the writer's connections: with WAL a commit then survives any
    process kill (SIGKILL included) and only a power cut can lose the last ones, while each of
    the dozen writes per trial stops waiting for an fsync."""
    from sqlalchemy import event

    def on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.execute("PRAGMA synchronous=NORMAL")

    event.listen(engine, "connect", on_connect)
    engine.dispose()  # connections made before the listener reconnect with it


# --- a database this process may not write ------------------------------------------------------------


def writable_problem(path: Path) -> str | None:
    """Why the sweep could not write the study database at ``path`` (its folder must take the
    WAL journal beside it), or None when it can. ``os.access`` answers for a read-only mount
    (``EROFS``) even as root, and for permissions otherwise."""
    folder = path.parent
    probe = path if path.exists() else folder
    while not probe.exists():  # a folder still to be made: the first one that exists decides
        probe = probe.parent
    if not os.access(probe, os.W_OK):
        return "it is read-only" if probe == path else f"its folder {probe} is read-only"
    if path.exists() and not os.access(folder, os.W_OK):
        return f"its folder {folder} is read-only (SQLite writes its journal beside the file)"
    return None


def read_only_uri(path: Path) -> str:
    """The SQLite URI a reader opens ``path`` with: ``mode=ro`` (a live sweep may be writing),
    or ``immutable=1`` where SQLite cannot keep its shared-memory file beside a WAL database (a
    read-only file or mount: then nothing here writes it either, and ``mode=ro`` fails with
    "unable to open database file")."""
    resolved = quote(str(path.resolve()))
    ro = f"file:{resolved}?mode=ro"
    if writable_problem(path) is None:
        return ro
    try:
        conn = sqlite3.connect(ro, uri=True, timeout=5)
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return ro
        finally:
            conn.close()
    except sqlite3.Error:
        return f"file:{resolved}?immutable=1"
