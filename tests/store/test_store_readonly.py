"""A study database on a read-only file or mount: ``status`` and ``report`` read it, the sweep says so.

SQLite opens a WAL database read-only (``mode=ro``) only where it can keep its shared-memory
file beside it; on a read-only mount that fails ("unable to open database file"), and Optuna's
start-up then said "exceeding max length". Readers open such a file ``immutable=1``; the sweep
refuses it with "read-only" and the fix (exit 2), before writing anything.
"""

from __future__ import annotations

import hashlib
import io
import shutil
import sqlite3
from pathlib import Path

import pytest

from autotune.errors import UsageError
from scripts import bench_overhead as bench
from tests.faultfs import read_only


def _opts(folder: Path, trials: int):  # type: ignore[no-untyped-def]
    from autotune.sweep.options import SweepOptions

    knobs, base, template = bench.write_inputs(folder)
    return SweepOptions(
        trainer="command", config=base, workdir=folder / "runs", study="ro", cmd=template,
        knob_file=knobs, vram_gb=16, steps=3, max_batch_size=1, max_trials=trials,
        trial_timeout_s=60, stall_timeout_s=60, hook=False,
    )  # fmt: skip


def test_status_and_report_read_a_read_only_study_and_the_sweep_says_read_only(tmp_path: Path) -> None:
    import optuna

    from autotune.report import build, status
    from autotune.sweep.api import run_sweep

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    run_sweep(_opts(tmp_path, 2), stream=io.StringIO(), tty=False, nvml=False)
    # As a finished sweep leaves it: everything in the file, no -wal beside it (this process
    # still holds the sweep's connections, so the study is copied to a folder of its own).
    conn = sqlite3.connect(tmp_path / "runs" / "studies.db")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    runs = tmp_path / "copy" / "runs"
    shutil.copytree(tmp_path / "runs", runs, ignore=shutil.ignore_patterns("*-wal", "*-shm"))
    db = runs / "studies.db"
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    with read_only(runs) as how:
        if how == "none":
            pytest.skip("cannot make a folder read-only here: root without mount rights")
        info = status.collect(storage=None, workdir=runs, study=None)
        assert info["counted_trials"] == 2 and info["study"] == "ro"
        report = build.build_report(build.open_study(build.default_storage(runs), None), workdir=runs)
        assert len(report.trials) == 2
        assert "2" in build.RENDERERS["md"](report)
        with pytest.raises(UsageError) as err:
            run_sweep(_opts(tmp_path / "copy", 4), stream=io.StringIO(), tty=False, nvml=False)
        msg = str(err.value)
        assert "read-only" in msg and str(db) in msg and "--workdir" in msg, msg
        assert err.value.exit_code == 2
        assert sorted(p.name for p in runs.iterdir()) == ["ro", "studies.db"]  # no journal left
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before  # nothing written
