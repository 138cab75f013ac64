"""Claims: one worker per candidate run, on SQLite and on a real PostgreSQL server.

Races are provoked, not hoped for: threads and processes released together by one barrier
all want the same candidate. Dead workers are made by SIGKILL.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import optuna
import psutil
import pytest
from optuna.distributions import IntDistribution
from optuna.trial import TrialState
from sqlalchemy.engine import Engine

from autotune.store import optuna_private as op
from autotune.store.claims import ClaimBook, Heartbeat, candidate_key, canonical_params, count_runs
from autotune.store.identity import ProcessIdentity, process_runs
from autotune.store.recovery import fail_trial, reap_stale
from autotune.store.storage import open_storage
from autotune.store.study import SweepStudy
from tests.helpers import FAKES, wait_for

WORKER = FAKES / "claim_worker.py"


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'studies.db'}"
    return str(request.getfixturevalue("pg_url"))


def _study(url: str, name: str = "s") -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(study_name=name, storage=url, direction="maximize")


def _engine(url: str) -> Engine:
    """The claims' engine, opened the one way autotune opens a study database."""
    return op.engine(open_storage(url))


def _other_place(name: str = "elsewhere") -> ProcessIdentity:
    return ProcessIdentity(pid=1, host=name, started=0.0, place=f"machine-{name}", name=f"{name} pid 1")


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ({"x": 1, "y": "none"}, {"y": "none", "x": 1}, True),
        ({"batch_size": 2}, {"batch_size": 4}, False),
        ({"gradient_checkpointing": True}, {"gradient_checkpointing": "true"}, False),
        ({"optimizer": "adamw"}, {"optimizer": "adamw", "batch_size": 1}, False),
    ],
)
def test_candidate_identity_ignores_key_order_only(a: dict, b: dict, same: bool) -> None:
    assert (canonical_params(a) == canonical_params(b)) is same
    assert (candidate_key(a) == candidate_key(b)) is same
    assert len(candidate_key(a)) == 64


@pytest.mark.parametrize(
    ("history", "params", "seen"),
    [
        ([], {"x": 1}, 0),
        ([{"x": 1}, {"x": 2}], {"x": 1}, 1),
        ([{"x": 1}, {"x": 1}, {"x": 2}], {"x": 1}, 2),
        ([{"x": 2}], {"x": 1}, 0),
        ([{"x": True}, {"x": 1}, {"x": 1, "y": 2}], {"x": 1}, 1),  # True is not 1, as the claim key says
    ],
)
def test_count_runs(history: list[dict], params: dict, seen: int) -> None:
    assert count_runs(history, params) == seen


def test_one_winner_when_many_claim_the_same_run_at_once(db_url: str) -> None:
    study = _study(db_url)
    engine = _engine(db_url)
    n = 6
    books = [ClaimBook(engine, study._study_id, worker=_other_place(f"w{i}"), lease_s=30) for i in range(n)]
    barrier = threading.Barrier(n)
    results: list[object] = [None] * n

    def go(i: int) -> None:
        barrier.wait()
        results[i] = books[i].try_claim({"x": 3}, seen=0)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [r for r in results if r is not None]
    assert len(winners) == 1
    # The next run of the same candidate is a different claim, and free.
    assert books[0].try_claim({"x": 3}, seen=1) is not None
    assert [(r.seen, r.params) for r in sorted(books[0].in_flight(), key=lambda r: r.seen)] == [
        (0, {"x": 3}),
        (1, {"x": 3}),
    ]
    engine.dispose()


def test_lease_expiry_hands_the_claim_to_one_reaper_and_fences_the_holder(db_url: str) -> None:
    study = _study(db_url)
    engine = _engine(db_url)
    holder = ClaimBook(engine, study._study_id, worker=_other_place("holder"), lease_s=0.5)
    reapers = [ClaimBook(engine, study._study_id, lease_s=30) for _ in range(3)]
    claim = holder.try_claim({"x": 1}, seen=0)
    assert claim is not None and holder.attach(claim, trial_id=7)
    assert all(r.take_stale() == [] for r in reapers)  # fresh lease: nobody may take it

    t0 = time.monotonic()
    taken: list[object] = []
    wait_for(lambda: bool(taken.extend(r.take_stale() for r in reapers) or any(taken)), "the lease to expire")
    assert time.monotonic() - t0 >= 0.3
    rows = [row for batch in taken for row in batch]  # type: ignore[union-attr]
    assert len(rows) == 1
    row, why = rows[0]
    assert row.trial_id == 7 and "sent no heartbeat" in why and "holder" in why
    assert holder.renew(claim) is False  # fenced: the holder learns it lost the claim
    assert holder.in_flight() == []
    engine.dispose()


def test_renewing_keeps_the_claim_past_its_lease(db_url: str) -> None:
    study = _study(db_url)
    engine = _engine(db_url)
    holder = ClaimBook(engine, study._study_id, worker=_other_place("holder"), lease_s=0.6)
    reaper = ClaimBook(engine, study._study_id, lease_s=30)
    claim = holder.try_claim({"x": 1}, seen=0)
    assert claim is not None
    lost = threading.Event()
    with Heartbeat(holder, claim, interval_s=0.1, on_lost=lost.set) as hb:
        deadline = time.monotonic() + 1.5  # well past the lease
        while time.monotonic() < deadline:
            assert reaper.take_stale() == []
            time.sleep(0.1)
    assert not lost.is_set() and hb.errors == []
    engine.dispose()


def test_a_dead_claimer_on_this_machine_is_reaped_without_waiting_for_its_lease(db_url: str) -> None:
    study = _study(db_url)
    engine = _engine(db_url)
    me = ProcessIdentity.current()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    ghost = ProcessIdentity(
        name="ghost",
        place=me.place,
        pid=child.pid,
        host=me.host,
        started=round(psutil.Process(child.pid).create_time(), 3),
    )
    dead = ClaimBook(engine, study._study_id, worker=ghost, lease_s=3600)
    claim = dead.try_claim({"x": 5}, seen=0)
    assert claim is not None
    reaper = ClaimBook(engine, study._study_id, worker=me, lease_s=3600)
    assert reaper.take_stale() == []  # alive
    assert process_runs(child.pid, ghost.started)
    child.kill()
    child.wait()
    assert not process_runs(child.pid, ghost.started)
    [(row, why)] = reaper.take_stale()
    assert row.trial_id is None and "gone" in why
    # A claim without a trial is deleted: the same run number may be claimed again.
    assert reaper.try_claim({"x": 5}, seen=0) is not None
    engine.dispose()


class _ReaperDied(Exception):
    """Stands for the SIGKILL of a reaper (it is only a sweep) at one point of its work."""


def _claim_of_a_dead_worker(url: str, study: optuna.Study, engine: Engine) -> int:
    """A RUNNING trial tied to the claim of a worker of this machine that was SIGKILLed; its id."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    ghost = dataclasses.replace(
        ProcessIdentity.current(), name="ghost", pid=child.pid,
        started=round(psutil.Process(child.pid).create_time(), 3),
    )  # fmt: skip
    child.kill()
    child.wait()
    dead = ClaimBook(engine, study._study_id, worker=ghost, lease_s=3600)
    claim = dead.try_claim({"x": 1}, seen=0)
    sweep = SweepStudy.load(open_storage(url), study.study_name)
    trial_id = op.trial_id(sweep.start_trial({"x": 1}, {"x": IntDistribution(0, 7)}, {}))
    assert claim is not None and dead.attach(claim, trial_id)
    return trial_id


def _die_after_taking(study: optuna.Study, book: ClaimBook) -> None:
    book.take_stale()


def _die_while_ending_processes(study: optuna.Study, book: ClaimBook) -> None:
    def dies(trial_id: int) -> list[int]:
        raise _ReaperDied

    with pytest.raises(_ReaperDied):
        reap_stale(study, book, end_processes=dies)


def _die_after_failing(study: optuna.Study, book: ClaimBook) -> None:
    [(row, why)] = book.take_stale()
    assert row.trial_id is not None and fail_trial(study, row.trial_id, f"interrupted: {why}")


@pytest.mark.parametrize(
    ("dies", "still_running"),
    [
        (_die_after_taking, True),  # the CI flake: the trial stayed RUNNING for ever
        (_die_while_ending_processes, True),  # the trainer is not ended yet: the trial still runs
        (_die_after_failing, False),  # only the claim's last mark is missing
    ],
)
def test_a_reaper_killed_midway_leaves_the_rest_to_the_next_reaper(
    db_url: str, dies: Callable[[optuna.Study, ClaimBook], None], still_running: bool
) -> None:
    study = _study(db_url)
    engine = _engine(db_url)
    trial_id = _claim_of_a_dead_worker(db_url, study, engine)
    me = ProcessIdentity.current()
    dies(study, ClaimBook(engine, study._study_id, worker=me))
    [trial] = study.get_trials()
    assert (trial.state == TrialState.RUNNING) == still_running
    assert [c.state for c in ClaimBook(engine, study._study_id).all_claims()] == ["stale"]

    states_when_ended: list[TrialState] = []

    def end_processes(tid: int) -> list[int]:
        assert tid == trial_id
        states_when_ended.append(study._storage.get_trial(tid).state)
        return [4242]

    nxt = ClaimBook(engine, study._study_id, worker=me)
    reaped = reap_stale(study, nxt, end_processes=end_processes)
    [trial] = study.get_trials()
    assert trial.state == TrialState.FAIL and trial.user_attrs["outcome"] == "interrupted"
    if still_running:  # leftovers are ended while the trial still runs, then it is failed
        assert states_when_ended == [TrialState.RUNNING]
        [r] = reaped
        assert (r.number, r.params, r.local, r.killed) == (0, {"x": 1}, True, (4242,))
        assert "ghost" in r.reason and "the candidate will be run again" in r.reason
    else:  # already failed (and its processes ended): nothing to do but the mark
        assert states_when_ended == [] and reaped == []
    assert [c.state for c in nxt.all_claims()] == ["reaped"]
    assert reap_stale(study, nxt, end_processes=end_processes) == []  # done once for all
    assert len(states_when_ended) == int(still_running)
    engine.dispose()


def _spawn(url: str, out: Path, name: str, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), url, "s", str(out), name, *extra],
        stdin=subprocess.DEVNULL,
    )


def _events(out: Path) -> list[tuple[str, str, int, int]]:
    ev = []
    for log in sorted(out.glob("*.log")):
        for line in log.read_text().splitlines():
            kind, number, x = line.split()
            ev.append((log.stem, kind, int(number), int(x)))
    return ev


@pytest.mark.process
def test_three_workers_run_every_candidate_exactly_once(tmp_path: Path) -> None:
    """On SQLite; on PostgreSQL the real sweep does it (tests/e2e/test_scaleout.py)."""
    db_url = f"sqlite:///{tmp_path / 'studies.db'}"
    study = _study(db_url)
    out = tmp_path / "out"
    out.mkdir()
    go = tmp_path / "go"
    procs = [_spawn(db_url, out, f"w{i}", "--go", str(go), "--work", "0.15") for i in range(3)]
    go.touch()  # the workers wait for this file after their imports: released together
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0]
    trials = study.get_trials()
    xs = Counter(t.params["x"] for t in trials)
    assert sorted(xs) == list(range(8))
    assert set(xs.values()) == {1}, f"a candidate ran twice: {xs}"
    assert all(t.state == TrialState.COMPLETE for t in trials)
    starts = [e for e in _events(out) if e[1] == "start"]
    assert len(starts) == 8
    book = ClaimBook(_engine(db_url), study._study_id)
    assert book.in_flight() == []
    assert len(book.all_claims()) == 8


@pytest.mark.process
@pytest.mark.parametrize(
    ("backend", "machines"), [("sqlite", "same"), pytest.param("pg", "other", marks=pytest.mark.postgres)]
)
def test_a_killed_workers_trial_is_run_again_by_another(
    request: pytest.FixtureRequest, tmp_path: Path, backend: str, machines: str
) -> None:
    """SIGKILL a worker mid-trial: another worker fails that trial as interrupted and reruns it.

    "same": both workers on this machine, so the survivor sees at once that the process is
    gone. "other": they pretend to be on two machines, so only the lapsed lease tells. (The
    real sweep and worker commands do it on PostgreSQL in tests/e2e/test_scaleout.py.)
    """
    db_url = (
        f"sqlite:///{tmp_path / 'studies.db'}" if backend == "sqlite" else request.getfixturevalue("pg_url")
    )
    study = _study(db_url)
    out = tmp_path / "out"
    out.mkdir()
    lease = "1.2"
    place_a = ["--place", "machine-a"] if machines == "other" else []
    place_b = ["--place", "machine-b"] if machines == "other" else []
    a = _spawn(db_url, out, "a", "--lease", lease, "--hang", "0", *place_a)
    try:
        wait_for(lambda: any(e[:2] == ("a", "start") for e in _events(out)), "worker a to start x=0")
        os.kill(a.pid, signal.SIGKILL)
        a.wait(timeout=10)
    finally:
        if a.poll() is None:
            a.kill()
            a.wait()
    [hung] = study.get_trials()
    assert hung.state == TrialState.RUNNING and hung.params == {"x": 0}
    t0 = time.monotonic()
    b = _spawn(db_url, out, "b", "--lease", lease, *place_b)
    assert b.wait(timeout=120) == 0
    elapsed = time.monotonic() - t0

    trials = study.get_trials()
    first = trials[0]
    assert first.state == TrialState.FAIL
    assert first.user_attrs["outcome"] == "interrupted"
    assert "the candidate will be run again" in first.user_attrs["reason"]
    assert ("gone" if machines == "same" else "sent no heartbeat") in first.user_attrs["reason"]
    reruns = [t for t in trials[1:] if t.params == {"x": 0}]
    assert len(reruns) == 1 and reruns[0].state == TrialState.COMPLETE
    ok = Counter(t.params["x"] for t in trials if t.state == TrialState.COMPLETE)
    assert sorted(ok) == list(range(8)) and set(ok.values()) == {1}
    b_events = [e for e in _events(out) if e[0] == "b"]
    assert ("b", "reaped", 0, 0) in b_events
    assert elapsed < 60
