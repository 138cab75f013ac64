"""A real PostgreSQL server through the URLs users write: plain ``postgresql://`` (psycopg 3, the
``postgres`` extra), ``postgresql+psycopg2://`` where psycopg2 is installed; a password in the
URL is never printed by the sweep or ``autotune status``."""

from __future__ import annotations

import importlib.util
import io
import json
from pathlib import Path

import pytest

from scripts import bench_overhead as bench
from tests.pg import SUPERUSER, PostgresServer

pytestmark = pytest.mark.postgres


def _sweep(folder: Path, url: str, trials: int) -> tuple[str, object]:
    import optuna

    from autotune.sweep.api import run_sweep
    from autotune.sweep.options import SweepOptions

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    knobs, base, template = bench.write_inputs(folder)
    opts = SweepOptions(
        trainer="command", config=base, workdir=folder / "runs", study="pg", cmd=template, storage=url,
        knob_file=knobs, vram_gb=16, steps=3, max_batch_size=1, max_trials=trials,
        trial_timeout_s=60, stall_timeout_s=60, hook=False,
    )  # fmt: skip
    out = io.StringIO()
    result = run_sweep(opts, stream=out, tty=False, nvml=False)
    return out.getvalue(), result


@pytest.mark.parametrize("driver", ["", "psycopg2"])
def test_a_sweep_runs_on_a_real_server_and_never_shows_the_password(
    pg_server: PostgresServer, pg_url: str, tmp_path: Path, driver: str
) -> None:
    if driver == "psycopg2" and importlib.util.find_spec("psycopg2") is None:
        pytest.skip("psycopg2 is not installed")
    from autotune.report import status

    db = pg_url.rsplit("/", 1)[1]
    plain = pg_server.url(db, driver=driver)
    assert plain.startswith("postgresql://" if not driver else "postgresql+psycopg2://")
    # The test server trusts loopback, so any password is accepted: this one must never show.
    url = plain.replace(f"//{SUPERUSER}@", f"//{SUPERUSER}:s3cr3t-pw@")
    log, result = _sweep(tmp_path, url, 2)
    assert "s3cr3t-pw" not in log, log
    assert f"{SUPERUSER}:***@" in log.splitlines()[0], log
    assert "s3cr3t-pw" not in result.storage  # type: ignore[attr-defined]
    assert result.trials_run == 2  # type: ignore[attr-defined]
    info = status.collect(storage=url, workdir=None, study="pg")
    assert info["counted_trials"] == 2
    shown = status.render(info) + json.dumps(info, default=str)
    assert "s3cr3t-pw" not in shown and f"{SUPERUSER}:***@" in shown
