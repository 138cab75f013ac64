"""Optuna's own tools read our study and never call a config that does not fit "best".

A real sweep runs (``python -m autotune sweep --cmd ...`` over ``tests/fakes/sweep_trainer.py``)
on a landscape where the fastest measured trial is over the headroom line: the fake's card is
large (nothing OOMs) while ``--vram-gb`` judges fit on a 12 GB card. Then the real ``optuna``
CLI, Optuna's ``study.best_trial`` and a real ``optuna-dashboard`` server on localhost read it.
"""

from __future__ import annotations

import json
import shlex
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import FAKES, cli_env

CARD_GB = 12.0  # fit is judged here: the line is 10.8 GB
TEMPLATE = (
    f"{shlex.quote(sys.executable)} {shlex.quote(str(FAKES / 'sweep_trainer.py'))} "
    "{quantization} {optimizer} {batch_size} {gradient_checkpointing} {steps}"
)


def _env(tmp: Path) -> dict[str, str]:
    return cli_env(
        drop=("SWEEP_FAKE_",),
        SWEEP_FAKE_LAUNCHES=str(tmp / "launches.jsonl"),
        SWEEP_FAKE_SLEEP_S="0.05",
        SWEEP_FAKE_CARD_GB="100",  # the trainer's own card: too-big trials complete
    )


def _bin(name: str) -> str:
    return str(Path(sys.executable).with_name(name))


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("optuna-tools")
    argv = [
        sys.executable, "-m", "autotune", "sweep", "--workdir", str(tmp / "runs"), "--cmd", TEMPLATE,
        "--vram-gb", str(CARD_GB), "--steps", "20", "--max-batch-size", "4", "--study", "tools",
    ]  # fmt: skip
    proc = subprocess.run(argv, env=_env(tmp), capture_output=True, text=True, timeout=240, cwd=tmp)
    assert proc.returncode == 0, proc.stderr
    url = f"sqlite:///{tmp / 'runs' / 'studies.db'}"
    report = subprocess.run(
        [sys.executable, "-m", "autotune", "report", "--workdir", str(tmp / "runs"), "--study", "tools",
         "--format", "json"],
        env=_env(tmp), capture_output=True, text=True, timeout=120, cwd=tmp,
    )  # fmt: skip
    assert report.returncode == 0, report.stderr
    md = subprocess.run(
        [sys.executable, "-m", "autotune", "report", "--workdir", str(tmp / "runs"), "--study", "tools"],
        env=_env(tmp), capture_output=True, text=True, timeout=120, cwd=tmp,
    )  # fmt: skip
    assert md.returncode == 0, md.stderr
    return {"tmp": tmp, "url": url, "env": _env(tmp), "report": json.loads(report.stdout), "md": md.stdout}


def _load(url: str) -> Any:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    return optuna.load_study(study_name="tools", storage=url)


@pytest.mark.process
def test_the_landscape_has_a_fastest_trial_that_does_not_fit(swept: dict[str, Any]) -> None:
    """The premise: without constraints, Optuna's best would be a trial over the line."""
    study = _load(swept["url"])
    done = [t for t in study.trials if t.value is not None]
    fastest = max(done, key=lambda t: t.value)
    assert fastest.user_attrs["fits"] is False, [(t.number, t.value, t.user_attrs["fits"]) for t in done]


@pytest.mark.process
def test_every_finished_trial_carries_its_fit_constraint(swept: dict[str, Any]) -> None:
    study = _load(swept["url"])
    line = 0.9 * CARD_GB
    for t in study.trials:
        if t.value is None:
            continue
        (over,) = t.constraints.values()
        assert over == pytest.approx(t.user_attrs["peak_vram_gb"] - line, abs=1e-6)
        assert (over <= 0) == t.user_attrs["fits"]
    assert study.metric_names == ["samples_per_s"]


def _tie_note(md: str) -> str | None:
    return next((line for line in md.splitlines() if "Optuna's best" in line), None)


@pytest.mark.process
def test_optuna_cli_best_trial_is_a_fitting_one_and_agrees_with_autotune(swept: dict[str, Any]) -> None:
    out = subprocess.run(
        [_bin("optuna"), "best-trial", "--study-name", "tools", "--storage", swept["url"], "-f", "json"],
        capture_output=True, text=True, timeout=120, env=swept["env"],
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    best = json.loads(out.stdout)
    assert best["user_attrs"]["fits"] is True
    ours = swept["report"]["best"]["trial"]
    note = _tie_note(swept["md"])
    if best["number"] == ours:
        assert note is None
    else:  # a near-tie decided for fidelity: the report names both trials
        assert note is not None and f"trial {best['number']}" in note and f"trial {ours}" in note
    assert _load(swept["url"]).best_trial.number == best["number"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.process
def test_the_dashboard_lists_too_big_trials_as_infeasible(swept: dict[str, Any]) -> None:
    pytest.importorskip("optuna_dashboard")
    port = _free_port()
    server = subprocess.Popen(
        [_bin("optuna-dashboard"), swept["url"], "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=swept["env"],
    )  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/studies", timeout=5) as r:
                    studies = json.load(r)["study_summaries"]
                break
            except OSError:
                assert server.poll() is None, server.stderr.read() if server.stderr else ""
                assert time.monotonic() < deadline, "optuna-dashboard did not answer in 60 s"
                time.sleep(0.2)
        (study,) = [s for s in studies if s["study_name"] == "tools"]
        with urllib.request.urlopen(f"{base}/api/studies/{study['study_id']}", timeout=30) as r:
            detail = json.load(r)
        too_big = [t for t in detail["trials"] if t["state"] == "Complete" and _fits(t) is False]
        fitting = [t for t in detail["trials"] if t["state"] == "Complete" and _fits(t) is True]
        assert too_big and fitting
        assert all(t["constraints"] and max(t["constraints"]) > 0 for t in too_big)
        assert all(t["constraints"] and max(t["constraints"]) <= 0 for t in fitting)
        assert detail.get("objective_names") == ["samples_per_s"]
    finally:
        server.terminate()
        server.wait(timeout=30)


def _fits(trial: dict[str, Any]) -> Any:
    for attr in trial["user_attrs"]:
        if attr["key"] == "fits":
            return {"True": True, "False": False, "null": None}[
                attr["value"]
            ]  # how the dashboard writes them
    raise AssertionError(f"trial {trial['number']} has no 'fits' attr")


# --- in process: a study stored before constraints, filled in on resume; the report's line ---------


@pytest.fixture
def old_study(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Any]:
    """The report tests' hand-built 48 GB study: stored with no constraints, as before this change.

    Trial 4 is the fastest fitting trial; the winner, trial 3, beat it on fidelity (a near-tie).
    """
    from autotune.trainers import registry
    from tests.report_study import TEST_TRAINER, YamlTestAdapter, build_study

    monkeypatch.setitem(registry.ADAPTERS, TEST_TRAINER, YamlTestAdapter)
    workdir = tmp_path / "runs"
    build_study(workdir)
    return f"sqlite:///{workdir}/studies.db", workdir


def _sweep_study(url: str) -> Any:
    from autotune.store.storage import open_storage
    from autotune.store.study import SweepStudy

    storage = open_storage(url, create=False)
    return SweepStudy.load(storage, None)


def test_a_study_stored_before_constraints_gets_them_on_resume(old_study: tuple[str, Any]) -> None:
    url, _ = old_study
    study = _load_any(url)
    assert not any(t.constraints for t in study.trials)  # as a study made before this change
    too_big_best = study.best_trial  # Optuna's answer then: the fastest, fitting or not
    assert too_big_best.user_attrs["fits"] is False

    handle = _sweep_study(url)
    finished = [t for t in handle.trials() if t.state.is_finished()]
    assert handle.fill_in_constraints() == len(finished)
    assert handle.fill_in_constraints() == 0  # once only

    study = _load_any(url)
    assert study.metric_names is None  # the report never writes; the sweep names it on open
    best = study.best_trial
    assert best.user_attrs["fits"] is True
    for t in study.trials:
        if t.state.is_finished():
            (over,) = t.constraints.values()
            fits = t.user_attrs.get("fits")
            assert (over <= 0) == (fits is True), (t.number, over, fits)


def test_the_report_names_optunas_best_when_a_fidelity_tie_made_another_winner(
    old_study: tuple[str, Any],
) -> None:
    from autotune.report import build as rep

    url, _ = old_study
    before = rep.build_report(rep.open_study(url, None))
    assert before.optuna_best is None  # no constraints stored: Optuna's tools do not judge fit yet
    assert not any("Optuna's own best" in w for w in before.warnings)

    _sweep_study(url).fill_in_constraints()
    report = rep.build_report(rep.open_study(url, None))
    assert report.best is not None
    assert report.optuna_best == _load_any(url).best_trial.number != report.best.number
    (line,) = [w for w in report.warnings if "Optuna's own best" in w]
    assert f"trial {report.optuna_best} " in line and f"trial {report.best.number}:" in line
    assert "near-tie decided for fidelity" in line
    assert json.loads(rep.render_json(report))["optuna_best_trial"] == report.optuna_best


def _load_any(url: str) -> Any:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    return optuna.load_study(study_name=None, storage=url)


def test_the_constraint_uses_the_exact_card_not_the_rounded_setting(tmp_path: Path) -> None:
    """A 28.2 MiB emulated card is 0.03 GB in the settings (two decimals): the line is judged on
    the exact size the sweep records beside them."""
    from autotune.store.storage import open_storage
    from autotune.store.study import CARD_GB_ATTR, SweepStudy

    storage = open_storage(f"sqlite:///{tmp_path / 'studies.db'}")
    settings = {"card": {"vram_gb": 0.03}, "headroom": 0.1}
    study, _ = SweepStudy.open_or_create(storage, "tiny", settings, workdir=tmp_path)
    over = {"outcome": "ok", "peak_vram_gb": 0.026, "fits": False}
    unknown = {"outcome": "ok"}
    assert study.fit_constraint(over) == pytest.approx(0.001)  # rounded card: 0.027 line, clamped
    assert study.fit_constraint(unknown) == pytest.approx(0.003)
    study.set_attr(CARD_GB_ATTR, 0.0275)
    assert study.fit_constraint(over) == pytest.approx(0.026 - 0.9 * 0.0275)
    assert study.fit_constraint(unknown) == pytest.approx(0.1 * 0.0275)
