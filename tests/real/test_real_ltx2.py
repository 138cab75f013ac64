"""The real tier: ``autotune plan`` and ``autotune sweep --trainer ltx2`` drive the REAL, unmodified
LTX-2 trainer (a Lightricks/LTX-2 checkout, tested at 400fd31) on CPU, with tiny random weights and
data built by ``scripts/real_ltx2.py`` with ltx-core's own classes.

Needs ``AUTOTUNE_LTX2_SRC`` (the checkout); the trainer's venv, models and data are built once under
``AUTOTUNE_LTX2_CACHE`` (default ``~/.cache/autotune/ltx2-real``; pip needs PyPI the first time).
Run: ``AUTOTUNE_LTX2_SRC=/path/LTX-2 python -m pytest -m real tests/real/test_real_ltx2.py``."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SRC_VAR, CACHE_VAR = "AUTOTUNE_LTX2_SRC", "AUTOTUNE_LTX2_CACHE"
#: The emulated card: the low-VRAM baseline (batch 1, about 6 MiB of device-resident tensors with
#: these weights) fits in its 90 %, batch 2 (about 12 MiB) does not: a real torch OutOfMemoryError
#: in the trainer.
CARD_GB = "0.009"
#: The trainer's own rate ("Training speed", trainer.py:151, 319-325) is its steps over the time from
#: before its set-up (optimizer, data loader, config save) to after its last step. Compared like with
#: like: against the hook's times of the same steps (step 2 on: the hook's first step also holds the
#: model load), so only the trainer's set-up and first step are in one figure and not the other;
#: measured on this rig 0.34 s quiet, 0.7-0.8 s on a loaded host, about 2-3 % of 200 steps.
STEPS = "200"
#: One intra-op thread per trainer: both sweeps run side by side on a small shared host, and torch's
#: default pool (one thread per core) then oversubscribes the cores; its threads spin-wait for
#: descheduled ones and the steps slow 20-30x at random (0.11 s steps measured at 1.7-5.6 s), which
#: no figure of either side survives. The trainer's code is unchanged; only its thread count is set.
THREADS = {"OMP_NUM_THREADS": "1"}

pytestmark = [pytest.mark.real, pytest.mark.timeout(1500)]


@pytest.fixture(scope="module")
def rig() -> dict[str, str]:
    src = os.environ.get(SRC_VAR)
    if not src:
        pytest.skip(
            f"{SRC_VAR} is not set: point it at a checkout of Lightricks/LTX-2 (tested at 400fd31) to run "
            "the real LTX-2 trainer"
        )
    if not (Path(src) / "packages" / "ltx-trainer" / "scripts" / "train.py").is_file():
        pytest.skip(f"{SRC_VAR}={src} holds no packages/ltx-trainer/scripts/train.py: not an LTX-2 checkout")
    cache = os.environ.get(CACHE_VAR) or str(Path.home() / ".cache" / "autotune" / "ltx2-real")
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "real_ltx2.py"), "prepare", "--src", src, "--cache", cache],
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _autotune() -> list[str]:
    found = shutil.which("autotune")
    return [found] if found else [sys.executable, "-m", "autotune"]


def _cli(args: list[str], cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [*_autotune(), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture(scope="module")
def planned(rig: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str], Path]:
    """``autotune plan`` for a 32 GB card from the checkout, once for the module: the plan, its
    ``Next:`` command (argv) and a folder that is neither the checkout nor the plan's."""
    base = tmp_path_factory.mktemp("planned")
    plan = base / "plan" / "plan.yaml"
    elsewhere = base / "elsewhere"
    elsewhere.mkdir()
    done = _cli(
        ["plan", "--trainer-dir", str(Path(rig["trainer_dir"]).parents[1]), "--vram-gb", "32",
         "--model", rig["model"], "--text-encoder", rig["text_encoder"], "--data", rig["data"],
         "--output-dir", str(base / "out"), "-o", str(plan), "--trainer-python", rig["python"]],
        cwd=elsewhere,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("Next: ")]
    argv = shlex.split(line.removeprefix("Next: "))
    assert argv[:2] == ["autotune", "sweep"] and "--trainer-dir" in argv
    return plan, argv[1:], elsewhere


@dataclass(frozen=True)
class Sweep:
    runs: Path
    done: subprocess.CompletedProcess[str]
    config: Path


@pytest.fixture(scope="module")
def sweeps(
    planned: tuple[Path, list[str], Path], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Sweep]:
    """Both sweeps the tests judge, started side by side (the tier's wall time is the longer one,
    not their sum; each trial's figures are its own, timed within its own process):

    - ``oom``: the plan as printed, 3 trials of ``STEPS`` on the emulated card, no validation pass;
    - ``validation``: the plan with its validation cut to one 64x64x9 sample (a user's edit, to
      keep it short on CPU), 1 trial of 3 steps, the pass after step 2."""
    plan, argv, elsewhere = planned
    base = tmp_path_factory.mktemp("sweeps")
    data = yaml.safe_load(plan.read_text())
    assert data["acceleration"]["load_text_encoder_in_8bit"] is True
    data["validation"]["video_dims"] = [64, 64, 9]
    data["validation"]["samples"] = data["validation"]["samples"][:1]
    cut = base / "plan-validation.yaml"
    cut.write_text(yaml.safe_dump(data, sort_keys=False))
    at = argv.index("--config") + 1
    asks = {
        "oom": (plan, ["--steps", STEPS, "--max-trials", "3", "--vram-gb", CARD_GB, "--force",
                       "--no-validation-in-trials"]),
        "validation": (cut, ["--steps", "3", "--max-trials", "1"]),
    }  # fmt: skip
    started = {}
    for name, (config, extra) in asks.items():
        runs = base / name
        args = [*argv[:at], str(config), *argv[at + 1 :], *extra, "--workdir", str(runs)]
        started[name] = (runs, config, _start(args, elsewhere, base / f"{name}.out", base / f"{name}.err"))
    found = {}
    for name, (runs, config, (proc, out, err)) in started.items():
        try:
            code = proc.wait(timeout=1200)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        found[name] = Sweep(
            runs, subprocess.CompletedProcess(proc.args, code, out.read_text(), err.read_text()), config
        )
    return found


def _start(args: list[str], cwd: Path, out: Path, err: Path) -> tuple[subprocess.Popen[bytes], Path, Path]:
    env = {
        **os.environ,
        **THREADS,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    with open(out, "wb") as o, open(err, "wb") as e:
        proc = subprocess.Popen([*_autotune(), *args], cwd=cwd, env=env, stdout=o, stderr=e)
    return proc, out, err


def _report(workdir: Path) -> dict[str, Any]:
    (path,) = workdir.glob("*/report.json")
    return dict(json.loads(path.read_text()))


def _trainer_rate(trial_dir: Path) -> float:
    """The trainer's own optimizer steps per second ('Training speed', trainer.py:324-325, 928)."""
    text = (trial_dir / "stdout.log").read_text(errors="replace")
    found = re.findall(r"Training speed: ([0-9.]+) steps/second", text)
    assert found, text[-2000:]
    return float(found[-1])


def test_the_real_trainer_sweeps_to_a_winner_that_fits_past_a_real_oom(sweeps: dict[str, Sweep]) -> None:
    runs, done = sweeps["oom"].runs, sweeps["oom"].done
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-4000:]
    report = _report(runs)
    trials = report["trials"]
    assert len(trials) == 3, log
    outcomes = [t["outcome"] for t in trials]
    assert outcomes[0] == "ok" and "oom" in outcomes, outcomes
    oom = trials[outcomes.index("oom")]
    stderr = (Path(report_trial_dir(runs, oom["number"])) / "stderr.log").read_text(errors="replace")
    assert "OutOfMemoryError" in stderr  # torch's own error, raised inside the real trainer
    _check_phases_and_views(runs, report)
    best = report["best"]
    assert best is not None and best["fits"] is True and best["outcome"] == "ok"
    assert best["peak_vram_gb"] <= 0.9 * float(CARD_GB)
    # samples/s, like with like: the trainer's own optimizer-step rate over its run (set-up and first
    # step in it) against ours over the same steps, both times the samples of one optimizer step
    winner_dir = Path(report_trial_dir(runs, best["trial"]))
    record = json.loads((winner_dir / "adapter.json").read_text())
    per_step = record["batch_size"] * record["gradient_accumulation_steps"]
    theirs = _trainer_rate(winner_dir) * per_step
    times = _hook_step_times(winner_dir)
    assert len(times) == int(STEPS), times
    ours = per_step * (len(times) - 1) / sum(times[1:])
    ratio = ours / theirs
    # the verdict's samples/s: the same step times, its steady ones (counted steps and warm-up left out)
    metrics = json.loads((winner_dir / "metrics.json").read_text())
    steady = times[-metrics["steady_steps"] :]
    assert best["samples_per_s"] == pytest.approx(per_step * len(steady) / sum(steady), rel=1e-3)
    print(f"trials {outcomes}; winner {best['params']}: trainer's own {theirs:.4f} samples/s, ours over the "
          f"same steps {ours:.4f} ({ratio:.3f}x); ours steady ({len(steady)} steps) {best['samples_per_s']:.4f} "
          f"({best['samples_per_s'] / theirs:.3f}x the trainer's)")  # fmt: skip
    assert 0.9 <= ratio <= 1.1, (best, theirs, ours)
    # and the issue's own check: the winner's samples/s (steady steps) within 10 % of the trainer's rate
    assert 0.9 <= best["samples_per_s"] / theirs <= 1.1, (best, theirs)


def _check_phases_and_views(runs: Path, report: dict[str, Any]) -> None:
    """Issue 25 items 4 and 6 on the real trainer's outputs: its CPU 'Peak GPU memory: 0.00 GB' is
    no trainer figure (unknown, not 0); a trial that died before its first optimizer step reached no
    phase (never 'peak set by save'); each trial's view links a sample for every batch it loads
    (steps x batch x GA, and accelerate's one batch ahead), so the loader never restarts."""
    notes = {
        int(m.group(1)): line for line in report["memory_phases"] if (m := re.match(r"Trial (\d+): ", line))
    }
    for trial in report["trials"]:
        trial_dir = Path(report_trial_dir(runs, trial["number"]))
        stdout = (trial_dir / "stdout.log").read_text(errors="replace")
        if "Peak GPU memory: 0.00 GB" in stdout:
            assert trial.get("trainer_peak_vram_gb") is None, trial
        note = notes[trial["number"]]
        if trial["outcome"] == "oom":
            assert "peak set by save" not in note, note
            if trial.get("steps_run") in (0, None):
                assert "no phase was reached" in note, note
        record = json.loads((trial_dir / "adapter.json").read_text())
        consumed = (
            int(STEPS) * record["batch_size"] * record["gradient_accumulation_steps"] + record["batch_size"]
        )
        linked = re.search(
            r"linked (\d+) times, so the loader serves the whole trial without a restart", note
        )
        assert linked is not None and int(linked.group(1)) >= consumed, note


def _hook_step_times(trial_dir: Path) -> list[float]:
    """The hook's time of each optimizer step, in step order (its step events, hookfile's format)."""
    events = []
    for line in (trial_dir / "hook.jsonl").read_text().splitlines():
        event = json.loads(line[line.index("{") :]) if "{" in line else {}
        if event.get("event") == "step":
            events.append(event)
    return [float(e["step_time_s"]) for e in sorted(events, key=lambda e: int(e["step"]))]


def report_trial_dir(runs: Path, number: int) -> str:
    (found,) = runs.glob(f"*/trial-{number:04d}")
    return str(found)


def test_without_cuda_the_validating_baseline_runs_with_its_text_encoder_unquantized(
    sweeps: dict[str, Sweep],
) -> None:
    """The low-VRAM baseline validates with the 8-bit text encoder, which the real trainer refuses
    without CUDA (gemma_8bit.py:81-86): the trial turns it off, says so, and runs its validation
    pass (after step 2 of 3); samples/s leaves that step out, as the step time does."""
    runs, done = sweeps["validation"].runs, sweeps["validation"].done
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-4000:]
    assert "load_text_encoder_in_8bit: false" in log and "gemma_8bit.py:81-86" in log
    report = _report(runs)
    assert [t["outcome"] for t in report["trials"]] == ["ok"], log[-4000:]
    trial = Path(report_trial_dir(runs, 0))
    config = yaml.safe_load((trial / "config.yaml").read_text())
    assert config["acceleration"]["load_text_encoder_in_8bit"] is False
    assert config["validation"]["interval"] == 2
    assert "Validation samples for step 2 saved" in (trial / "stdout.log").read_text(errors="replace")
    (only,) = report["trials"]
    assert only["samples_per_s"] == pytest.approx(1 / only["step_time_s"], rel=1e-3)  # batch 1
    assert any("gemma_8bit.py:81-86" in w for w in report["warnings"])
    # 3 steps print no Step line: the trainer's figure beside ours is its Training speed, whose
    # average holds the set-up and the validation pass, and the report says so where they differ
    (speed,) = [w for w in report["warnings"] if "The trainer's own samples/s differs" in w]
    assert "Training speed, which averages the whole run in" in speed
    stdout = (trial / "stdout.log").read_text(errors="replace")
    assert "8-bit Gemma quantization requires a CUDA device" not in stdout + log
