"""Which worker runs which candidate: claims kept in the study's own database.

Several workers (one per GPU, or one per machine sharing a PostgreSQL study) choose their next
candidate from the same history. Two of them can choose the same candidate at the same moment;
the database decides, not timing: a claim is one row whose primary key is (study, candidate,
``seen``), and an INSERT succeeds for exactly one worker. ``seen`` is how many trials of that
candidate the claimer's history held, so a worker deciding from a stale history collides with
the claim of the worker that ran the candidate since, while a deliberate re-run (after an
interrupted trial) claims the next number. Optuna has no insert-if-absent primitive (study and
trial attrs are overwritten, enqueued trials are shared by every ``ask``), hence this table
beside Optuna's own; the study itself stays an ordinary Optuna study.

A claim is also a lease. Its worker renews ``heartbeat_at`` (database clock, so machines need
not agree on the time) every few seconds; a claim not renewed within its ``lease_s`` belongs to
a dead (or cut-off) worker: ``take_stale`` hands it to exactly one reaper (a compare-and-set that
re-checks the age), which fails its trial as ``interrupted`` so the candidate is run again. A
worker on the same machine and pid namespace as a dead claimer sees at once that its process is
gone and does not wait for the lease. A reaped worker learns it at its next renewal (fencing):
it stops its trial and records nothing, and it always renews right before it records a result,
which leaves it a whole lease to do so before anyone may reap it. A taken claim stays ``stale``
until its trial is failed, then becomes ``reaped``: a reaper that dies in between (it is only a
sweep, and gets killed too) leaves the claim ``stale``, and the next reaper finishes the job
(``unfinished_reaps``) instead of leaving the trial RUNNING for ever.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from autotune.errors import StorageError
from autotune.store.identity import ProcessIdentity, process_runs

TABLE_NAME = "autotune_claims"
#: Claim states. ``stale``: taken from a dead worker, its trial maybe not failed yet (the reaper
#: may have died too); ``reaped``: its trial is failed (or was finished), nothing left to do.
RUNNING, DONE, STALE, REAPED = "running", "done", "stale", "reaped"

_METADATA = sa.MetaData()
CLAIMS = sa.Table(
    TABLE_NAME,
    _METADATA,
    sa.Column("study_id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("candidate_key", sa.String(64), primary_key=True),  # sha256 of the canonical params
    sa.Column("seen", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("params_json", sa.Text, nullable=False),
    sa.Column("token", sa.String(36), nullable=False),
    sa.Column("worker", sa.String(255), nullable=False),  # for people: "host pid 123 gpu 0"
    sa.Column("place", sa.String(128), nullable=False),  # boot id + pid namespace
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("pid_started", sa.Float, nullable=False),
    sa.Column("trial_id", sa.Integer, nullable=True),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("lease_s", sa.Float, nullable=False),
    sa.Column("claimed_at", sa.Float, nullable=False),
    sa.Column("heartbeat_at", sa.Float, nullable=False),
)
#: Every turn of every worker asks for a study's claims in one state (``in_flight``, the reaper's
#: scans): without this index each asks the database to read every claim the study ever made.
STATE_INDEX = sa.Index("ix_autotune_claims_study_state", CLAIMS.c.study_id, CLAIMS.c.state)


def canonical_params(params: Mapping[str, Any]) -> str:
    """One spelling per candidate: JSON with sorted keys, so equal params compare equal."""
    return json.dumps(dict(params), sort_keys=True, separators=(",", ":"))


def candidate_key(params: Mapping[str, Any]) -> str:
    return hashlib.sha256(canonical_params(params).encode()).hexdigest()


def db_now(dialect: str) -> sa.ColumnElement[float]:
    """The database server's clock in epoch seconds, so leases never depend on the workers' clocks."""
    if dialect == "postgresql":
        return sa.literal_column("CAST(EXTRACT(EPOCH FROM clock_timestamp()) AS DOUBLE PRECISION)", sa.Float)
    if dialect == "sqlite":
        return sa.literal_column("((julianday('now') - 2440587.5) * 86400.0)", sa.Float)
    if dialect in ("mysql", "mariadb"):
        return sa.literal_column("UNIX_TIMESTAMP(NOW(6))", sa.Float)
    return sa.literal(time.time(), sa.Float)  # unknown dialect: this machine's clock


@dataclass(frozen=True)
class Claim:
    """A claim this worker holds; pass it back to renew, attach and finish."""

    study_id: int
    key: str
    seen: int
    token: str
    params: dict[str, Any]
    lease_s: float


@dataclass(frozen=True)
class ClaimRow:
    """A claim as stored, whoever holds it."""

    study_id: int
    key: str
    seen: int
    token: str
    params: dict[str, Any]
    worker: str
    place: str
    pid: int
    pid_started: float
    trial_id: int | None
    state: str
    lease_s: float
    claimed_at: float
    heartbeat_at: float

    @property
    def holder(self) -> ProcessIdentity:
        """The worker that holds the claim (its host is in its name only)."""
        return ProcessIdentity(self.pid, "", self.pid_started, place=self.place, name=self.worker)


#: The columns a ``ClaimRow`` holds as stored, under the same names.
AS_STORED = (
    "study_id", "seen", "token", "worker", "place", "pid", "pid_started", "trial_id", "state", "lease_s",
    "claimed_at", "heartbeat_at",
)  # fmt: skip


def _row(r: Any) -> ClaimRow:
    return ClaimRow(
        **{name: getattr(r, name) for name in AS_STORED},
        key=r.candidate_key,
        params=json.loads(r.params_json),
    )


@dataclass
class ClaimBook:
    """The claims of one study, as seen by one worker."""

    engine: Engine
    study_id: int
    worker: ProcessIdentity = field(default_factory=ProcessIdentity.current)
    lease_s: float = 60.0

    def __post_init__(self) -> None:
        if not self.lease_s > 0:
            raise ValueError(f"lease_s must be positive, got {self.lease_s}")
        self._now = db_now(self.engine.dialect.name)
        ensure_table(self.engine)

    def _pk(self, key: str, seen: int) -> sa.ColumnElement[bool]:
        c = CLAIMS.c
        return sa.and_(c.study_id == self.study_id, c.candidate_key == key, c.seen == seen)

    def now(self) -> float:
        with self.engine.connect() as conn:
            return float(conn.execute(sa.select(self._now)).scalar_one())

    def try_claim(self, params: Mapping[str, Any], seen: int) -> Claim | None:
        """Claim the ``seen + 1``-th run of ``params``; None when another worker holds that run."""
        claim = Claim(
            study_id=self.study_id,
            key=candidate_key(params),
            seen=seen,
            token=str(uuid.uuid4()),
            params=dict(params),
            lease_s=self.lease_s,
        )
        w = self.worker
        try:
            with self.engine.begin() as conn:
                conn.execute(
                    CLAIMS.insert().values(
                        study_id=self.study_id,
                        candidate_key=claim.key,
                        seen=seen,
                        params_json=canonical_params(params),
                        token=claim.token,
                        worker=w.name[:255],
                        place=w.place[:128],
                        pid=w.pid,
                        pid_started=w.started,
                        trial_id=None,
                        state=RUNNING,
                        lease_s=self.lease_s,
                        claimed_at=self._now,
                        heartbeat_at=self._now,
                    )
                )
        except sa.exc.IntegrityError:
            return None
        return claim

    def _update_mine(self, claim: Claim, **values: Any) -> bool:
        c = CLAIMS.c
        where = sa.and_(self._pk(claim.key, claim.seen), c.token == claim.token, c.state == RUNNING)
        with self.engine.begin() as conn:
            return conn.execute(CLAIMS.update().where(where).values(**values)).rowcount == 1

    def attach(self, claim: Claim, trial_id: int) -> bool:
        """Record the trial that runs the claim; False when the claim was reaped meanwhile."""
        return self._update_mine(claim, trial_id=trial_id, heartbeat_at=self._now)

    def renew(self, claim: Claim) -> bool:
        """Heartbeat. False when another worker reaped the claim: stop, and record nothing."""
        return self._update_mine(claim, heartbeat_at=self._now)

    def finish(self, claim: Claim) -> None:
        """The claim's trial is recorded (or abandoned): nobody needs to reap it."""
        self._update_mine(claim, state=DONE)

    def in_flight(self) -> list[ClaimRow]:
        """Claims whose run is not over: their candidates are running somewhere."""
        c = CLAIMS.c
        q = sa.select(CLAIMS).where(c.study_id == self.study_id, c.state == RUNNING)
        with self.engine.connect() as conn:
            return [_row(r) for r in conn.execute(q)]

    def _in_flight_at(self) -> tuple[float, list[ClaimRow]]:
        """``in_flight`` and the database's clock, in one query."""
        c = CLAIMS.c
        q = sa.select(CLAIMS, self._now.label("db_now")).where(
            c.study_id == self.study_id, c.state == RUNNING
        )
        with self.engine.connect() as conn:
            result = list(conn.execute(q))
        if not result:
            return 0.0, []  # nothing in flight: no clock needed
        return float(result[0].db_now), [_row(r) for r in result]

    def unfinished_reaps(self) -> list[ClaimRow]:
        """Claims taken from dead workers whose reaping may not be over: their trial may still be
        RUNNING, their trainer still alive (the reaper was killed in between, or is at it now)."""
        c = CLAIMS.c
        q = sa.select(CLAIMS).where(c.study_id == self.study_id, c.state == STALE)
        with self.engine.connect() as conn:
            return [_row(r) for r in conn.execute(q)]

    def mark_reaped(self, row: ClaimRow) -> None:
        """The stale claim's trial is failed (or was finished): nobody needs to look at it again."""
        c = CLAIMS.c
        where = sa.and_(self._pk(row.key, row.seen), c.state == STALE)
        with self.engine.begin() as conn:
            conn.execute(CLAIMS.update().where(where).values(state=REAPED))

    def all_claims(self) -> list[ClaimRow]:
        q = sa.select(CLAIMS).where(CLAIMS.c.study_id == self.study_id)
        with self.engine.connect() as conn:
            return [_row(r) for r in conn.execute(q)]

    def take_stale(self) -> list[tuple[ClaimRow, str]]:
        """Claims of dead workers, each handed to exactly one caller.

        Expired leases are re-checked inside the UPDATE, so a worker that renewed a moment
        ago keeps its claim. A taken claim without a trial is deleted (its run number is free
        again); one with a trial is marked stale, and the caller must fail that trial, then
        ``mark_reaped`` the claim. Each comes with the reason, in words.
        """
        c = CLAIMS.c
        now, rows = self._in_flight_at()
        taken = []
        for r in rows:
            gone_here = r.holder.same_machine(self.worker) and not process_runs(r.pid, r.pid_started)
            if not gone_here and r.heartbeat_at >= now - r.lease_s:
                continue
            where = sa.and_(self._pk(r.key, r.seen), c.token == r.token, c.state == RUNNING)
            if not gone_here:
                where = sa.and_(where, c.heartbeat_at < self._now - c.lease_s)
            stmt = CLAIMS.delete() if r.trial_id is None else CLAIMS.update().values(state=STALE)
            with self.engine.begin() as conn:
                if conn.execute(stmt.where(where)).rowcount == 1:
                    why = (
                        f"its worker ({r.worker}) is gone: the process ended"
                        if gone_here
                        else f"its worker ({r.worker}) sent no heartbeat for {now - r.heartbeat_at:.0f}s "
                        f"(lease {r.lease_s:g}s): the process or its machine died, or lost the database"
                    )
                    taken.append((r, why))
        return taken


_table_lock = threading.Lock()
_tables_ready: set[str] = set()


def ensure_table(engine: Engine) -> None:
    """Create the claims table once; two workers creating it at once is not an error."""
    url = engine.url.render_as_string(hide_password=False)
    with _table_lock:
        if url in _tables_ready:
            return
        for attempt in range(5):
            try:
                _METADATA.create_all(engine, checkfirst=True)
                STATE_INDEX.create(engine, checkfirst=True)  # a table made before the index had none
                break
            except (sa.exc.IntegrityError, sa.exc.ProgrammingError, sa.exc.OperationalError) as exc:
                if sa.inspect(engine).has_table(TABLE_NAME):
                    break
                if attempt == 4:
                    raise StorageError(
                        f"cannot create the claims table {TABLE_NAME!r} in {engine.url!r}: {exc}; "
                        "check that the database user may create tables"
                    ) from exc
                time.sleep(0.2)
        _tables_ready.add(url)


class Heartbeat:
    """Renews a claim every ``interval_s`` in a thread; calls ``on_lost`` once if it was reaped.

    A failed renewal (database unreachable) is retried at the next beat: if the outage
    outlasts the lease another worker may reap the claim, and the next renewal says so.
    """

    def __init__(self, book: ClaimBook, claim: Claim, interval_s: float, on_lost: Callable[[], None]) -> None:
        self._book, self._claim, self._interval = book, claim, interval_s
        self._on_lost = on_lost
        self._stop = threading.Event()
        self.lost = threading.Event()
        self.errors: list[str] = []
        self._thread = threading.Thread(target=self._run, name="autotune-heartbeat", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                alive = self._book.renew(self._claim)
            except sa.exc.SQLAlchemyError as exc:
                self.errors.append(f"{type(exc).__name__}: {exc}"[:300])
                continue
            if not alive:
                self.lost.set()
                self._on_lost()
                return

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def count_runs(trial_params: Sequence[Mapping[str, Any]], params: Mapping[str, Any]) -> int:
    """How many trials (params of each) ran or run ``params``: the ``seen`` of the next claim."""
    want = canonical_params(params)
    # Equal dicts first (cheap; JSON-equal params of finite scalars are equal dicts), then the
    # spelling that keeps True apart from 1: one JSON per trial per turn cost a sweep 10 ms at 2000.
    return sum(1 for p in trial_params if p == params and canonical_params(p) == want)
