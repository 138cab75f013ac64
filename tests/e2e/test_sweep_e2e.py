"""The sweep end to end, in real processes on real SQLite, over a fake trainer with a known landscape.

The orchestrator runs as ``python -m autotune sweep --cmd ...`` (the ``command``
adapter) and the trainer is ``tests/fakes/sweep_trainer.py``, which appends one
line per launch to a file: that is how "never re-runs a finished trial" is counted.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import shlex
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from autotune.core.strategy import REMEASURE_CONTENDERS, REMEASURE_RUNS
from autotune.store import optuna_private as op
from autotune.store.claims import ClaimBook
from autotune.store.storage import open_storage
from tests.fakes import sweep_trainer
from tests.helpers import FAKES, cli_env

CARD_GB = 16.0
HEADROOM = 0.1
MAX_BS = 4
TEMPLATE = (
    f"{shlex.quote(sys.executable)} {shlex.quote(str(FAKES / 'sweep_trainer.py'))} "
    "{quantization} {optimizer} {batch_size} {gradient_checkpointing} {steps}"
)


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    fake = {
        "SWEEP_FAKE_LAUNCHES": str(tmp / "launches.jsonl"),
        "SWEEP_FAKE_SLEEP_S": "0.05",
        "SWEEP_FAKE_CARD_GB": str(CARD_GB),
    }
    return cli_env(drop=("SWEEP_FAKE_",), **{**fake, **extra})


def _argv(tmp: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "autotune", "sweep", "--workdir", str(tmp / "runs"), "--cmd", TEMPLATE,
        "--vram-gb", str(CARD_GB), "--steps", "20", "--max-batch-size", str(MAX_BS), *extra,
    ]  # fmt: skip


def _sweep(
    tmp: Path, *extra: str, env: dict[str, str] | None = None, timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        _argv(tmp, *extra), env=env or _env(tmp), capture_output=True, text=True, timeout=timeout, cwd=tmp
    )


def _launches(tmp: Path) -> list[list[Any]]:
    path = tmp / "launches.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _cand(q: str, o: str, b: int, c: bool) -> tuple[str, str, int, bool]:
    return (q, o, int(b), bool(c))


def _trials(tmp: Path) -> list[dict[str, Any]]:
    """Every trial of the only study, read straight from SQLite (no Optuna in between)."""
    conn = sqlite3.connect(tmp / "runs" / "studies.db")
    try:
        rows = conn.execute("SELECT trial_id, number, state FROM trials ORDER BY number").fetchall()
        out = []
        for trial_id, number, state in rows:
            params = {
                name: (value, dist)
                for name, value, dist in conn.execute(
                    "SELECT param_name, param_value, distribution_json FROM trial_params WHERE trial_id=?",
                    (trial_id,),
                )
            }
            decoded = {}
            for name, (value, dist) in params.items():
                d = json.loads(dist)
                if d["name"] == "CategoricalDistribution":
                    decoded[name] = d["attributes"]["choices"][int(value)]
                else:
                    decoded[name] = int(value)
            attrs = {
                k: json.loads(v)
                for k, v in conn.execute(
                    "SELECT key, value_json FROM trial_user_attributes WHERE trial_id=?", (trial_id,)
                )
            }
            out.append({"number": number, "state": state, "params": decoded, "attrs": attrs})
        return out
    finally:
        conn.close()


def _key(params: dict[str, Any]) -> tuple[str, str, int, bool]:
    return _cand(
        params["quantization"], params["optimizer"], params["batch_size"], params["gradient_checkpointing"]
    )


def _best_line(stdout: str) -> str:
    return next(line for line in stdout.splitlines() if line.startswith("best: "))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone for our purposes
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def true_best(card_gb: float = CARD_GB) -> tuple[tuple[str, str, int, bool], float]:
    """Brute force over the integer grid the sweep replaces."""
    limit = (1 - HEADROOM) * card_gb
    grid = itertools.product(
        ["int8-quanto", "none"], ["adamw8bit", "adamw"], range(1, MAX_BS + 1), [True, False]
    )
    scored = []
    for q, o, b, c in grid:
        peak, sps = sweep_trainer.model(q, o, b, c)
        if peak <= limit:
            scored.append((sps, (q, o, b, c)))
    sps, cand = max(scored)
    return cand, sps


@pytest.fixture(scope="module")
def clean_small(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """An uninterrupted sweep of the smaller space the kill tests use (batch sizes 1 and 2)."""
    tmp = tmp_path_factory.mktemp("clean-small")
    proc = _sweep(tmp, "--max-batch-size", "2")
    assert proc.returncode == 0, proc.stderr
    return {"proc": proc, "trials": _trials(tmp)}


#: The kill tests' card: its best batch is 3, neither a power of two nor the largest tried (4).
ODD_CARD_GB = 14.0


@pytest.fixture(scope="module")
def clean_odd(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """An uninterrupted sweep on the kill tests' card, whose best batch is not a power of two."""
    tmp = tmp_path_factory.mktemp("clean-odd")
    proc = _sweep(tmp, "--vram-gb", str(ODD_CARD_GB), env=_env(tmp, SWEEP_FAKE_CARD_GB=str(ODD_CARD_GB)))
    assert proc.returncode == 0, proc.stderr
    return {"proc": proc, "trials": _trials(tmp)}


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One uninterrupted sweep: the reference for the resume tests."""
    tmp = tmp_path_factory.mktemp("clean")
    t0 = time.monotonic()
    proc = _sweep(tmp)
    assert proc.returncode == 0, proc.stderr
    return {
        "tmp": tmp,
        "proc": proc,
        "wall_s": time.monotonic() - t0,
        "launches": _launches(tmp),
        "trials": _trials(tmp),
    }


def test_sweep_over_a_fake_trainer_finds_the_best_and_runs_nothing_twice(clean_run: dict[str, Any]) -> None:
    proc, trials, launches = clean_run["proc"], clean_run["trials"], clean_run["launches"]
    cands = [_cand(*line[:4]) for line in launches]
    assert len(cands) == len(trials)  # every launch is a trial
    again = [t for t in trials if t["attrs"].get("role") == "remeasure"]
    first = [_key(t["params"]) for t in trials if t not in again]
    assert len(first) == len(set(first))  # none twice, but a near-tie measured again, named so:
    for t in again:
        of = trials[t["attrs"]["remeasure_of"]]
        assert _key(of["params"]) == _key(t["params"]) and of["attrs"].get("role") != "remeasure"
    assert trials[0]["attrs"]["role"] == "baseline" and _key(trials[0]["params"]) == (
        "int8-quanto",
        "adamw8bit",
        1,
        True,
    )
    # The true best (brute force) or a near-tie of it with higher fidelity.
    _, best_sps = true_best()
    line = _best_line(proc.stdout)
    winner = next(t for t in trials if f"trial {t['number']}:" in line)
    assert winner["attrs"]["samples_per_s"] >= best_sps * 0.98
    assert _key(winner["params"]) == ("none", "adamw", 4, True)
    assert winner["state"] == "COMPLETE" and winner["attrs"]["fits"] is True
    # Every trial carries the attrs the study contract promises.
    for t in trials:
        a = t["attrs"]
        for key in (
            "outcome",
            "reason",
            "gradient_accumulation_steps",
            "effective_batch",
            "log_path",
            "trial_dir",
            "command",
        ):
            assert key in a, (t["number"], key)
        assert (t["state"] == "COMPLETE") == (a["outcome"] == "ok")
        if a["outcome"] == "ok":
            for key in (
                "step_time_s",
                "samples_per_s",
                "peak_vram_gb",
                "trainer_peak_vram_gb",
                "fits",
                "headroom_gb",
            ):
                assert key in a, (t["number"], key)
            assert (
                a["effective_batch"] == t["params"]["batch_size"]
            )  # baseline effective batch 1: accumulation 1
        if a["outcome"] == "oom":
            assert a["oom_tried_gb"] == 2.0 and a["oom_total_gb"] == CARD_GB
        assert Path(a["trial_dir"], "metrics.json").is_file()
    outcomes = Counter(t["attrs"]["outcome"] for t in trials)
    assert outcomes["ok"] >= 3 and outcomes["oom"] >= 1
    # The search takes fewer than the 24-point grid; the near-tie's re-measures come on top, each
    # bounded: the winner and at most REMEASURE_CONTENDERS contenders, REMEASURE_RUNS runs each
    # in all, and the baseline once.
    assert len(first) <= 0.75 * 24
    assert len(again) <= (1 + REMEASURE_CONTENDERS) * (REMEASURE_RUNS - 1) + 1
    assert "report: " in proc.stdout
    print(f"clean sweep: {len(trials)} trials of a 24-point grid in {clean_run['wall_s']:.1f}s")


@pytest.mark.process
@pytest.mark.parametrize("seed", [11, 23, 37])
def test_sigkill_at_random_moments_then_resume_gives_the_same_best(
    seed: int, clean_odd: dict[str, Any], tmp_path: Path
) -> None:
    rng = random.Random(seed)
    env = _env(tmp_path, SWEEP_FAKE_SLEEP_S="0.25", SWEEP_FAKE_CARD_GB=str(ODD_CARD_GB))
    argv = _argv(tmp_path, "--vram-gb", str(ODD_CARD_GB))  # batch sizes 1..4; the best is 3
    kills = 0
    for _ in range(3):
        proc = subprocess.Popen(
            argv, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        if rng.random() < 0.6:  # inside a trial: after a launch, somewhere in its run or its recording
            target = len(_launches(tmp_path)) + rng.randint(1, 2)
            deadline = time.monotonic() + 60
            while len(_launches(tmp_path)) < target and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
            time.sleep(rng.uniform(0.0, 0.4))
        else:  # anywhere: start-up, resume, between trials
            time.sleep(rng.uniform(0.3, 3.0))
        if proc.poll() is None:
            proc.kill()
            kills += 1
        proc.wait()
    final = _sweep(tmp_path, "--vram-gb", str(ODD_CARD_GB), env=env)
    assert final.returncode == 0, final.stderr
    assert _best_line(final.stdout).split(":", 2)[2] == _best_line(clean_odd["proc"].stdout).split(":", 2)[2]
    best, _ = true_best(ODD_CARD_GB)
    assert best == ("none", "adamw8bit", 3, True)  # the right winner, at a batch that is no power of two
    assert "batch_size=3 " in _best_line(final.stdout) and "optimizer=adamw8bit" in _best_line(final.stdout)

    trials = _trials(tmp_path)
    interrupted = Counter(_key(t["params"]) for t in trials if t["attrs"].get("outcome") == "interrupted")
    finished = [_key(t["params"]) for t in trials if t["attrs"].get("outcome") != "interrupted"]
    launched = Counter(_cand(*line[:4]) for line in _launches(tmp_path))
    assert len(finished) == len(set(finished))  # no finished trial was ever run again
    clean = sorted(_key(t["params"]) for t in clean_odd["trials"])
    assert sorted(finished) == clean  # the same trials as the uninterrupted sweep
    for cand, n in launched.items():  # launched once, plus once more per interrupted run of it
        assert n <= 1 + interrupted[cand], (cand, n, interrupted[cand])
    assert all(t["state"] != "RUNNING" for t in trials)
    assert not [line[4] for line in _launches(tmp_path) if _pid_alive(line[4])]  # no orphan left
    print(f"seed {seed}: {kills} kills, {sum(interrupted.values())} trials interrupted and re-run")


@pytest.mark.process
def test_a_sweep_killed_while_it_reaped_a_dead_sweeps_trial_leaves_the_next_one_to_finish_it(
    clean_small: dict[str, Any], tmp_path: Path
) -> None:
    """The moment the random kills above hit once in a while (CI, seed 11): SIGKILL the sweep that
    is reaping a dead sweep's trial after it took the claim but before it failed the trial.

    The first sweep is killed while its baseline waits at the gate (its trainer lives on, in its
    own session); then the claim is taken exactly as the resumed sweep's reaper takes it, and that
    reaper "dies" there. The sweep after must still end the orphan, record the trial interrupted
    and run it again: it used to skip the taken claim's trial, which stayed RUNNING for ever (the
    strategy took it for a trial running elsewhere and explored other candidates instead).
    """
    gate = tmp_path / "gate"  # never created: the first sweep's trainer would wait 120 s
    first = subprocess.Popen(
        _argv(tmp_path, "--max-batch-size", "2"),
        env=_env(tmp_path, SWEEP_FAKE_GATE=str(gate)), cwd=tmp_path,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not _launches(tmp_path):
        assert first.poll() is None and time.monotonic() < deadline, "the baseline never started"
        time.sleep(0.02)
    first.kill()
    first.wait()
    [orphan] = [line[4] for line in _launches(tmp_path)]
    assert _pid_alive(orphan)

    db = tmp_path / "runs" / "studies.db"
    conn = sqlite3.connect(db)
    try:
        [(study_id,)] = conn.execute("SELECT study_id FROM studies").fetchall()
    finally:
        conn.close()
    engine = op.engine(open_storage(f"sqlite:///{db}"))
    try:  # the trainer runs, so its trial is tied to its claim: the reaper takes it, and dies here
        [(row, _)] = ClaimBook(engine, study_id).take_stale()
    finally:
        engine.dispose()
    assert row.trial_id is not None and [t["state"] for t in _trials(tmp_path)] == ["RUNNING"]

    final = _sweep(tmp_path, "--max-batch-size", "2")
    assert final.returncode == 0, final.stderr
    assert not _pid_alive(orphan)
    trials = _trials(tmp_path)
    assert trials[0]["state"] == "FAIL" and trials[0]["attrs"]["outcome"] == "interrupted"
    assert all(t["state"] != "RUNNING" for t in trials)
    finished = sorted(_key(t["params"]) for t in trials[1:])
    assert finished == sorted(_key(t["params"]) for t in clean_small["trials"])
    assert (
        _best_line(final.stdout).split(":", 2)[2] == _best_line(clean_small["proc"].stdout).split(":", 2)[2]
    )


@pytest.mark.process
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_ends_the_trial_records_it_interrupted_and_exits_130(
    sig: signal.Signals, tmp_path: Path
) -> None:
    env = _env(tmp_path, SWEEP_FAKE_HANG_ON="2")
    proc = subprocess.Popen(
        _argv(tmp_path), env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 60
    while not any(line[2] == 2 for line in _launches(tmp_path)):
        assert proc.poll() is None and time.monotonic() < deadline, "the hanging trial never started"
        time.sleep(0.05)
    hanging_pid = next(line[4] for line in _launches(tmp_path) if line[2] == 2)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "resume" in err
    assert not _pid_alive(hanging_pid)
    trials = _trials(tmp_path)
    last = trials[-1]
    assert last["params"]["batch_size"] == 2 and last["state"] == "FAIL"
    assert last["attrs"]["outcome"] == "interrupted"
    if sig == signal.SIGINT:  # resuming runs the interrupted candidate again, and only it twice
        finished = len(trials) - 1  # the search decides how many ran before the hanging batch 2
        again = _sweep(tmp_path, "--max-trials", str(finished + 1))
        assert again.returncode == 0, again.stderr
        launched = Counter(_cand(*line[:4]) for line in _launches(tmp_path))
        assert launched[_key(last["params"])] == 2
        assert max(launched.values()) == 2 and len(launched) == finished + 1


@pytest.mark.process
def test_resume_with_other_settings_is_refused_naming_the_difference(tmp_path: Path) -> None:
    first = _sweep(tmp_path, "--max-trials", "1")
    assert first.returncode == 0, first.stderr
    other = subprocess.run(
        [*_argv(tmp_path, "--max-trials", "1")[:-6], "--vram-gb", "24", "--steps", "40", "--max-trials", "2"],
        env=_env(tmp_path), capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert other.returncode == 2
    assert "steps: the study has 20, this run 40" in other.stderr
    assert "card.vram_gb: the study has 16.0, this run 24.0" in other.stderr
    assert "--study" in other.stderr and "Traceback" not in other.stderr
    assert len(_launches(tmp_path)) == 1


def test_max_trials_and_budget_count_across_resumes(tmp_path: Path) -> None:
    assert _sweep(tmp_path, "--max-trials", "2").returncode == 0
    assert len(_launches(tmp_path)) == 2
    run = _sweep(tmp_path, "--max-trials", "4")
    assert run.returncode == 0 and "max-trials (4) reached after 4 trial(s) finished" in run.stdout
    assert len(_launches(tmp_path)) == 4
    run = _sweep(tmp_path, "--budget", "0.1s")  # far less than the trial time already spent
    assert run.returncode == 0 and "budget (0.1s) spent" in run.stdout
    assert len(_launches(tmp_path)) == 4


def test_baseline_crash_stops_at_once_with_the_diagnosis(tmp_path: Path) -> None:
    run = _sweep(tmp_path, env=_env(tmp_path, SWEEP_FAKE_CRASH="1"))
    assert run.returncode == 1
    assert "the baseline (trial 0) failed with outcome crash" in run.stderr
    assert "stderr" in run.stderr or "log" in run.stderr.lower()
    assert len(_launches(tmp_path)) == 1


@pytest.mark.process
def test_baseline_oom_says_nothing_shipped_fits_and_what_could(tmp_path: Path) -> None:
    env = _env(tmp_path, SWEEP_FAKE_CARD_GB="5")  # int8 at batch 1 needs 6 GiB; int4 4, int2 3
    small = [*_argv(tmp_path)[:-4], "--vram-gb", "5", "--max-batch-size", "1"]
    run = subprocess.run(small, env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert run.returncode == 1
    assert "nothing the trainer ships fits this card" in run.stderr and "--allow-extra-savers" in run.stderr
    assert len(_launches(tmp_path)) == 1
    # With extra savers allowed (a new study: the settings differ), lower-bit quantization is tried.
    run = subprocess.run(
        [*small, "--allow-extra-savers", "--study", "savers"],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr
    best = _best_line(run.stdout)
    assert "quantization=int2-quanto" in best or "quantization=int4-quanto" in best


@pytest.mark.process
def test_status_from_another_process_during_a_sweep(tmp_path: Path) -> None:
    gate = tmp_path / "gate"  # the first trial waits for it: status is sure to catch a running trial
    env = _env(tmp_path, SWEEP_FAKE_SLEEP_S="0.1", SWEEP_FAKE_GATE=str(gate))
    sweep = subprocess.Popen(
        _argv(tmp_path, "--max-trials", "4"),
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    status_argv = [sys.executable, "-m", "autotune", "status", "--workdir", str(tmp_path / "runs"), "--json"]
    seen_running, answers = False, 0
    try:
        while sweep.poll() is None:
            st = subprocess.run(
                status_argv, env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path
            )
            if st.returncode != 0:
                assert answers == 0 and "no study" in st.stderr, st.stderr  # only before the study exists
                assert "locked" not in st.stderr
                time.sleep(0.1)
                continue
            info = json.loads(st.stdout)
            answers += 1
            seen_running = seen_running or any(r["orchestrator_alive"] for r in info["running"])
            if seen_running:
                gate.touch()
    finally:
        gate.touch()
        _, err = sweep.communicate(timeout=120)
    assert sweep.returncode == 0, err
    assert answers >= 2 and seen_running
    text = subprocess.run(status_argv[:-1], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert text.returncode == 0
    assert "trials: 4 finished" in text.stdout and "best: trial" in text.stdout and "report:" in text.stdout


def test_effective_batch_kept_by_lowering_accumulation_and_forbidden_past_it(tmp_path: Path) -> None:
    base = tmp_path / "base.yaml"
    base.write_text(
        "quantization: int8-quanto\noptimizer: adamw8bit\nbatch_size: 1\ngradient_checkpointing: true\n"
        "gradient_accumulation_steps: 2\n"
    )
    run = _sweep(tmp_path, "--config", str(base), "--keep-effective-batch", "--max-trials", "4")
    assert run.returncode == 0, run.stderr
    trials = _trials(tmp_path)
    assert {t["params"]["batch_size"] for t in trials} <= {1, 2}  # nothing past the effective batch of 2
    for t in trials:
        a = t["attrs"]
        assert a["effective_batch"] == 2
        assert a["gradient_accumulation_steps"] == 2 // t["params"]["batch_size"]
    assert any(t["params"]["batch_size"] == 2 for t in trials)


@pytest.mark.process
def test_confirm_reruns_the_winner_longer(tmp_path: Path) -> None:
    run = _sweep(tmp_path, "--confirm", "--max-batch-size", "1")
    assert run.returncode == 0, run.stderr
    trials = _trials(tmp_path)
    confirms = [t for t in trials if t["attrs"].get("role") == "confirm"]
    assert len(confirms) == 1
    confirm = confirms[0]
    winner = next(t for t in trials if t["number"] == confirm["attrs"]["confirm_of"])
    assert confirm["params"] == winner["params"] and confirm["attrs"]["steps"] == 4 * winner["attrs"]["steps"]
    assert f"trial {winner['number']}:" in _best_line(run.stdout)
    again = _sweep(tmp_path, "--confirm", "--max-batch-size", "1")  # resuming a finished sweep runs nothing
    assert again.returncode == 0 and len(_trials(tmp_path)) == len(trials)
