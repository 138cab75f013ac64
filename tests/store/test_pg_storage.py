"""Opening one fresh PostgreSQL database from several processes at once (``open_storage``).

Optuna's start-up writes even when it is told not to create tables: once they exist it adds
a version row and stamps ``alembic_version``. A worker polling for a study that the sweep was
creating at that moment stamped along with it, and one of the two died on ``alembic_version``
(UniqueViolation or DuplicateTable); when that was the sweep, the workers waited in vain for
its study (a CI failure of ``test_three_workers_share_one_postgres_study_and_run_nothing_twice``).
``open_storage`` now runs the start-up under a PostgreSQL advisory lock; these tests prove that
every start-up waits for one in progress, and that racing openers all succeed.
"""

from __future__ import annotations

import multiprocessing as mp
import subprocess
import sys
import textwrap
import time
from multiprocessing.synchronize import Barrier
from pathlib import Path

import pytest
import sqlalchemy
from optuna.storages import RDBStorage
from optuna.storages._rdb import models

from autotune.store.postgres import PG_SETUP_LOCK_KEY
from autotune.store.storage import open_storage
from autotune.store.study import study_names
from tests.helpers import REPO
from tests.pg import PostgresServer

pytestmark = pytest.mark.postgres

OPEN = textwrap.dedent(
    """
    import sys
    from autotune.store.storage import open_storage
    from autotune.store.study import study_names
    if sys.argv[2] == "report":  # autotune report's own read-only opener
        storage = open_storage(sys.argv[1], read_only=True)
    else:
        storage = open_storage(sys.argv[1], create=sys.argv[2] == "create")
    print("studies:", study_names(storage))
    """
)


def _opener(url: str, mode: str, tmp: Path) -> subprocess.Popen[str]:
    """A process that opens ``url`` as the sweep (``create``), a waiting worker (``read``) or
    ``autotune report`` (``report``) does."""
    return subprocess.Popen(
        [sys.executable, "-c", OPEN, url, mode],
        cwd=REPO,
        stdout=(tmp / f"{mode}.out").open("w"),
        stderr=subprocess.STDOUT,
        text=True,
    )


def _waiting_for_setup_lock(engine: sqlalchemy.Engine) -> int:
    """How many sessions wait for the set-up lock right now (PostgreSQL's own lock table)."""
    hi, lo = divmod(PG_SETUP_LOCK_KEY, 1 << 32)
    with engine.connect() as conn:
        return int(
            conn.execute(
                sqlalchemy.text(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
                    "AND classid = :hi AND objid = :lo AND objsubid = 1"
                ),
                {"hi": hi, "lo": lo},
            ).scalar_one()
        )


def _stamped(engine: sqlalchemy.Engine) -> bool:
    return sqlalchemy.inspect(engine).has_table("alembic_version")


def test_openers_wait_for_a_setup_in_progress_and_write_nothing_into_it(pg_url: str, tmp_path: Path) -> None:
    """Deterministic: this test is the creator, stopped between creating Optuna's tables and
    stamping them; a sweep, a polling worker and a report arriving then all wait, then all succeed."""
    engine = sqlalchemy.create_engine(pg_url)
    procs: dict[str, subprocess.Popen[str]] = {}
    try:
        with engine.begin() as held:
            held.execute(sqlalchemy.text("SELECT pg_advisory_xact_lock(:k)"), {"k": PG_SETUP_LOCK_KEY})
            models.BaseModel.metadata.create_all(engine)  # the tables, not yet the version bookkeeping
            procs = {mode: _opener(pg_url, mode, tmp_path) for mode in ("read", "create", "report")}
            deadline = time.monotonic() + 60
            while _waiting_for_setup_lock(engine) < len(procs):
                done = {m: p.returncode for m, p in procs.items() if p.poll() is not None}
                assert not done and time.monotonic() < deadline, (
                    f"expected every opener to wait for the set-up in progress; exited: {done}; "
                    + " | ".join(f"{m}: {(tmp_path / f'{m}.out').read_text()}" for m in procs)
                )
                time.sleep(0.05)
            assert not _stamped(engine)  # neither wrote into the half-made schema
            with engine.connect() as conn:
                assert conn.execute(sqlalchemy.text("SELECT count(*) FROM version_info")).scalar_one() == 0
            RDBStorage(pg_url).engine.dispose()  # the set-up ends (the lock is released just after)
        for mode, proc in procs.items():
            assert proc.wait(timeout=60) == 0, (tmp_path / f"{mode}.out").read_text()
            assert "studies: []" in (tmp_path / f"{mode}.out").read_text()
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
        engine.dispose()


def _race(urls: list[str], create: bool, gate: Barrier, results: mp.Queue[tuple[int, bool, str]]) -> None:
    """Open each of ``urls`` the moment every racer is ready: as a sweep, or polled as a worker does."""
    for i, url in enumerate(urls):
        gate.wait(timeout=120)
        deadline = time.monotonic() + 60
        while True:
            try:
                study_names(open_storage(url, create=create))
            except Exception as exc:
                # A worker before the sweep finds no tables yet and polls again; nothing else is fine.
                if create or "holds no study yet" not in str(exc) or time.monotonic() > deadline:
                    results.put((i, create, f"{type(exc).__name__}: {exc}"))
                    break
                time.sleep(0.01)
            else:
                results.put((i, create, "ok"))
                break


def test_sweeps_and_waiting_workers_opening_a_fresh_database_together_all_succeed(
    pg_server: PostgresServer,
) -> None:
    """Two sweeps and two polling workers per fresh database, released at the same instant."""
    urls = [pg_server.create_database() for _ in range(5)]
    roles = [True, True, False, False]
    ctx = mp.get_context("spawn")  # not fork: the parent's database connections stay its own
    gate, results = ctx.Barrier(len(roles)), ctx.Queue()
    procs = [ctx.Process(target=_race, args=(urls, create, gate, results)) for create in roles]
    for p in procs:
        p.start()
    try:
        got = sorted(results.get(timeout=120) for _ in range(len(urls) * len(roles)))
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    failed = [g for g in got if g[2] != "ok"]
    assert not failed, failed
