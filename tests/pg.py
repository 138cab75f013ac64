"""A throwaway PostgreSQL server for tests: Debian's ``postgresql`` package, loopback only.

Workers on several machines share one study through PostgreSQL, so the tests that prove
"no candidate runs twice" must run against a real server, not SQLite. This pytest plugin
(registered in ``conftest.py``) starts one server per test session in a temporary folder
(``initdb`` + ``pg_ctl``, listening on 127.0.0.1 and a unix socket in that folder only),
gives each test its own fresh database, and removes everything at the end.

``initdb`` refuses to run as root, so as root the server runs as the ``postgres`` user
that the Debian package creates. Without the binaries the tests skip, except in CI
(``CI=true``), where a missing server is a failure: ``.ci/run`` installs it.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

IN_CI = os.environ.get("CI") == "true"
SUPERUSER = "autotune"


class PostgresUnavailable(Exception):
    """No PostgreSQL server binaries here, or no way to run them; ``str()`` says why."""


def find_bin_dir() -> Path:
    """The folder holding ``initdb`` and ``pg_ctl``: the PATH first, then Debian's versioned dirs."""
    on_path = shutil.which("pg_ctl")
    if on_path and shutil.which("initdb"):
        return Path(on_path).resolve().parent
    candidates = []
    for d in Path("/usr/lib/postgresql").glob("*/bin"):
        if (d / "initdb").is_file() and (d / "pg_ctl").is_file() and d.parent.name.isdigit():
            candidates.append((int(d.parent.name), d))
    if not candidates:
        raise PostgresUnavailable(
            "no PostgreSQL server binaries (initdb, pg_ctl) on PATH or in /usr/lib/postgresql/*/bin; "
            "install them with: apt-get install -y postgresql"
        )
    return max(candidates)[1]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PostgresServer:
    """One running server; ``url(db)`` is a SQLAlchemy URL for a database on it."""

    root: Path
    port: int
    bin_dir: Path
    run_as: tuple[int, int] | None  # (uid, gid) when we started as root

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    def url(self, database: str, *, driver: str = "") -> str:
        """A plain ``postgresql://`` URL (psycopg 3, what the ``postgres`` extra installs), or one
        naming ``driver`` (``psycopg2``)."""
        scheme = f"postgresql+{driver}" if driver else "postgresql"
        return f"{scheme}://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str | None = None) -> str:
        """A new empty database; returns its plain SQLAlchemy URL."""
        import psycopg

        name = name or "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(
            host="127.0.0.1", port=self.port, user=SUPERUSER, dbname="postgres", autocommit=True
        ) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        _run(
            [str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), "-m", "immediate", "-w", "stop"],
            self.run_as,
            check=False,
        )
        shutil.rmtree(self.root, ignore_errors=True)


def _run(argv: list[str], run_as: tuple[int, int] | None, *, check: bool = True) -> str:
    kwargs: dict[str, Any] = {}
    if run_as is not None:
        kwargs = {"user": run_as[0], "group": run_as[1], "extra_groups": []}
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=60, env={**os.environ, "LC_ALL": "C"}, **kwargs
    )
    if check and proc.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
        )
    return proc.stdout + proc.stderr


def start_server() -> PostgresServer:
    """Initialise and start a server in a fresh temporary folder (tuned for speed, not durability)."""
    bin_dir = find_bin_dir()
    run_as: tuple[int, int] | None = None
    if os.geteuid() == 0:
        try:
            pw = pwd.getpwnam("postgres")
        except KeyError:
            raise PostgresUnavailable(
                "running as root and there is no 'postgres' user to run initdb as "
                "(initdb refuses root); install the postgresql package, which creates it"
            ) from None
        run_as = (pw.pw_uid, pw.pw_gid)
    # Not under pytest's tmp_path: that is private to root (mode 0700) and the server may
    # run as 'postgres'. The unix socket path must also stay short (107 bytes).
    root = Path(tempfile.mkdtemp(prefix="autotune-pg-"))
    try:
        if run_as is not None:
            os.chown(root, *run_as)
        data = root / "data"
        _run(
            [
                str(bin_dir / "initdb"),
                "-D",
                str(data),
                "-U",
                SUPERUSER,
                "--auth=trust",
                "--no-locale",
                "-E",
                "UTF8",
                "--no-sync",
            ],
            run_as,
        )
        last_error = ""
        for _ in range(3):  # the free port may be taken between our probe and the server's bind
            port = _free_port()
            opts = (
                f"-p {port} -c listen_addresses=127.0.0.1 -k {root} -c fsync=off "
                "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
            )
            out = _run(
                [
                    str(bin_dir / "pg_ctl"),
                    "-D",
                    str(data),
                    "-l",
                    str(root / "server.log"),
                    "-w",
                    "-t",
                    "60",
                    "-o",
                    opts,
                    "start",
                ],
                run_as,
                check=False,
            )
            if re.search(r"server started", out):
                return PostgresServer(root=root, port=port, bin_dir=bin_dir, run_as=run_as)
            log = root / "server.log"
            last_error = out + (log.read_text(errors="replace")[-2000:] if log.exists() else "")
        raise RuntimeError(f"PostgreSQL did not start:\n{last_error}")
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    """One PostgreSQL server for the whole session; skips (fails in CI) where there is none."""
    try:
        server = start_server()
    except PostgresUnavailable as exc:
        if IN_CI:
            pytest.fail(f"PostgreSQL is required in CI: {exc}")
        pytest.skip(str(exc))
    try:
        yield server
    finally:
        with contextlib.suppress(Exception):
            server.stop()


@pytest.fixture
def pg_url(pg_server: PostgresServer, request: pytest.FixtureRequest) -> str:
    """A fresh, empty database on the session's server, as a SQLAlchemy URL.

    Only for tests marked ``@pytest.mark.postgres``: the fast tier (``pytest`` alone) leaves them
    out, and an unmarked one would start a server there."""
    if request.node.get_closest_marker("postgres") is None:
        pytest.fail(f"{request.node.nodeid} uses PostgreSQL: mark it @pytest.mark.postgres", pytrace=False)
    return pg_server.create_database()
