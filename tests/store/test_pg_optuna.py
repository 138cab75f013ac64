"""The throwaway PostgreSQL server works with Optuna's RDB storage, heartbeats included.

This checks the test infrastructure and Optuna's documented way to distribute, before our
own claims build on them: a process killed mid-trial leaves a RUNNING trial whose heartbeat
goes stale; ``fail_stale_trials`` fails it and ``RetryHeartbeatStaleTrialCallback`` queues
the same params again, which the next worker runs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import optuna
import pytest
from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback, fail_stale_trials
from optuna.trial import TrialState

from tests.helpers import wait_for
from tests.pg import PostgresServer

pytestmark = pytest.mark.postgres

WORKER = textwrap.dedent(
    """
    import sys, time, optuna
    from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback
    url, started, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = RDBStorage(url, heartbeat_interval=1, grace_period=2,
                         heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(max_retry=2))
    study = optuna.load_study(study_name="hb", storage=storage)
    def objective(trial):
        x = trial.suggest_int("x", 0, 1000)
        open(started, "w").write(str(trial.number))
        if mode == "hang":
            sys.stdin.read()  # blocks until killed
        return float(x)
    study.optimize(objective, n_trials=1)
    """
)


def test_server_is_loopback_only_and_serves_fresh_databases(pg_server: PostgresServer, pg_url: str) -> None:
    import sqlalchemy

    engine = sqlalchemy.create_engine(pg_url)
    with engine.connect() as conn:
        listen = conn.execute(sqlalchemy.text("SHOW listen_addresses")).scalar()
        tables = conn.execute(
            sqlalchemy.text("SELECT count(*) FROM information_schema.tables WHERE table_schema='public'")
        ).scalar()
    engine.dispose()
    assert listen == "127.0.0.1"
    assert tables == 0
    assert pg_server.create_database() != pg_url


def test_killed_worker_trial_goes_stale_and_is_retried(pg_url: str, tmp_path: Path) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = RDBStorage(
        pg_url,
        heartbeat_interval=1,
        grace_period=2,
        heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(max_retry=2),
    )
    study = optuna.create_study(study_name="hb", storage=storage, direction="maximize")
    started = tmp_path / "started"
    child = subprocess.Popen(
        [sys.executable, "-c", WORKER, pg_url, str(started), "hang"],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(started.exists, "the worker to start its trial", 20.0)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    [running] = study.get_trials(deepcopy=False)
    assert running.state == TrialState.RUNNING

    def stale_failed() -> bool:
        fail_stale_trials(study)
        return study.get_trials(deepcopy=False)[0].state == TrialState.FAIL

    t0 = time.monotonic()
    wait_for(stale_failed, "the killed worker's trial to be failed as stale", 20.0)
    assert time.monotonic() - t0 < 10
    trials = study.get_trials()
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.WAITING]
    assert trials[1].params == trials[0].params  # queued again with the same params
    assert RetryHeartbeatStaleTrialCallback.retried_trial_number(trials[1]) == 0

    # The next worker picks up the queued retry and finishes it.
    out = subprocess.run(
        [sys.executable, "-c", WORKER, pg_url, str(started), "finish"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    trials = study.get_trials()
    assert trials[1].state == TrialState.COMPLETE
    assert trials[1].value == trials[0].params["x"]
    storage.engine.dispose()
