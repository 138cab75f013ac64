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


def check_workdir(workdir: Path) -> Path:
    """A usage error when ``--workdir`` (or a folder above it) is a file: the sweep keeps its
    database and one folder per trial there (a missing folder is made)."""
    probe = workdir
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        what = "is a file" if probe == workdir else f"is inside {probe}, which is a file"
        raise UsageError(
            f"--workdir {workdir} {what}, not a folder: the sweep keeps its study database and one "
            "folder per trial there. Pass a folder (it is made if missing), or move the file away"
        )
    return workdir


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


#: Query parameters that carry a secret (libpq's ``password``, and the like).
_SECRET_PARAMS = re.compile(r"([?&](?:password|passwd|pwd|sslpassword|secret|token)=)[^&\s]*", re.I)


def redact_url(url: str) -> str:
    """A database URL with every secret hidden, for anything shown or stored for people
    (``postgresql://u:***@host/db``; a ``?password=`` too). The one redaction: the sweep's first
    line, ``status``, messages and the result all show URLs through it.

    The password ends at the URL's last ``@`` (SQLAlchemy reads it so: ``p@ss`` or ``pa/ss`` in
    a password written unencoded is hidden whole).
    """
    shown = re.sub(r"^([A-Za-z][\w+.-]*://[^:/@\s]*:)(.*)@", r"\1***@", url, count=1)
    return _SECRET_PARAMS.sub(r"\1***", shown)


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


#: Per database kind (SQLAlchemy's backend name): the DBAPI driver SQLAlchemy picks for a plain
#: ``kind://`` URL, how to install it, and a URL naming another driver that also works.
_DRIVERS: dict[str, tuple[str, str, str]] = {
    "postgresql": (
        "psycopg",
        "pip install 'autotune[postgres]' (psycopg 3)",
        "postgresql+psycopg2:// with psycopg2",
    ),
    "mysql": ("MySQLdb", "pip install mysqlclient", "mysql+pymysql://... after pip install pymysql"),
    "mariadb": ("MySQLdb", "pip install mysqlclient", "mariadb+pymysql://... after pip install pymysql"),
    "mssql": (
        "pyodbc",
        "pip install pyodbc (and an ODBC driver)",
        "mssql+pymssql://... after pip install pymssql",
    ),
    "oracle": ("oracledb", "pip install oracledb", ""),
}
#: Drivers named in a URL (``kind+driver://``) -> the package that provides them.
_PACKAGES = {
    "psycopg2": "psycopg2-binary",
    "psycopg": "'psycopg[binary]'",
    "pg8000": "pg8000",
    "asyncpg": "asyncpg",
    "pymysql": "pymysql",
    "mysqldb": "mysqlclient",
    "mysqlconnector": "mysql-connector-python",
    "pymssql": "pymssql",
    "pyodbc": "pyodbc",
    "oracledb": "oracledb",
}


def missing_driver_advice(url: str, exc: BaseException) -> str:
    """What to install for a database URL whose driver is missing, for that database kind and
    driver (never the PostgreSQL extra for MySQL, never a package that is there already)."""
    import importlib.util

    from sqlalchemy.engine import make_url

    shown = redact_url(url)
    try:
        parsed = make_url(url)
        kind, named = parsed.get_backend_name(), parsed.get_driver_name() if "+" in parsed.drivername else ""
    except Exception:
        return f"the database driver for {shown} is not installed ({exc})"
    head = f"the database driver for {shown} is not installed ({exc})"
    if named:
        package = _PACKAGES.get(named.lower(), named)
        other = ""
        if kind == "postgresql" and named != "psycopg" and importlib.util.find_spec("psycopg") is not None:
            other = "; psycopg 3 is installed here, which a plain postgresql:// URL uses"
        return f"{head}: {kind}+{named}:// needs pip install {package}{other}"
    driver, install, alternative = _DRIVERS.get(kind, ("", "", ""))
    if not install:
        return f"{head}: install the Python driver SQLAlchemy names for {kind} (see its dialect docs)"
    if importlib.util.find_spec(driver) is not None:  # there, but fails to import: say that, not "install"
        return f"{head}: {driver} is installed but does not import; reinstall it ({install})"
    return f"{head}: {install}" + (f", or write {alternative}" if alternative else "")
