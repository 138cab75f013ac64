"""Soak: 200 trials of the fastest fake trainer in one sweep, in a real orchestrator process.

Every trial must be recorded, and the orchestrator's memory (RSS) and open file
descriptors must stay flat: they are read from ``/proc`` when trial 20 starts and
after the last one, and their growth is bounded. A leak of one descriptor or a few
hundred kB per trial fails it.

The knob file gives the ``command`` trainer 120 quantization values (the fake's speed
rises with each), so the search has more than 200 candidates worth measuring.
"""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scripts.bench_overhead import write_inputs
from tests.helpers import cli_env

pytestmark = pytest.mark.soak

TRIALS = 200
RSS_GROWTH_LIMIT_MB = 25.0  # 180 trials: ~140 kB each would pass, a real per-trial leak would not
FD_GROWTH_LIMIT = 3

DRIVER = """
import sys
from pathlib import Path
import optuna
from autotune.sweep.api import run_sweep
from autotune.sweep.options import SweepOptions
optuna.logging.set_verbosity(optuna.logging.WARNING)
workdir, knobs, base, template, trials = sys.argv[1:6]
opts = SweepOptions(
    trainer="command", config=Path(base), workdir=Path(workdir), study="soak", cmd=template,
    knob_file=Path(knobs), vram_gb=16, steps=3, max_batch_size=1, max_trials=int(trials),
    trial_timeout_s=60, stall_timeout_s=60,
)
result = run_sweep(opts, claims=False)
print(f"trials_run={result.trials_run} stop={result.stop_reason}")
"""


def _proc_figures(pid: int) -> tuple[float, int]:
    """(RSS in MB, open file descriptors) of a live process."""
    status = Path(f"/proc/{pid}/status").read_text()
    rss_kb = int(re.search(r"^VmRSS:\s+(\d+) kB", status, re.M).group(1))  # type: ignore[union-attr]
    return rss_kb / 1024, len(os.listdir(f"/proc/{pid}/fd"))


@pytest.mark.timeout(600)
def test_200_trials_all_recorded_with_flat_memory_and_descriptors(tmp_path: Path) -> None:
    knobs, base, template = write_inputs(tmp_path, [f"q{i:03d}" for i in range(120)])
    env = cli_env(keep_pythonpath=False, PYTHONUNBUFFERED="1")
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(tmp_path / "runs"), str(knobs), str(base), template, str(TRIALS)],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stderr is not None
    at: dict[int, tuple[float, int, float]] = {}
    tail: list[str] = []
    for line in proc.stderr:  # the progress view: "trial N started: ..." / "trial N ok: ..."
        tail = [*tail[-20:], line]
        m = re.match(r"trial (\d+) (started|ok)", line)
        for mark in (20, 110):
            if m and int(m.group(1)) == mark and m.group(2) == "started" and mark not in at:
                at[mark] = (*_proc_figures(proc.pid), time.monotonic() - t0)
        if m and int(m.group(1)) == TRIALS - 1 and m.group(2) == "ok":
            at[TRIALS] = (*_proc_figures(proc.pid), time.monotonic() - t0)
    out, _ = proc.communicate(timeout=120)
    wall = time.monotonic() - t0
    assert proc.returncode == 0, "".join(tail)
    assert f"trials_run={TRIALS}" in out, out

    conn = sqlite3.connect(f"file:{tmp_path / 'runs' / 'studies.db'}?mode=ro", uri=True)
    states = dict(conn.execute("SELECT state, COUNT(*) FROM trials GROUP BY state").fetchall())
    outcomes = conn.execute(
        "SELECT COUNT(*) FROM trial_user_attributes WHERE key='outcome' AND value_json='\"ok\"'"
    ).fetchone()[0]
    conn.close()
    assert states == {"COMPLETE": TRIALS} and outcomes == TRIALS, states
    folders = sorted(p.name for p in (tmp_path / "runs" / "soak").glob("trial-*"))
    assert len(folders) == TRIALS and all(
        (tmp_path / "runs" / "soak" / f / "stdout.log").exists() for f in folders
    )

    (rss20, fd20, t20), (rss_mid, _, _), (rss_end, fd_end, t_end) = at[20], at[110], at[TRIALS]
    per_trial_early = t20 / 20
    per_trial_late = (t_end - t20) / (TRIALS - 20)
    print(
        f"\nsoak: {TRIALS} trials in {wall:.1f}s (to trial 20: {per_trial_early:.2f}s/trial, "
        f"20-{TRIALS}: {per_trial_late:.2f}s/trial); RSS {rss20:.1f} -> {rss_mid:.1f} (trial 110) -> {rss_end:.1f} MB "
        f"(+{rss_end - rss20:.1f}); open fds {fd20} -> {fd_end}"
    )
    assert rss_end - rss20 < RSS_GROWTH_LIMIT_MB
    assert per_trial_late < 2 * per_trial_early + 0.2  # bookkeeping does not grow with the study
    assert fd_end - fd20 <= FD_GROWTH_LIMIT
