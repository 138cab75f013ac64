"""Where a study lives: the default database, what a storage URL may be, and how one is shown.

Why a module of its own: the sweep, ``autotune worker``, ``status`` and ``report`` all work
the default out of the same workdir, check a ``--storage`` URL before any work, and name the
database in messages without its password. One place, so they never disagree.
"""

from __future__ import annotations

import re
from pathlib import Path

from autotune.errors import UsageError

#: The folder every command works in by default (``./autotune-runs``): the database and one
#: folder per trial.
DEFAULT_WORKDIR = Path("autotune-runs")
#: The study database's file name inside the workdir.
DB_FILE = "studies.db"

_EXAMPLES = "sqlite:///path/to/studies.db or postgresql://user@host/dbname"


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


def is_sqlite(url: str) -> bool:
    """An SQLite URL (a file or in-memory): it gets a lock timeout, never a server's options."""
    return url.startswith("sqlite")


def redact_url(url: str) -> str:
    """A database URL with its password hidden, for messages: ``postgresql://u:***@host/db``."""
    return re.sub(r"(://[^:/@\s]*:)[^/\s]*@", r"\1***@", url)


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
        raise UsageError(f"--storage {redact_url(url)!r} is not a database URL; write it like {_EXAMPLES}")
    assert parsed is not None
    try:
        parsed.get_dialect()
    except ImportError:
        pass  # a known kind whose driver is missing: open_storage says which extra to install
    except Exception:  # sqlalchemy knows no such database kind
        raise UsageError(
            f"--storage {redact_url(url)!r}: unknown database kind {parsed.drivername!r}; write it like "
            + _EXAMPLES
        ) from None
    return url
