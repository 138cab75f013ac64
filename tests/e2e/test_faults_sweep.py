"""Faults that meet a whole sweep, with real processes and real SQLite.

- SIGTERM / SIGINT: the running trial is recorded ``interrupted`` and its whole family
  (a child, and a grandchild in its own session) is gone; exit 130.
- SIGKILL of the orchestrator mid-trial: the orphaned family is ended on resume, the trial
  run again. (Random SIGKILLs and "nothing run twice": ``tests/e2e/test_sweep_e2e.py``.)
- SIGKILL during database writes, many times: the database passes SQLite's integrity check
  after every kill, every finished trial is whole, and a resume completes.
- Readers on the live study (the ``optuna`` CLI, a plain Optuna reading loop, and
  optuna-dashboard's loader where installed): no "database is locked" on either side.
- A corrupted database, another program's, or one of a newer Optuna: a clear error from
  sweep, status and report, and the file's bytes never change.
- A full or read-only study folder: a clear error, the study intact, and a resume with
  room runs the unfinished trial again.
"""

from __future__ import annotations

import hashlib
import json
import random
import shlex
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from autotune.cli import main
from tests.faultfs import grow_tmpfs, read_only, small_tmpfs
from tests.helpers import FAKES, autotune_argv, cli_env, wait_for

PY = shlex.quote(sys.executable)
SOAK = f"{PY} {shlex.quote(str(FAKES / 'soak_trainer.py'))} {{quantization}} {{optimizer}} {{batch_size}} {{gradient_checkpointing}}"
FAMILY = f"{PY} {shlex.quote(str(FAKES / 'family_trainer.py'))} {{trial_dir}}"
STUDY = "faults"


def _env(**extra: str) -> dict[str, str]:
    return cli_env(drop=("SOAK_", "SWEEP_FAKE_"), **extra)


def _argv(workdir: Path, cmd: str, *extra: str) -> list[str]:
    return [
        *autotune_argv("sweep"), "--workdir", str(workdir), "--study", STUDY,
        "--cmd", cmd, "--vram-gb", "16", "--steps", "3", "--max-batch-size", "1048576",
        "--allow-extra-savers", "--trial-timeout", "60s", *extra,
    ]  # fmt: skip


def _run(argv: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 180) -> Any:
    return subprocess.run(argv, cwd=cwd, env=env or _env(), capture_output=True, text=True, timeout=timeout)


def _trials(db: Path) -> list[dict[str, Any]]:
    """Trials straight from SQLite, read-only: number, state, value and user attrs."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        out: list[dict[str, Any]] = []
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE name='trials'").fetchone():
            return out  # killed before Optuna made its tables: an empty database, still fine
        rows = conn.execute("SELECT trial_id, number, state FROM trials ORDER BY number").fetchall()
        for trial_id, number, state in rows:
            attrs = {
                k: json.loads(v)
                for k, v in conn.execute(
                    "SELECT key, value_json FROM trial_user_attributes WHERE trial_id=?", (trial_id,)
                )
            }
            values = conn.execute("SELECT value FROM trial_values WHERE trial_id=?", (trial_id,)).fetchall()
            params = sorted(
                conn.execute("SELECT param_name, param_value FROM trial_params WHERE trial_id=?", (trial_id,))
            )
            out.append(
                {
                    "number": number,
                    "state": state,
                    "attrs": attrs,
                    "values": values,
                    "params": len(params),
                    "candidate": tuple(params),  # raw values: comparable within one study
                }
            )
        return out
    finally:
        conn.close()


def _integrity(db: Path) -> str:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _wait_for(path: Path, proc: subprocess.Popen[str], timeout: float = 60) -> None:
    wait_for(
        path.exists, f"{path} to appear", timeout, processes={"the sweep": proc},
        explain=lambda: f": {proc.communicate()}" if proc.poll() is not None else "", interval_s=0.02,
    )  # fmt: skip


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- signals ---------------------------------------------------------------------------------------


@pytest.mark.process
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_ends_the_trials_whole_family_and_records_it_interrupted(
    sig: signal.Signals, tmp_path: Path
) -> None:
    workdir = tmp_path / "runs"
    proc = subprocess.Popen(
        _argv(workdir, FAMILY),
        cwd=tmp_path,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    family_file = workdir / STUDY / "trial-0000" / "family.json"
    _wait_for(family_file, proc)
    family = json.loads(family_file.read_text())
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "resume" in err
    assert all(_gone(pid) for pid in family.values()), family
    (trial,) = _trials(workdir / "studies.db")
    assert trial["state"] == "FAIL" and trial["attrs"]["outcome"] == "interrupted"
    # status says this run was interrupted (not an earlier run's "budget spent"), and counts nothing
    status = _run([sys.executable, "-m", "autotune", "status", "--workdir", str(workdir)], tmp_path)
    assert status.returncode == 0, status.stderr
    assert f"last run stopped: interrupted by {sig.name}" in status.stdout
    assert "trials: 0 finished, +1 interrupted (run again, not counted)" in status.stdout


@pytest.mark.process
def test_sigkill_mid_trial_then_resume_ends_the_orphans_and_runs_the_trial_again(tmp_path: Path) -> None:
    workdir = tmp_path / "runs"
    marker = tmp_path / "hung-once"
    cmd = f"{FAMILY} {shlex.quote(str(marker))}"
    proc = subprocess.Popen(_argv(workdir, cmd, "--max-trials", "1"), cwd=tmp_path, env=_env(), text=True)
    family_file = workdir / STUDY / "trial-0000" / "family.json"
    _wait_for(family_file, proc)
    family = json.loads(family_file.read_text())
    proc.kill()
    proc.wait()
    assert not any(_gone(pid) for pid in family.values()), "the trial should outlive a SIGKILLed sweep"

    again = _run(_argv(workdir, cmd, "--max-trials", "1"), tmp_path)
    assert again.returncode == 0, again.stderr
    assert all(_gone(pid) for pid in family.values()), family
    first, second = _trials(workdir / "studies.db")
    assert first["attrs"]["outcome"] == "interrupted" and first["state"] == "FAIL"
    assert second["attrs"]["outcome"] == "ok" and second["state"] == "COMPLETE"


# --- kills during database writes --------------------------------------------------------------------


@pytest.mark.process
def test_sigkill_during_database_writes_leaves_a_whole_study(tmp_path: Path) -> None:
    """The fastest trainer makes database writes most of the sweep's time; kill it again and again."""
    workdir = tmp_path / "runs"
    db = workdir / "studies.db"
    rng = random.Random(7)
    kills = 0
    for _ in range(6):
        proc = subprocess.Popen(
            _argv(workdir, SOAK),
            cwd=tmp_path,
            env=_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(rng.uniform(0.8, 3.0))  # start-up takes ~0.7 s; then a trial every ~0.4 s
        if proc.poll() is None:
            proc.kill()
            kills += 1
        proc.wait()
        if not db.exists():
            continue
        assert _integrity(db) == "ok"
        for t in _trials(db):
            assert t["params"] == 4, t  # params are written with the trial, in one transaction
            if t["state"] in ("COMPLETE", "FAIL"):
                assert "outcome" in t["attrs"], t  # a finished trial always says why
            if t["state"] == "COMPLETE":
                assert len(t["values"]) == 1 and t["attrs"]["outcome"] == "ok", t
    assert kills >= 4
    final = _run(_argv(workdir, SOAK, "--max-trials", "10"), tmp_path)
    assert final.returncode == 0, final.stderr
    trials = _trials(db)
    assert all(t["state"] != "RUNNING" for t in trials)
    print(f"{kills} kills; {len(trials)} trials, {sum(t['state'] == 'COMPLETE' for t in trials)} complete")


# --- readers on the live study -------------------------------------------------------------------------

READER = """
import os, sys, time, optuna
optuna.logging.set_verbosity(optuna.logging.WARNING)
url, stop = sys.argv[1], sys.argv[2]
reads = n = 0
while not os.path.exists(stop):
    if not os.path.exists(url[len("sqlite:///"):]):  # the sweep has not made it yet
        time.sleep(0.05)
        continue
    try:  # as the optuna API reads it (default settings: no timeout of ours)
        study = optuna.load_study(study_name="faults", storage=url)
    except KeyError:  # the study is not created yet
        time.sleep(0.05)
        continue
    n = len(study.get_trials(deepcopy=False))
    # as optuna-dashboard reads it: its own storage, every study, every trial
    dash = optuna.storages.RDBStorage(url, skip_compatibility_check=True, skip_table_creation=True)
    for s in dash.get_all_studies():
        dash.get_all_trials(s._study_id, deepcopy=False)
    dash.engine.dispose()
    reads += 1
print(f"reads={reads} trials={n}")
"""


@pytest.mark.process
def test_readers_on_the_live_study_never_meet_a_locked_database(tmp_path: Path) -> None:
    workdir = tmp_path / "runs"
    db = workdir / "studies.db"
    url = f"sqlite:///{db}"
    stop = tmp_path / "stop"
    sweep = subprocess.Popen(
        _argv(workdir, SOAK, "--max-trials", "8"),
        cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, url, str(stop)],
        cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    cli_runs: list[subprocess.CompletedProcess[str]] = []
    try:
        while sweep.poll() is None:
            if db.exists():
                cli_runs.append(
                    _run(
                        ["optuna", "trials", "--study-name", STUDY, "--storage", url, "-f", "json"], tmp_path
                    )
                )
            else:
                time.sleep(0.05)
    finally:
        stop.write_text("")
        _, err = sweep.communicate(timeout=120)
        r_out, r_err = reader.communicate(timeout=120)
    assert sweep.returncode == 0, err
    assert "locked" not in err.lower()
    assert reader.returncode == 0 and "locked" not in r_err.lower(), r_err
    assert "reads=" in r_out and int(r_out.split("reads=")[1].split()[0]) >= 5, r_out
    answered = [r for r in cli_runs if r.returncode == 0]
    for r in cli_runs:
        assert "locked" not in r.stderr.lower(), r.stderr
    # Until the sweep has created the study, "not found" is fine; every later read answers.
    assert all(r.returncode == 0 for r in cli_runs[-len(answered) :]) and len(answered) >= 1
    assert _integrity(db) == "ok"


# --- database files that are not ours -------------------------------------------------------------------


def _garbage(db: Path) -> None:
    db.write_bytes(random.Random(1).randbytes(8192))


def _foreign(db: Path) -> None:
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
    conn.execute("INSERT INTO invoices (total) VALUES (12.5)")
    conn.commit()
    conn.close()


@pytest.fixture(scope="module")
def real_study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real study database from a 2-trial sweep, to damage in copies."""
    tmp = tmp_path_factory.mktemp("real")
    run = _run(_argv(tmp / "runs", SOAK, "--max-trials", "2"), tmp)
    assert run.returncode == 0, run.stderr
    return tmp / "runs" / "studies.db"


def _newer(db: Path, real: Path) -> None:
    db.write_bytes(real.read_bytes())
    conn = sqlite3.connect(db)
    conn.execute("UPDATE alembic_version SET version_num = 'v9.0.0.a'")
    conn.commit()
    conn.close()


def _truncated(db: Path, real: Path) -> None:
    data = real.read_bytes()
    db.write_bytes(data[: len(data) // 3])


@pytest.mark.parametrize(
    ("kind", "expect"),
    [
        ("garbage", "is not an SQLite database"),
        ("foreign", "of another program (its tables: invoices)"),
        ("newer", "newer Optuna (schema v9.0.0.a"),
        ("truncated", "is damaged"),
    ],
)
def test_a_database_that_is_not_ours_is_refused_and_never_written(
    kind: str, expect: str, tmp_path: Path, real_study: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workdir = tmp_path / "runs"
    workdir.mkdir()
    db = workdir / "studies.db"
    {"garbage": _garbage, "foreign": _foreign}.get(kind, lambda p: None)(db)
    if kind == "newer":
        _newer(db, real_study)
    if kind == "truncated":
        _truncated(db, real_study)
    before = _sha(db)
    commands = [  # in-process (the same code as `python -m autotune ...`, minus 3 s of start-ups)
        _argv(workdir, SOAK, "--max-trials", "1")[3:],
        ["status", "--workdir", str(workdir)],
        ["report", "--workdir", str(workdir)],
    ]
    for argv in commands:
        rc = main(argv)
        out, err = capsys.readouterr()
        assert rc == 1, (argv[0], out, err)
        assert err.startswith("error: ") and "Traceback" not in err, err
        assert expect in err and str(db) in err and "--workdir" in err, err
        assert _sha(db) == before, f"'{argv[0]}' changed the file"
    assert sorted(p.name for p in workdir.iterdir()) == ["studies.db"]  # no journal, no trial folder


# --- a full or read-only study folder ------------------------------------------------------------------


@pytest.mark.process
def test_a_full_study_folder_stops_the_sweep_cleanly_and_a_resume_finishes(tmp_path: Path) -> None:
    workdir = tmp_path / "runs"
    folder = workdir / STUDY
    env = _env(SOAK_PRINT_KB="96")  # each trial logs ~100 kB: a 600 kB folder fills in a few trials
    with small_tmpfs(folder, 600) as mounted:
        if not mounted:
            pytest.skip("no tmpfs here (needs root with mount rights); the runner test covers /dev/full")
        run = _run(_argv(workdir, SOAK, "--max-trials", "8"), tmp_path, env=env)
        assert run.returncode == 1, run.stderr
        err = run.stderr
        assert "Traceback" not in err and "internal error" not in err, err
        assert "No space left on device" in err and str(folder) in err, err
        assert "run the same command again" in err, err
        db = workdir / "studies.db"
        assert _integrity(db) == "ok"
        trials = _trials(db)
        assert trials[-1]["attrs"]["outcome"] == "interrupted" and trials[-1]["state"] == "FAIL"
        assert all(t["state"] == "COMPLETE" for t in trials[:-1]) and len(trials) >= 2
        done_before = len(trials) - 1

        assert grow_tmpfs(folder, 64 * 1024)
        again = _run(_argv(workdir, SOAK, "--max-trials", "8"), tmp_path, env=env)
        assert again.returncode == 0, again.stderr
        trials = _trials(db)
        assert all(t["state"] in ("COMPLETE", "FAIL") for t in trials)
        interrupted = [t for t in trials if t["attrs"]["outcome"] == "interrupted"]
        assert len(interrupted) == 1 and interrupted[0]["number"] == done_before
        run_again = [t for t in trials[done_before + 1 :] if t["candidate"] == interrupted[0]["candidate"]]
        assert run_again and run_again[0]["state"] == "COMPLETE"  # the interrupted candidate ran again
        assert sum(t["state"] == "COMPLETE" for t in trials) > done_before + 1


@pytest.mark.process
def test_a_read_only_study_folder_is_a_clear_error_and_the_study_intact(tmp_path: Path) -> None:
    workdir = tmp_path / "runs"
    first = _run(_argv(workdir, SOAK, "--max-trials", "2"), tmp_path)
    assert first.returncode == 0, first.stderr
    folder = workdir / STUDY
    with read_only(folder) as how:
        if how == "none":
            pytest.skip("cannot make a folder read-only here: root without mount rights")
        run = _run(_argv(workdir, SOAK, "--max-trials", "4"), tmp_path)
    assert run.returncode == 1, run.stderr
    assert "Traceback" not in run.stderr and "internal error" not in run.stderr, run.stderr
    assert str(folder) in run.stderr and "writable" in run.stderr, run.stderr
    db = workdir / "studies.db"
    assert _integrity(db) == "ok"
    trials = _trials(db)
    assert [t["state"] for t in trials[:2]] == ["COMPLETE", "COMPLETE"]
    assert trials[2]["attrs"]["outcome"] == "interrupted"
    again = _run(_argv(workdir, SOAK, "--max-trials", "4"), tmp_path)
    assert again.returncode == 0, again.stderr
    assert sum(t["state"] == "COMPLETE" for t in _trials(db)) == 4


@pytest.mark.process
def test_a_full_disk_under_the_database_is_a_clear_error_the_study_intact_and_resumable(
    tmp_path: Path,
) -> None:
    """The whole workdir on a tiny disk: the trial's log fills it, and then the database cannot
    record the trial either. Exit 1 naming the disk and that the study is intact (not "internal
    error: OperationalError ... disk is full"); ``status`` says the run stopped on a full disk
    (or, when not even that reason fit, that it stopped unrecorded); once
    there is room the same command resumes and runs that trial again."""
    workdir = tmp_path / "runs"
    env = _env(SOAK_PRINT_KB="150")
    with small_tmpfs(workdir, 900) as mounted:
        if not mounted:
            pytest.skip("no tmpfs here (needs root with mount rights)")
        argv = _argv(workdir, SOAK, "--max-trials", "6")
        run = _run(argv, tmp_path, env=env)
        assert run.returncode == 1, run.stderr
        err = run.stderr
        assert "Traceback" not in err and "internal error" not in err, err
        last = err.strip().splitlines()[-1]
        assert last.startswith("error: ") and "full" in last and "intact" in last, err
        assert str(workdir / "studies.db") in last and "run the same command again" in last, err
        db = workdir / "studies.db"
        assert _integrity(db) == "ok"
        status = _run([sys.executable, "-m", "autotune", "status", "--workdir", str(workdir)], tmp_path)
        assert status.returncode == 0, status.stderr
        # Whether the stop reason itself still fits depends on the bytes the trial's log left:
        # either the reason names the full disk, or status says the run stopped unrecorded.
        stopped = [line for line in status.stdout.splitlines() if "last run stopped: " in line]
        assert len(stopped) == 1, status.stdout
        assert "before it finished" in stopped[0] or (
            "is full" in stopped[0] and "run the same command again" in stopped[0]
        ), status.stdout
        done_before = sum(t["state"] == "COMPLETE" for t in _trials(db))
        assert done_before >= 1

        assert grow_tmpfs(workdir, 64 * 1024)
        again = _run(argv, tmp_path, env=env)
        assert again.returncode == 0, again.stderr
        trials = _trials(db)
        assert all(t["state"] in ("COMPLETE", "FAIL") for t in trials)
        assert sum(t["state"] == "COMPLETE" for t in trials) > done_before
        status = _run([sys.executable, "-m", "autotune", "status", "--workdir", str(workdir)], tmp_path)
        assert "last run stopped: max-trials (6) reached" in status.stdout, status.stdout
        assert "\n  search: " in status.stdout, status.stdout  # what a longer run could still find


@pytest.mark.process
def test_a_workdir_that_is_a_file_is_a_usage_error_with_the_fix(tmp_path: Path) -> None:
    workdir = tmp_path / "runs"
    workdir.write_text("not a folder\n")
    run = _run(_argv(workdir, SOAK, "--max-trials", "1"), tmp_path)
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr and "internal error" not in run.stderr, run.stderr
    line = run.stderr.strip().splitlines()[-1]
    assert line.startswith("error: --workdir") and str(workdir) in line and "not a folder" in line, line
    assert workdir.read_text() == "not a folder\n"


@pytest.mark.process
def test_a_study_database_put_back_from_before_is_refused_not_silently_resumed(tmp_path: Path) -> None:
    """Old database files put back by hand (a stale journal or backup): the study holds fewer
    trials than the sweep recorded, so the resume refuses, names the mark file and the way on."""
    workdir = tmp_path / "runs"
    db = workdir / "studies.db"
    assert _run(_argv(workdir, SOAK, "--max-trials", "2"), tmp_path).returncode == 0
    old = {p.name: p.read_bytes() for p in workdir.iterdir() if p.name.startswith("studies.db")}
    assert _run(_argv(workdir, SOAK, "--max-trials", "4"), tmp_path).returncode == 0
    assert len(_trials(db)) == 4
    for p in workdir.iterdir():
        if p.name.startswith("studies.db"):
            p.unlink()
    for name, data in old.items():
        (workdir / name).write_bytes(data)
    restored = _sha(db)
    run = _run(_argv(workdir, SOAK, "--max-trials", "4"), tmp_path)
    assert run.returncode == 1, run.stderr
    line = run.stderr.strip().splitlines()[-1]
    assert "rolled back" in line and "holds 2 trials" in line and ".study-generation.json" in line, run.stderr
    assert _sha(db) == restored and len(_trials(db)) == 2  # refused before writing anything
    (workdir / STUDY / ".study-generation.json").unlink()  # accept the database as it is
    again = _run(_argv(workdir, SOAK, "--max-trials", "4"), tmp_path)
    assert again.returncode == 0, again.stderr
    assert len(_trials(db)) == 4
