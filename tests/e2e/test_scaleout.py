"""Scaling out, end to end: every card of a machine (--parallel, on SQLite, cards faked at the
NVML seam) and several workers on one PostgreSQL study (real processes, a real server).

The trainer is ``tests/fakes/pinned_trainer.py``: the sweep tests' fake with a known landscape,
which also records the card it was pinned to and when it ran. No GPU is needed.
"""

from __future__ import annotations

import io
import itertools
import json
import shlex
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from autotune.core.strategy import REMEASURE_RUNS
from autotune.errors import StudyMismatchError, UsageError
from autotune.store import optuna_private as op
from autotune.store.claims import ClaimBook
from autotune.store.storage import open_storage
from autotune.sweep.api import run_sweep, run_worker
from autotune.sweep.options import OPTIONS_ATTR, SweepOptions
from tests.fake_nvml import A6000, FakeNvml, fake_uuid
from tests.helpers import FAKES, cli_env, wait_for

CARD = ("NVIDIA Fake 16GB", 15.9)
CARD_GB = 16.0
MAX_BS = 8


def _true_best() -> tuple[str, str, int, bool]:
    """Brute force over the integer grid (batch 1..MAX_BS) at 16 GB with 10 % headroom."""
    from tests.fakes import sweep_trainer

    grid = itertools.product(
        ["int8-quanto", "none"], ["adamw8bit", "adamw"], range(1, MAX_BS + 1), [True, False]
    )
    fitting = [(sweep_trainer.model(*c)[1], c) for c in grid if sweep_trainer.model(*c)[0] <= 0.9 * CARD_GB]
    return max(fitting)[1]


BEST = _true_best()  # ("none", "adamw8bit", 5, True): not a power of two
TEMPLATE = (
    f"{shlex.quote(sys.executable)} {shlex.quote(str(FAKES / 'pinned_trainer.py'))} "
    "{quantization} {optimizer} {batch_size} {gradient_checkpointing} {steps}"
)


def _fake_env(tmp: Path, sleep_s: float = 0.3, **extra: str) -> dict[str, str]:
    fake = {
        "PINNED_FAKE_LOG": str(tmp / "launches.jsonl"),
        "SWEEP_FAKE_SLEEP_S": str(sleep_s),
        "SWEEP_FAKE_CARD_GB": str(CARD_GB),
    }
    return cli_env(drop=("SWEEP_FAKE_", "PINNED_FAKE_"), **{**fake, **extra})


def _launches(tmp: Path, event: str = "start") -> list[dict[str, Any]]:
    path = tmp / "launches.jsonl"
    if not path.exists():
        return []
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in lines if r["event"] == event]


def _assert_each_ran_once_but_remeasures(launched: list[tuple[Any, ...]], trials: list[Any]) -> None:
    """A candidate runs once, but for the bounded re-measures of a near-tie at the end."""
    searched = [_key(t.params) for t in trials if t.user_attrs.get("role") != "remeasure"]
    again = _remeasured(trials)
    assert len(searched) == len(set(searched)), f"a candidate ran twice: {Counter(searched).most_common(3)}"
    assert all(key in searched and 1 + n <= REMEASURE_RUNS for key, n in again.items()), again
    assert Counter(launched) == Counter(searched) + again  # every launch is one of those trials


def _remeasured(trials: list[Any]) -> Counter[tuple[str, str, int, bool]]:
    return Counter(_key(t.params) for t in trials if t.user_attrs.get("role") == "remeasure")


def _key(params: dict[str, Any]) -> tuple[str, str, int, bool]:
    return (
        str(params["quantization"]),
        str(params["optimizer"]),
        int(params["batch_size"]),
        bool(params["gradient_checkpointing"]),
    )


def _opts(tmp: Path, storage: str, **kw: Any) -> SweepOptions:
    base: dict[str, Any] = {
        "trainer": "command",
        "cmd": TEMPLATE,
        "vram_gb": CARD_GB,
        "steps": 20,
        "max_batch_size": MAX_BS,
        "study": "s",
        "storage": storage,
        "workdir": tmp / "runs",
    }
    base.update(kw)
    return SweepOptions(**base)


def _wait_for(
    predicate: Callable[[], bool],
    what: str,
    timeout_s: float = 90.0,
    *,
    watch: tuple[Path, dict[str, subprocess.Popen[str]]] | None = None,
) -> None:
    """``wait_for`` over the processes ``_start`` captured: any failure shows each one's state and output."""
    tmp, procs = watch if watch else (None, {})
    explain = (lambda: _report(tmp, procs)) if tmp is not None else None
    wait_for(predicate, what, timeout_s, processes=procs, explain=explain)


def _report(tmp: Path, procs: dict[str, subprocess.Popen[str]]) -> str:
    """Each process's exit status and the tail of its stderr and stdout, for a failure message."""
    out = []
    for name, proc in procs.items():
        rc = proc.poll()
        out.append(f"\n--- {name} (pid {proc.pid}): {'running' if rc is None else f'exited {rc}'}")
        for stream in ("err", "out"):
            text = _text(tmp, name, stream)
            out.append(f"  {name}.{stream}: " + (text[-3000:] if text else "(empty)"))
    return "\n".join(out)


def _max_overlap(tmp: Path) -> int:
    """The most trials that ran at the same moment, from the fake's start and end records."""
    starts = {r["pid"]: r["t"] for r in _launches(tmp, "start")}
    ends = {r["pid"]: r["t"] for r in _launches(tmp, "end")}
    events = sorted([(t, 1) for t in starts.values()] + [(ends.get(p, float("inf")), -1) for p in starts])
    now = best = 0
    for _, delta in events:
        now += delta
        best = max(best, now)
    return best


# --- one machine, every card --------------------------------------------------------------------


def test_parallel_runs_one_pinned_trial_per_card_and_finds_the_same_best(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in _fake_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    nvml = FakeNvml([CARD, CARD, CARD])
    out = io.StringIO()
    url = f"sqlite:///{tmp_path / 'runs' / 'studies.db'}"
    result = run_sweep(_opts(tmp_path, url), parallel=True, nvml=nvml, stream=out, tty=False, lease_s=3)

    launches = _launches(tmp_path)
    cands = [tuple(r["params"]) for r in launches]
    study = optuna.load_study(study_name="s", storage=url)
    trials = study.get_trials()
    _assert_each_ran_once_but_remeasures(cands, trials)
    uuids = {fake_uuid(i) for i in range(3)}
    assert {r["cuda_visible_devices"] for r in launches} <= uuids  # every trial pinned to one card
    assert len({r["cuda_visible_devices"] for r in launches}) >= 2
    assert _max_overlap(tmp_path) >= 2  # really at the same time
    assert result.best_params is not None and _key(result.best_params) == BEST
    assert result.stop_reason == "done"
    text = out.getvalue()
    assert "[gpu 0] " in text and "[gpu 1] " in text
    assert len(trials) == len(launches)
    assert all(t.state in (TrialState.COMPLETE, TrialState.FAIL) for t in trials)
    assert study.user_attrs["settings"]["card"]["count"] == 1  # each trial has one card
    assert study.user_attrs[OPTIONS_ATTR]["cmd"] == TEMPLATE
    assert ClaimBook(op.engine(open_storage(url)), study._study_id).in_flight() == []


def test_parallel_refuses_mixed_card_models(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    with pytest.raises(UsageError, match="mixes 2 GPU models"):
        run_sweep(_opts(tmp_path, url), parallel=True, nvml=FakeNvml([CARD, A6000]), stream=io.StringIO())
    assert not (tmp_path / "studies.db").exists()  # refused before anything was written


def test_a_worker_on_another_card_model_refuses_to_join_naming_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in _fake_env(tmp_path, sleep_s=0.05).items():
        monkeypatch.setenv(key, value)
    url = f"sqlite:///{tmp_path / 'runs' / 'studies.db'}"
    run_sweep(_opts(tmp_path, url, max_trials=1), nvml=FakeNvml([CARD]), stream=io.StringIO(), tty=False)
    with pytest.raises(StudyMismatchError) as err:
        run_worker("s", url, nvml=FakeNvml([A6000]), stream=io.StringIO())
    text = str(err.value)
    assert "cannot join study 's'" in text
    assert CARD[0] in text and A6000[0] in text
    assert "separate study" in text


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"study": "nope"}, "no study 'nope'"),
        ({"gpu": 3}, "--gpu 3: this process sees 1 GPU"),
    ],
)
def test_worker_usage_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kwargs: dict[str, Any], message: str
) -> None:
    for key, value in _fake_env(tmp_path, sleep_s=0.05).items():
        monkeypatch.setenv(key, value)
    url = f"sqlite:///{tmp_path / 'runs' / 'studies.db'}"
    run_sweep(_opts(tmp_path, url, max_trials=1), nvml=FakeNvml([CARD]), stream=io.StringIO(), tty=False)
    args: dict[str, Any] = {"study": "s", **kwargs}
    study = args.pop("study")
    with pytest.raises(Exception, match=message):
        run_worker(study, url, nvml=FakeNvml([CARD]), stream=io.StringIO(), **args)


def test_a_worker_started_before_its_sweep_says_it_waits_and_joins_once_the_study_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    for key, value in _fake_env(tmp_path, sleep_s=0.05).items():
        monkeypatch.setenv(key, value)
    url = f"sqlite:///{tmp_path / 'runs' / 'studies.db'}"  # no database yet: the sweep makes it
    out, got = io.StringIO(), {}

    def worker() -> None:
        try:
            got["result"] = run_worker("s", url, nvml=FakeNvml([CARD]), stream=out, wait_s=120)
        except BaseException as exc:
            got["error"] = exc

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    _wait_for(
        lambda: "waiting up to 2m00s for study 's'" in out.getvalue() or "error" in got, "the worker to wait"
    )
    assert "error" not in got, got["error"]
    assert "no study database at" in out.getvalue()
    run_sweep(_opts(tmp_path, url, max_trials=1), nvml=FakeNvml([CARD]), stream=io.StringIO(), tty=False)
    thread.join(timeout=120)
    assert not thread.is_alive() and "error" not in got, (got, out.getvalue())
    assert got["result"].study == "s"


# --- several machines, one PostgreSQL study -----------------------------------------------------


def _sweep_argv(tmp: Path, url: str, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "autotune", "sweep", "--workdir", str(tmp / "runs"), "--cmd", TEMPLATE,
        "--vram-gb", str(CARD_GB), "--steps", "20", "--max-batch-size", "8", "--study", "s",
        "--storage", url, *extra,
    ]  # fmt: skip


def _worker_argv(tmp: Path, url: str, name: str, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "autotune", "worker", "--study", "s", "--storage", url,
        "--workdir", str(tmp / name), "--wait", "2m", *extra,
    ]  # fmt: skip


def _start(argv: list[str], env: dict[str, str], tmp: Path, name: str) -> subprocess.Popen[str]:
    """A process whose output goes to ``tmp/name.out`` and ``tmp/name.err`` (read while it runs)."""
    return subprocess.Popen(
        argv,
        env=env,
        cwd=tmp,
        stdout=(tmp / f"{name}.out").open("w"),
        stderr=(tmp / f"{name}.err").open("w"),
        text=True,
    )


def _text(tmp: Path, name: str, stream: str = "err") -> str:
    path = tmp / f"{name}.{stream}"
    return path.read_text() if path.exists() else ""


def _finish(proc: subprocess.Popen[str], timeout: float = 300) -> int:
    """Its exit code; killed if it has not exited within ``timeout``."""
    try:
        return proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _kill_left(*procs: subprocess.Popen[str]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


@pytest.mark.process
@pytest.mark.postgres
def test_three_workers_share_one_postgres_study_and_run_nothing_twice(pg_url: str, tmp_path: Path) -> None:
    go = tmp_path / "go"
    env = _fake_env(tmp_path, sleep_s=0.6)
    names = ["w0", "w1"]
    workers = [_start(_worker_argv(tmp_path, pg_url, n, "--lease", "3"), env, tmp_path, n) for n in names]
    sweep = _start(
        _sweep_argv(tmp_path, pg_url), {**env, "PINNED_FAKE_BASELINE_WAITS_FOR": str(go)}, tmp_path, "sweep"
    )
    watch = (tmp_path, {**dict(zip(names, workers, strict=True)), "sweep": sweep})
    try:  # the baseline runs alone while the workers join and wait for its verdict
        for n in names:
            _wait_for(lambda n=n: "waiting:" in _text(tmp_path, n), f"worker {n} to join", watch=watch)
        go.touch()
        assert _finish(sweep) == 0, _report(*watch)
        for w, n in zip(workers, names, strict=True):
            assert _finish(w, 120) == 0, _report(*watch)
            assert "worker on study s: done" in _text(tmp_path, n, "out")
    finally:
        _kill_left(*workers, sweep)

    launches = _launches(tmp_path)
    cands = [tuple(r["params"]) for r in launches]
    study = optuna.load_study(study_name="s", storage=pg_url)
    trials = study.get_trials()
    _assert_each_ran_once_but_remeasures(cands, trials)
    assert len(trials) == len(launches)
    by_worker = Counter(t.user_attrs["worker"] for t in trials)
    assert len(by_worker) >= 2, by_worker  # the work was shared
    assert _max_overlap(tmp_path) >= 2
    out = _text(tmp_path, "sweep", "out")
    best_line = next(line for line in out.splitlines() if line.startswith("best: "))
    winner = next(t for t in trials if f"trial {t.number}:" in best_line)
    assert _key(winner.params) == BEST
    assert study.user_attrs["best_trial"] == winner.number


@pytest.mark.process
@pytest.mark.postgres
def test_a_killed_worker_trial_is_run_again_by_another(pg_url: str, tmp_path: Path) -> None:
    """SIGKILL a worker mid-trial: the sweep fails that trial as interrupted, ends its orphaned
    trainer and runs the candidate again; everything else still runs once, and the best is found.

    Made deterministic with the baseline, which must always be run: a first sweep is stopped
    with Ctrl-C during it, a worker then takes it (and hangs), and the resumed sweep waits for
    the worker's verdict until the worker is killed.
    """
    never, hang = tmp_path / "never", tmp_path / "hang"
    first = _start(
        _sweep_argv(tmp_path, pg_url),
        _fake_env(tmp_path, PINNED_FAKE_BASELINE_WAITS_FOR=str(never)),
        tmp_path,
        "first",
    )
    try:
        _wait_for(
            lambda: bool(_launches(tmp_path)),
            "the first sweep to start its baseline",
            watch=(tmp_path, {"first": first}),
        )
        first.send_signal(signal.SIGINT)
        assert _finish(first, 60) == 130, _text(tmp_path, "first")
    finally:
        _kill_left(first)
    worker = _start(
        _worker_argv(tmp_path, pg_url, "w"),
        _fake_env(tmp_path, sleep_s=0.2, PINNED_FAKE_HANG_ONCE=str(hang)),
        tmp_path,
        "w",
    )
    sweep = None
    try:
        _wait_for(
            lambda: hang.exists() and len(hang.read_text().split()) == 2,
            "the worker's trial to hang",
            watch=(tmp_path, {"w": worker}),
        )
        trainer_pid, parent = map(int, hang.read_text().split())
        assert parent == worker.pid
        sweep = _start(_sweep_argv(tmp_path, pg_url), _fake_env(tmp_path, sleep_s=0.2), tmp_path, "sweep")
        _wait_for(
            lambda: "waiting:" in _text(tmp_path, "sweep"),
            "the sweep to wait for the worker's baseline",
            watch=(tmp_path, {"w": worker, "sweep": sweep}),
        )
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=30)
        assert _finish(sweep) == 0, _text(tmp_path, "sweep")
    finally:
        _kill_left(worker, *([sweep] if sweep else []))
    err, out = _text(tmp_path, "sweep"), _text(tmp_path, "sweep", "out")
    study = optuna.load_study(study_name="s", storage=pg_url)
    trials = study.get_trials()
    base = [t for t in trials if t.user_attrs.get("role") == "baseline"]
    assert [t.user_attrs["outcome"] for t in base] == ["interrupted", "interrupted", "ok"]
    ctrl_c, killed, again = base
    assert "SIGINT" in ctrl_c.user_attrs["reason"] or "interrupt" in ctrl_c.user_attrs["reason"]
    assert killed.user_attrs["worker"].endswith(f"pid {worker.pid}")
    assert "is gone" in killed.user_attrs["reason"] and "run again" in killed.user_attrs["reason"]
    assert again.user_attrs["worker"].endswith(f"pid {sweep.pid}")
    assert "were ended" in err, err
    assert not _alive(trainer_pid)  # the orphaned trainer was ended, not left holding the card
    cands = Counter(tuple(r["params"]) for r in _launches(tmp_path)) - _remeasured(trials)
    twice = {c: n for c, n in cands.items() if n > 1}
    assert twice == {_key(killed.params): 3}  # the baseline: Ctrl-C'd, killed, then run to the end
    best_line = next(line for line in out.splitlines() if line.startswith("best: "))
    winner = next(t for t in trials if f"trial {t.number}:" in best_line)
    assert _key(winner.params) == BEST


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize(("gpus_per_trial", "refused"), [(1, False), (2, True)])
def test_a_pinned_worker_judges_its_own_card_and_refuses_multi_gpu_trials(
    tmp_path: Path, gpus_per_trial: int, refused: bool
) -> None:
    from autotune.gpu.probe import probe
    from autotune.sweep.setup import pick_card, trial_env
    from autotune.trainers import get_adapter
    from autotune.trainers.base import Baseline

    nvml = FakeNvml([CARD, CARD])
    second = probe(lambda: nvml, env={}).gpus[1]
    opts = _opts(tmp_path, "sqlite://")
    baseline = Baseline(trainer="command", text="", data={}, num_gpus=gpus_per_trial)
    adapter = get_adapter("command", template=TEMPLATE)
    if refused:
        with pytest.raises(UsageError, match="launches each trial on 2 GPUs"):
            pick_card(opts, adapter, baseline, nvml, pin=second)
        return
    card = pick_card(opts, adapter, baseline, nvml, pin=second)
    assert (card.count, card.indices, card.vram_gb) == (1, (1,), CARD_GB)
    assert trial_env(second) == {"CUDA_VISIBLE_DEVICES": fake_uuid(1)}


def test_a_second_sweep_on_this_machine_is_refused_but_a_worker_joins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import psutil

    from autotune.store.identity import ProcessIdentity

    for key, value in _fake_env(tmp_path, sleep_s=0.05).items():
        monkeypatch.setenv(key, value)
    url = f"sqlite:///{tmp_path / 'runs' / 'studies.db'}"
    run_sweep(_opts(tmp_path, url, max_trials=1), nvml=False, stream=io.StringIO(), tty=False)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:  # another sweep of this study, alive on this machine
        storage = open_storage(url)
        sid = storage.get_study_id_from_name("s")
        me = ProcessIdentity.current()
        live = ProcessIdentity(other.pid, me.host, psutil.Process(other.pid).create_time())
        storage.set_study_user_attr(sid, "orchestrator", live.as_attrs())
        with pytest.raises(
            UsageError, match=f"being run right now by another autotune \\(pid {other.pid}\\)"
        ):
            run_sweep(_opts(tmp_path, url, max_trials=2), nvml=False, stream=io.StringIO(), tty=False)
        result = run_worker("s", url, nvml=False, stream=io.StringIO())  # joins, runs, leaves it alone
        assert result.best_trial is None and result.trials_run >= 1
        assert storage.get_study_user_attrs(sid)["orchestrator"] == live.as_attrs()
    finally:
        other.kill()
        other.wait()
