"""Look at an existing SQLite study file before anything opens it for writing.

Why: Optuna's ``RDBStorage`` creates its tables in whatever database it is given,
so pointed at someone else's SQLite file it would add a dozen tables to it, and
SQLite's own errors on a damaged file ("file is not a database") do not say what
to do. This check reads the file read-only and refuses, with the path and a way
out, a file that is not SQLite, is damaged, belongs to another program, or was
written by an Optuna newer than ours. A refused file is never written to.
"""

from __future__ import annotations

import functools
import re
import sqlite3
from pathlib import Path
from urllib.parse import quote

from autotune.errors import StorageError

SQLITE_MAGIC = b"SQLite format 3\x00"
#: Tables every Optuna RDB schema since 1.0 has; a file with tables but not these is not a study database.
OPTUNA_CORE_TABLES = frozenset({"studies", "trials"})
_WAY_OUT = (
    "autotune never writes to such a file: point --workdir (or --storage) somewhere else, "
    "or move the file away"
)


def redact_url(url: str) -> str:
    """A database URL with its password hidden, for messages: ``postgresql://u:***@host/db``."""
    return re.sub(r"(://[^:/@\s]*:)[^/\s]*@", r"\1***@", url)


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
    try:
        from optuna.storages._rdb import storage as rdb
    except ImportError:  # pragma: no cover - another Optuna layout: let Optuna judge
        return frozenset()
    folder = Path(rdb.__file__).parent / "alembic" / "versions"
    found = set()
    for f in folder.glob("*.py"):
        m = re.search(r"""^revision\s*=\s*["']([^"']+)["']""", f.read_text(encoding="utf-8"), re.M)
        if m:
            found.add(m.group(1))
    return frozenset(found)
