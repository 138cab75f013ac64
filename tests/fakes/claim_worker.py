"""A worker process for the claims tests: the real claim/heartbeat/record path, a toy strategy.

The path is the sweep's own (``autotune.sweep.scheduler.ClaimedScheduler``): ``claim_next``, then
``SweepStudy.start_trial`` + ``attach_or_fail``, a ``Heartbeat`` while it runs, then ``renew``
+ ``SweepStudy.finish_trial`` + ``finish``.

The strategy proposes the lowest ``x`` not yet measured and not in flight, so every worker
wants the same candidate at the same moment: the worst case for races. A "trial" sleeps
``--work`` seconds (or forever for ``--hang X``, until the test kills the worker).
Usage: claim_worker.py URL STUDY OUTDIR NAME [--lease S] [--place P] [--hang X] [--work S] [--poll S]
[--go FILE]
Writes OUTDIR/NAME.log: one line per event ("start N x", "done N x", "reaped N x", "lost N x").
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import threading
import time
from pathlib import Path

import optuna
from optuna.distributions import IntDistribution
from optuna.trial import FrozenTrial, TrialState

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from autotune.store import optuna_private as op
from autotune.store.claims import Claim, ClaimBook, Heartbeat
from autotune.store.identity import ProcessIdentity
from autotune.store.storage import open_storage
from autotune.store.study import SweepStudy
from autotune.store.workers import Waiting, attach_or_fail, claim_next

N_CANDIDATES = 8


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("study")
    ap.add_argument("outdir", type=Path)
    ap.add_argument("name")
    ap.add_argument("--lease", type=float, default=30.0)
    ap.add_argument("--place", default=None, help="pretend to be on another machine")
    ap.add_argument("--hang", type=int, default=None)
    ap.add_argument("--work", type=float, default=0.1)
    ap.add_argument("--poll", type=float, default=0.05, help="seconds between looks while others run")
    ap.add_argument("--go", type=Path, default=None, help="wait for this file before starting")
    a = ap.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    log = (a.outdir / f"{a.name}.log").open("a", buffering=1)
    study = SweepStudy.load(open_storage(a.url, create=False), a.study)
    me = ProcessIdentity.current(a.name)
    if a.place:
        me = dataclasses.replace(me, place=a.place)
    book = ClaimBook(op.engine(study.storage), study.study_id, worker=me, lease_s=a.lease)
    dist = {"x": IntDistribution(0, N_CANDIDATES - 1)}

    def fresh() -> list[FrozenTrial]:
        study.refresh()
        return study.trials()

    def propose(trials, in_flight):  # type: ignore[no-untyped-def]
        busy = {t.params["x"] for t in trials if t.state == TrialState.RUNNING}
        busy |= {p["x"] for p in in_flight}
        done = {t.params["x"] for t in trials if t.user_attrs.get("outcome") == "ok"}
        for x in range(N_CANDIDATES):
            if x not in busy and x not in done:
                return {"x": x}
        return None

    if a.go is not None:
        while not a.go.exists():
            time.sleep(0.01)
    while True:
        step = claim_next(
            study.study,
            book,
            propose,
            on_reaped=lambda r: log.write(f"reaped {r.number} {r.params['x']}\n"),
            read_trials=fresh,
        )
        if step is None:
            return 0
        if isinstance(step, Waiting):
            time.sleep(a.poll)
            continue
        assert isinstance(step, Claim)
        x = step.params["x"]
        trial = study.start_trial(step.params, dist, {"worker": me.name})
        if not attach_or_fail(study.study, book, step, op.trial_id(trial)):
            continue  # stalled past the lease before starting: another worker took it
        log.write(f"start {trial.number} {x}\n")
        stop = threading.Event()
        with Heartbeat(book, step, a.lease / 4, stop.set):
            if x == a.hang:
                stop.wait()  # hangs until killed (or until reaped: then it stops)
            else:
                stop.wait(a.work)
        if stop.is_set() or not book.renew(step):  # reaped: the trial was handed on, write nothing
            log.write(f"lost {trial.number} {x}\n")
            continue
        study.finish_trial(trial, {"outcome": "ok"}, float(x))
        book.finish(step)
        log.write(f"done {trial.number} {x}\n")


if __name__ == "__main__":
    raise SystemExit(main())
