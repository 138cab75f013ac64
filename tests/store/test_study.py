"""The study on real SQLite: settings, resume refusal, stale-trial recovery, budget accounting."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from optuna.trial import TrialState

from autotune.errors import StorageError, StudyMismatchError, UsageError
from autotune.execution.proctree import MARK_VAR
from autotune.store import sqlite as sqlite_store
from autotune.store import study as st
from autotune.store import urls
from autotune.store.identity import ProcessIdentity, process_runs
from autotune.store.settings import settings_diff
from autotune.store.sqlite import optuna_schema_versions
from autotune.store.storage import open_storage

SETTINGS: dict[str, Any] = {
    "trainer": "reference",
    "config_path": "/x/low_vram.yaml",
    "base_config_hash": "abc",
    "knobs": [{"name": "batch_size", "type": "int"}],
    "steps": 30,
    "headroom": 0.1,
    "max_batch_size": 16,
    "keep_effective_batch": False,
    "allow_extra_savers": False,
    "card": {"name": "emulated", "vram_gb": 2.0, "count": 1, "tier": None},
}
KNOBS = st.knob_defs(
    {
        "knobs": [
            {"name": "quantization", "values": ["int8-quanto", None], "extra_savers": ["int4-quanto"]},
            {"name": "batch_size", "type": "int"},
            {"name": "gradient_checkpointing", "values": [True, False]},
        ]
    }
)
DISTS = st.distributions(KNOBS, 16)


def _open(
    tmp_path: Path, settings: dict[str, Any] | None = None, name: str = "s"
) -> tuple[st.SweepStudy, bool]:
    storage = open_storage(urls.default_storage_url(tmp_path))
    return st.SweepStudy.open_or_create(storage, name, settings or SETTINGS, workdir=tmp_path)


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("sqlite:////tmp/a/studies.db", Path("/tmp/a/studies.db")),
        ("sqlite:///rel.db", Path("rel.db")),
        ("sqlite:///:memory:", None),
        ("sqlite://", None),
        ("postgresql://u@h/db", None),
    ],
)
def test_sqlite_path(url: str, path: Path | None) -> None:
    assert urls.sqlite_path(url) == path


def test_default_storage_is_absolute_sqlite_in_workdir(tmp_path: Path) -> None:
    os.chdir(tmp_path)
    assert urls.default_storage_url(Path("autotune-runs")) == f"sqlite:///{tmp_path}/autotune-runs/studies.db"


@pytest.mark.parametrize("name", ["demo", "ltx2-h100", "a.b_c-1"])
def test_good_study_names(name: str) -> None:
    assert st.validate_study_name(name) == name


@pytest.mark.parametrize("name", ["", "../x", "a/b", "a\\b", "..", ".hidden", "a b", "x" * 101, "a..b"])
def test_bad_study_names_are_usage_errors(name: str) -> None:
    with pytest.raises(UsageError, match="not a valid study name"):
        st.validate_study_name(name)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({}, []),
        ({"config_path": "/elsewhere.yaml"}, []),  # where the file is does not matter; its hash does
        ({"steps": 50}, ["steps: the study has 30, this run 50"]),
        ({"headroom": 0.1}, []),
        ({"max_batch_size": 16.0}, []),
        ({"base_config_hash": "def"}, ["base_config_hash: the study has 'abc', this run 'def'"]),
        (
            {"card": {"name": "emulated", "vram_gb": 3.0, "count": 1, "tier": None}},
            ["card.vram_gb: the study has 2.0, this run 3.0"],
        ),
        ({"new_key": True}, ["new_key: the study has (not set), this run True"]),
        (
            {"knobs": [{"name": "batch_size"}]},
            [
                "knobs.batch_size.type: the study has 'int', this run (not set)"  # named entries: the one that changed
            ],
        ),
    ],
)
def test_settings_diff(change: dict[str, Any], expected: list[str]) -> None:
    assert settings_diff(SETTINGS, {**SETTINGS, **change}) == expected


@pytest.mark.parametrize(
    ("now", "expected"),
    [
        (False, []),  # a study stored before the flag was a setting swept without extra savers
        (True, ["allow_extra_savers: the study has False, this run True"]),
    ],
)
def test_a_study_without_allow_extra_savers_reads_as_not_allowed(now: bool, expected: list[str]) -> None:
    old = {k: v for k, v in SETTINGS.items() if k != "allow_extra_savers"}
    assert settings_diff(old, {**SETTINGS, "allow_extra_savers": now}) == expected
    assert settings_diff({**SETTINGS, "allow_extra_savers": True}, SETTINGS) == [
        "allow_extra_savers: the study has True, this run False"
    ]
    assert settings_diff(SETTINGS, {**SETTINGS, "held_back": {"quantization": ["int8-quanto"]}}) == []


def test_distributions_hold_extra_savers_and_none() -> None:
    q = DISTS["quantization"]
    assert q.choices == ("int4-quanto", "int8-quanto", "none")  # type: ignore[attr-defined]
    assert DISTS["batch_size"].high == 16  # type: ignore[attr-defined]


def test_create_then_resume_same_settings(tmp_path: Path) -> None:
    s, resumed = _open(tmp_path)
    assert not resumed
    assert s.user_attrs["settings"] == SETTINGS
    assert s.user_attrs["workdir"] == str(tmp_path.resolve())
    assert (tmp_path / "studies.db").exists()
    s2, resumed = _open(tmp_path)
    assert resumed and s2.name == "s"


def test_resume_with_other_settings_names_every_difference(tmp_path: Path) -> None:
    _open(tmp_path)
    other = {**SETTINGS, "steps": 99, "card": {**SETTINGS["card"], "name": "NVIDIA H100"}}
    with pytest.raises(StudyMismatchError) as err:
        _open(tmp_path, other)
    text = str(err.value)
    assert "steps: the study has 30, this run 99" in text
    assert "card.name: the study has 'emulated', this run 'NVIDIA H100'" in text
    assert "--study" in text
    assert err.value.exit_code == 2


def test_trials_record_params_attrs_and_states(tmp_path: Path) -> None:
    s, _ = _open(tmp_path)
    params = {"quantization": None, "batch_size": 2, "gradient_checkpointing": True}
    t = s.start_trial(params, DISTS, {"pid": 1})
    assert t.state == TrialState.RUNNING and t.params["quantization"] == "none"
    measured = {"outcome": "ok", "samples_per_s": 3.5, "peak_vram_gb": 1.0, "fits": True}
    s.finish_trial(t, measured, 3.5)
    t2 = s.start_trial({**params, "batch_size": 4}, DISTS, {})
    s.finish_trial(t2, {"outcome": "oom", "oom_tried_gb": 2.0}, None)
    t3 = s.start_trial({**params, "batch_size": 8}, DISTS, {})
    s.finish_trial(t3, {"outcome": "nan"}, None)  # the verdict gives a failure no value (verdict.judge)
    done = {t.number: t for t in s.trials()}
    assert done[0].state == TrialState.COMPLETE and done[0].value == 3.5
    assert done[0].user_attrs == {"pid": 1, **measured}
    assert done[1].state == TrialState.FAIL and done[1].user_attrs["oom_tried_gb"] == 2.0
    assert done[2].state == TrialState.FAIL
    assert s.study.best_trial.number == 0
    assert s.counted_trials() == 3


def test_what_is_derived_from_a_trial_is_kept_until_that_trial_changes(tmp_path: Path) -> None:
    """``SweepStudy.memo``: built once per trial as read; our own write, another writer's and a
    caller's older copy each get it built from the trial as it is then."""
    s, _ = _open(tmp_path)
    other, _ = _open(tmp_path)  # a second writer of the same study
    done = s.start_trial({"batch_size": 1}, DISTS, {})
    s.finish_trial(done, {"outcome": "ok", "samples_per_s": 2.0}, 2.0)
    running = s.start_trial({"batch_size": 2}, DISTS, {"pid": 1})
    built: list[tuple[int, Any]] = []

    def outcome(t: Any) -> Any:
        built.append((t.number, t.user_attrs.get("pid")))
        return s.record(t).outcome

    def look() -> list[Any]:
        return [s.memo(t, "outcome", outcome) for t in s.trials()]

    assert look() == ["ok", None] and look() == ["ok", None]
    assert built == [(0, None), (1, 1)]  # each once, however often asked
    stale = s.trials()[1]
    s.set_trial_attrs(running, {"pid": 2})  # our write: that trial's copy is new
    assert look() == ["ok", None] and built[2:] == [(1, 2)]
    other.refresh()
    other.finish_trial(other.trials()[1], {"outcome": "oom"}, None)  # another writer's
    s.refresh()
    assert look() == ["ok", "oom"] and built[3:] == [(1, 2)]
    assert s.memo(stale, "outcome", outcome) is None and built[4:] == [(1, 1)]  # not the trial held
    assert s.memo(stale, "outcome", outcome) is None and len(built) == 6  # so not kept either
    assert s.record(s.trials()[0]) is s.record(s.trials()[0])


def test_budget_and_count_add_up_across_resumes(tmp_path: Path) -> None:
    s, _ = _open(tmp_path)
    for outcome in ("ok", "interrupted"):
        t = s.start_trial({"batch_size": 1}, DISTS, {})
        time.sleep(0.05)
        s.finish_trial(t, {"outcome": outcome}, 1.0)
    s2, _ = _open(tmp_path)
    assert s2.counted_trials() == 1  # the interrupted trial is run again, so it is not counted
    spent = s2.spent_s()
    assert 0.1 <= spent < 5  # but its time was spent
    running = s2.start_trial({"batch_size": 2}, DISTS, {})
    later = dt.datetime.now() + dt.timedelta(seconds=100)
    assert s2.spent_s(later) >= 100
    assert running.number == 2


def _dead_orchestrator() -> ProcessIdentity:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    ps = psutil.Process(proc.pid)
    created = ps.create_time()
    proc.wait()
    return ProcessIdentity(proc.pid, ProcessIdentity.current().host, created)


def _orphan(tag: str) -> subprocess.Popen[bytes]:
    """A 'trial' that outlived its orchestrator: own session, with a child, tagged."""
    code = "import subprocess,sys,time; subprocess.Popen([sys.executable,'-c','import time; time.sleep(60)']); time.sleep(60)"
    env = {**os.environ, MARK_VAR: tag}
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True, env=env)
    deadline = time.monotonic() + 10
    while not psutil.Process(proc.pid).children() and time.monotonic() < deadline:
        time.sleep(0.02)
    return proc


def test_stale_trial_of_dead_orchestrator_is_interrupted_and_its_group_ended(tmp_path: Path) -> None:
    s, _ = _open(tmp_path)
    dead = _dead_orchestrator()
    orphan = _orphan("tag-1")
    grandchild = psutil.Process(orphan.pid).children()[0]
    attrs = {
        **dead.as_attrs(),
        "pid": orphan.pid,
        "pgid": orphan.pid,
        "pid_start": psutil.Process(orphan.pid).create_time(),
    }
    t = s.start_trial({"batch_size": 4}, DISTS, attrs)
    finished = s.start_trial({"batch_size": 1}, DISTS, dead.as_attrs())
    s.finish_trial(finished, {"outcome": "ok"}, 2.0)

    recovered = s.recover_stale(ProcessIdentity.current())

    assert [r.number for r in recovered] == [t.number]
    assert recovered[0].params == {"batch_size": 4}
    assert set(recovered[0].killed_pids) == {orphan.pid, grandchild.pid}
    assert orphan.wait(timeout=10) is not None
    assert not process_runs(grandchild.pid)
    again = s.trial(t.number)
    assert again.state == TrialState.FAIL and again.user_attrs["outcome"] == "interrupted"
    assert s.trial(finished.number).state == TrialState.COMPLETE  # finished trials are never touched
    assert s.recover_stale(ProcessIdentity.current()) == []


def test_orphan_found_by_its_tag_when_no_pid_was_recorded(tmp_path: Path) -> None:
    s, _ = _open(tmp_path)
    dead = _dead_orchestrator()
    orphan = _orphan("db:s:7")
    s.start_trial({"batch_size": 4}, DISTS, {**dead.as_attrs(), "trial_tag": "db:s:7"})
    (r,) = s.recover_stale(ProcessIdentity.current())
    assert orphan.pid in r.killed_pids
    assert orphan.wait(timeout=10) is not None


def test_reused_pid_is_not_killed(tmp_path: Path) -> None:
    """A recorded pid whose start time differs belongs to someone else now."""
    s, _ = _open(tmp_path)
    dead = _dead_orchestrator()
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        attrs = {**dead.as_attrs(), "pid": bystander.pid, "pgid": bystander.pid, "pid_start": 12345.0}
        s.start_trial({"batch_size": 4}, DISTS, attrs)
        (r,) = s.recover_stale(ProcessIdentity.current())
        assert r.killed_pids == []
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


def test_live_orchestrator_keeps_its_trial_and_blocks_a_second_run(tmp_path: Path) -> None:
    s, _ = _open(tmp_path)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live = ProcessIdentity(
            other.pid, ProcessIdentity.current().host, psutil.Process(other.pid).create_time()
        )
        s.claim(live)
        s.start_trial({"batch_size": 4}, DISTS, live.as_attrs())
        assert s.recover_stale(ProcessIdentity.current()) == []
        with pytest.raises(UsageError, match=f"another autotune \\(pid {other.pid}\\)"):
            s.check_not_running_elsewhere(ProcessIdentity.current())
    finally:
        other.kill()
        other.wait()
    s.check_not_running_elsewhere(ProcessIdentity.current())  # dead now: resuming is fine
    assert len(s.recover_stale(ProcessIdentity.current())) == 1


def test_load_picks_the_only_study_or_asks(tmp_path: Path) -> None:
    storage = open_storage(urls.default_storage_url(tmp_path))
    with pytest.raises(StorageError, match="no study yet"):
        st.SweepStudy.load(storage, None)
    _open(tmp_path, name="one")
    assert st.SweepStudy.load(storage, None).name == "one"
    _open(tmp_path, name="two")
    with pytest.raises(UsageError, match="one, two"):
        st.SweepStudy.load(storage, None)
    with pytest.raises(UsageError, match="no study named 'three'"):
        st.SweepStudy.load(storage, "three")


def test_reading_never_creates_a_database(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no study database at"):
        open_storage(urls.default_storage_url(tmp_path / "nowhere"), create=False)
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize("url", ["studies.db", "/tmp/x.db"])
def test_storage_url_without_scheme_is_usage_error(url: str) -> None:
    with pytest.raises(UsageError, match="not a database URL"):
        open_storage(url)


def test_sqlite_is_in_wal_mode(tmp_path: Path) -> None:
    import sqlite3

    _open(tmp_path)
    conn = sqlite3.connect(tmp_path / "studies.db")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


# A new database file appears complete, so no reader or second process ever creates tables in it.
OPENERS = """
import os, sys, time
sys.path.insert(0, sys.argv[3])
from autotune.store.storage import open_storage
url, gate = sys.argv[1], sys.argv[2]
while not os.path.exists(gate):
    time.sleep(0.001)
storage = open_storage(url)
print(len(storage.get_all_studies()))
"""


def test_new_database_file_appears_only_complete(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sqlite3

    db = tmp_path / "runs" / "studies.db"
    seen: list[tuple[str, bool]] = []

    class Spy(sqlite_store.RDBStorage):
        def __init__(self, url: str, **kwargs: Any) -> None:
            seen.append((url, db.exists()))  # could a reader open the final file now?
            super().__init__(url, **kwargs)

    monkeypatch.setattr(sqlite_store, "RDBStorage", Spy)
    open_storage(f"sqlite:///{db}")
    made_at, existed = seen[0]
    assert made_at != f"sqlite:///{db}" and not existed  # the tables were made under another name
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT version_num FROM alembic_version").fetchone()[0] in optuna_schema_versions()
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()
    assert sorted(p.name for p in db.parent.iterdir() if not p.name.startswith("studies.db")) == []


@pytest.mark.process
def test_many_processes_opening_one_new_database_at_once_all_succeed(tmp_path: Path) -> None:
    db, gate = tmp_path / "studies.db", tmp_path / "go"
    root = str(Path(__file__).resolve().parents[2])
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", OPENERS, f"sqlite:///{db}", str(gate), root],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(6)
    ]
    gate.write_text("")  # all start at once
    results = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 6, [err for _, err in results]
    assert [out.strip() for out, _ in results] == ["0"] * 6
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temporary left


def test_an_existing_database_is_opened_as_it_is(tmp_path: Path) -> None:
    _open(tmp_path, name="kept")
    again = open_storage(urls.default_storage_url(tmp_path))
    assert st.study_names(again) == ["kept"]


def test_orphan_found_by_the_runners_mark_in_process_json(tmp_path: Path) -> None:
    """The orchestrator died right after the runner started the trial: only process.json knows it."""
    import json

    from autotune.execution.proctree import MARK_VAR

    s, _ = _open(tmp_path)
    dead = _dead_orchestrator()
    env = {**os.environ, MARK_VAR: "mark-42"}
    orphan = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True, env=env
    )
    trial_dir = tmp_path / "trial-0000"
    trial_dir.mkdir()
    (trial_dir / "process.json").write_text(
        json.dumps({"pid": orphan.pid, "mark": "mark-42", "started_at": time.time()})
    )
    s.start_trial({"batch_size": 4}, DISTS, {**dead.as_attrs(), "trial_dir": str(trial_dir)})
    (r,) = s.recover_stale(ProcessIdentity.current())
    assert orphan.pid in r.killed_pids
    assert orphan.wait(timeout=10) is not None


def test_recovered_trial_counts_only_the_time_it_really_ran(tmp_path: Path) -> None:
    """A sweep killed at night and resumed in the morning has not spent the night on that trial."""
    s, _ = _open(tmp_path)
    trial_dir = tmp_path / "trial-0000"
    trial_dir.mkdir()
    t = s.start_trial(
        {"batch_size": 4}, DISTS, {**_dead_orchestrator().as_attrs(), "trial_dir": str(trial_dir)}
    )
    log = trial_dir / "stdout.log"
    log.write_text("Step 20/50\n")
    started = t.datetime_start.timestamp()  # type: ignore[union-attr]
    os.utime(log, (started + 1.5, started + 1.5))
    s.recover_stale(ProcessIdentity.current(), kill=lambda _t: [])
    later = dt.datetime.now() + dt.timedelta(hours=8)
    assert s.spent_s(later) == pytest.approx(1.5, abs=0.01)
