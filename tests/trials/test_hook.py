"""The trial-side hook, injected into a plain PyTorch script that knows nothing of it."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import FAKES, REPO

HOOK_DIR = REPO / "trials" / "hook"
SCRIPT = FAKES / "plain_torch_train.py"

pytest.importorskip("torch")
pytestmark = [pytest.mark.torch, pytest.mark.untimed]  # untimed: scripts/test.sh runs it on two workers


def train(
    *args: str, hook_file: str | None, extra_path: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("AUTOTUNE_HOOK_FILE", "PYTHONPATH")}
    paths = [str(HOOK_DIR)] + ([str(extra_path)] if extra_path else [])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    if hook_file is not None:
        env["AUTOTUNE_HOOK_FILE"] = hook_file
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_reports_every_step_and_the_exit_and_changes_nothing_else(tmp_path: Path) -> None:
    # Another sitecustomize later on the path (a distro's, a venv's) must still run.
    other = tmp_path / "site"
    other.mkdir()
    marker = tmp_path / "marker"
    (other / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n", encoding="utf-8")
    hook_file = tmp_path / "hook.jsonl"
    hooked = train("5", hook_file=str(hook_file), extra_path=other)
    assert hooked.returncode == 0, hooked.stderr
    assert marker.read_text(encoding="utf-8") == "ran"
    records = events(hook_file)
    steps = [r for r in records if r["event"] == "step"]
    assert [r["step"] for r in steps] == [1, 2, 3, 4, 5]
    assert all(r["step_time_s"] > 0 for r in steps)
    assert [r["t"] for r in steps] == sorted(r["t"] for r in steps)
    # On CPU there is no CUDA memory to report: the fields are there, and null.
    assert all(r["max_memory_reserved_gb"] is None and r["max_memory_allocated_gb"] is None for r in steps)
    assert records[-1]["event"] == "exit"
    assert records[-1]["steps"] == 5
    assert records[-1]["exception"] is None
    plain = train("5", hook_file=None)
    assert (hooked.stdout, hooked.stderr) == (plain.stdout, plain.stderr)
    assert plain.stdout.splitlines()[-1] == "done"


def test_crash_is_recorded_and_the_traceback_left_as_it_was(tmp_path: Path) -> None:
    hook_file = tmp_path / "hook.jsonl"
    proc = train("5", "--crash-at", "3", hook_file=str(hook_file))
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == "RuntimeError: deliberate crash at step 3"
    records = events(hook_file)
    assert [r["step"] for r in records if r["event"] == "step"] == [1, 2]
    assert records[-1]["event"] == "exit"
    assert records[-1]["steps"] == 2
    assert records[-1]["exception"] == "builtins.RuntimeError: deliberate crash at step 3"


@pytest.mark.parametrize(
    "target",
    [
        "{tmp}/no/such/folder/hook.jsonl",  # cannot be opened: the hook never installs
        "/dev/full",  # opens, but every write fails: the hook turns itself off at the first step
    ],
)
def test_broken_hook_does_not_break_the_script(tmp_path: Path, target: str) -> None:
    proc = train("3", hook_file=target.format(tmp=tmp_path))
    assert proc.returncode == 0
    assert proc.stdout.splitlines()[-1] == "done"
    assert proc.stderr == ""


def test_without_the_variable_the_hook_does_nothing(tmp_path: Path) -> None:
    """Not importing torch, not writing anything: a plain Python start-up stays plain."""
    env = {k: v for k, v in os.environ.items() if k != "AUTOTUNE_HOOK_FILE"}
    env["PYTHONPATH"] = str(HOOK_DIR)
    code = "import sys; print('torch' in sys.modules, len(sys.meta_path))"
    hooked = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    env["AUTOTUNE_HOOK_FILE"] = str(tmp_path / "hook.jsonl")
    armed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert hooked.stdout.split()[0] == armed.stdout.split()[0] == "False"
    assert int(armed.stdout.split()[1]) == int(hooked.stdout.split()[1]) + 1  # only the import watcher
    assert not (tmp_path / "hook.jsonl").exists()


# --- what the hook reads per step: loss, the data loader's real batch, the emulated card ----------


def run_hooked(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> tuple[Any, Path]:
    hook_file = tmp_path / "hook.jsonl"
    base = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_")}
    base.update({"PYTHONPATH": str(HOOK_DIR), "AUTOTUNE_HOOK_FILE": str(hook_file), **(env or {})})
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        env=base,
        timeout=120,
        check=False,
    )
    return proc, hook_file


def test_losses_are_the_scalars_backward_saw(tmp_path: Path) -> None:
    proc, hook_file = run_hooked(tmp_path, "4")
    assert proc.returncode == 0, proc.stderr
    printed = [float(line.split()[-1]) for line in proc.stdout.splitlines() if line.startswith("step")]
    recorded = [r["loss"] for r in events(hook_file) if r["event"] == "step"]
    assert recorded == pytest.approx(printed, rel=1e-5)


def test_a_diverging_loss_is_recorded_non_finite_and_read_as_nan(tmp_path: Path) -> None:
    from autotune.core.outcome import Outcome, explain
    from autotune.trainers.kit.readers.hookfile import read_hook_file

    proc, hook_file = run_hooked(tmp_path, "6", "--lr", "1e9", "--optimizer", "sgd")
    assert proc.returncode == 0, proc.stderr
    losses = [r["loss"] for r in events(hook_file) if r["event"] == "step"]
    assert any(not math.isfinite(x) for x in losses)
    metrics = read_hook_file(hook_file)
    assert metrics.nan_loss
    # The outcome classification's own rule for a NaN loss, with an output that never says "nan".
    outcome = explain(
        0,
        None,
        timed_out=False,
        stalled=False,
        interrupted=False,
        output="step 1 loss 0.5\ndone\n",
        metrics=metrics,
    ).outcome
    assert outcome is Outcome.NAN


@pytest.mark.parametrize(
    ("items", "batch", "accumulate", "per_step"),
    [
        pytest.param(6, 8, 1, [6, 6, 6, 6], id="6-items-at-batch-8"),
        pytest.param(10, 4, 1, [4, 4, 2, 4, 4, 2], id="partial-last-batch"),
        pytest.param(10, 4, 2, [8, 6, 6, 8], id="accumulation-sums-micro-batches"),  # 4+4, 2+4, 4+2, 4+4,
    ],
)
def test_samples_are_what_the_data_loader_yielded(
    tmp_path: Path, items: int, batch: int, accumulate: int, per_step: list[int]
) -> None:
    args = [str(len(per_step)), "--data", str(items), "--batch", str(batch), "--accumulate", str(accumulate)]
    proc, hook_file = run_hooked(tmp_path, *args)
    assert proc.returncode == 0, proc.stderr
    assert [r["samples"] for r in events(hook_file) if r["event"] == "step"] == per_step


def test_samples_from_worker_processes_are_counted_once(tmp_path: Path) -> None:
    proc, hook_file = run_hooked(tmp_path, "4", "--data", "10", "--batch", "4", "--workers", "2")
    assert proc.returncode == 0, proc.stderr
    records = events(hook_file)
    assert [r["samples"] for r in records if r["event"] == "step"] == [4, 4, 2, 4]
    assert [r["event"] for r in records].count("exit") == 1  # workers leave no exit line of their own


def test_without_a_data_loader_samples_are_null(tmp_path: Path) -> None:
    proc, hook_file = run_hooked(tmp_path, "2")
    assert proc.returncode == 0, proc.stderr
    assert [r["samples"] for r in events(hook_file) if r["event"] == "step"] == [None, None]


# --- backward events: timing a script that steps no optimizer ----------------------------------

MANUAL_SGD = FAKES / "manual_sgd_lm.py"  # word_language_model's loop: weights moved by hand


@pytest.mark.parametrize("accumulate", [1, 3])
def test_with_an_optimizer_only_the_first_accumulations_backwards_are_written(
    tmp_path: Path, accumulate: int
) -> None:
    proc, hook_file = run_hooked(
        tmp_path, "4", "--data", "24", "--batch", "4", "--accumulate", str(accumulate)
    )
    assert proc.returncode == 0, proc.stderr
    kinds = [r["event"] for r in events(hook_file)]
    assert kinds[:accumulate] == ["backward"] * accumulate  # then the first step, and none after
    assert kinds.count("backward") == accumulate and kinds.count("step") == 4
    assert [r["samples"] for r in events(hook_file) if r["event"] == "step"] == [4 * accumulate] * 4
    printed = [float(line.split()[-1]) for line in proc.stdout.splitlines() if line.startswith("step")]
    recorded = [r["loss"] for r in events(hook_file) if r["event"] == "step"]
    assert recorded == pytest.approx(printed, rel=1e-5)  # the step's loss is still its last backward's


def _run_manual(tmp_path: Path, *args: str) -> tuple[Any, Path]:
    hook_file = tmp_path / "hook.jsonl"
    base = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_")}
    base.update({"PYTHONPATH": str(HOOK_DIR), "AUTOTUNE_HOOK_FILE": str(hook_file)})
    proc = subprocess.run(
        [sys.executable, str(MANUAL_SGD), "--batch_size", "4", "--tokens", "1200", *args],
        capture_output=True, text=True, env=base, timeout=120, check=False,
    )  # fmt: skip
    return proc, hook_file


def test_a_script_that_updates_weights_by_hand_writes_a_backward_per_batch(tmp_path: Path) -> None:
    proc, hook_file = _run_manual(tmp_path, "--log-interval", "1")
    assert proc.returncode == 0, proc.stderr
    records = events(hook_file)
    backwards = [r for r in records if r["event"] == "backward"]
    printed = [
        float(line.split("| loss")[1].split()[0]) for line in proc.stdout.splitlines() if "ms/batch" in line
    ]
    assert len(backwards) == len(printed) + 1 > 10  # batch 0 prints no line (main.py:198)
    assert [r["backward"] for r in backwards] == list(range(1, len(backwards) + 1))
    assert all(r["step_time_s"] > 0 and r["samples"] is None for r in backwards)
    losses = [r["loss"] for r in backwards]
    # The first line sums batches 0 and 1 over an interval of 1 (main.py:167, 199); '{:5.2f}' rounds.
    assert printed[0] == pytest.approx(losses[0] + losses[1], abs=0.006)
    assert losses[2:] == pytest.approx(printed[1:], abs=0.006)
    assert not [r for r in records if r["event"] == "step"] and records[-1]["steps"] == 0


def _model_bytes(hidden: int) -> int:
    """The fake's two linear layers, fp32: weights, biases."""
    return 4 * (16 * hidden + hidden + hidden + 1)


def test_the_emulated_card_counts_the_scripts_tensors_and_reports_the_peak(tmp_path: Path) -> None:
    proc, hook_file = run_hooked(
        tmp_path,
        "5",
        "--hidden",
        "512",
        env={"AUTOTUNE_EMULATED_VRAM_GB": "1", "AUTOTUNE_EMULATED_COUNT_STEPS": "0"},
    )
    assert proc.returncode == 0, proc.stderr
    records = events(hook_file)
    assert records[0]["event"] == "card" and records[0]["mode"] == "counted"
    steps = [r for r in records if r["event"] == "step"]
    assert all(r["counted"] for r in steps)
    peak = steps[-1]["max_memory_reserved_gb"] * 1024**3
    # At least the weights, their gradients and AdamW's two moments (4x the model), and the data.
    assert peak >= 4 * _model_bytes(512) + 2 * 64 * 16 * 4
    assert peak < 1024**2  # and not the process's whole heap: a few hundred KiB here


def test_the_emulated_card_counts_for_the_first_steps_then_steps_are_plain(tmp_path: Path) -> None:
    proc, hook_file = run_hooked(tmp_path, "6", env={"AUTOTUNE_EMULATED_VRAM_GB": "1"})
    assert proc.returncode == 0, proc.stderr
    steps = [r for r in events(hook_file) if r["event"] == "step"]
    assert [r["counted"] for r in steps] == [True] * 3 + [False] * 3
    assert len({r["max_memory_reserved_gb"] for r in steps[2:]}) == 1  # the peak stays as counted


def test_past_the_emulated_card_the_script_dies_of_torchs_own_oom(tmp_path: Path) -> None:
    from autotune.core.outcome import Outcome, explain

    small = str(3 * _model_bytes(2048) / 1024**3)  # the weights fit, AdamW's state does not
    proc, hook_file = run_hooked(tmp_path, "3", "--hidden", "2048", env={"AUTOTUNE_EMULATED_VRAM_GB": small})
    assert proc.returncode == 1
    assert "torch.OutOfMemoryError: CUDA out of memory." in proc.stderr
    outcome = explain(
        proc.returncode,
        None,
        timed_out=False,
        stalled=False,
        interrupted=False,
        output=proc.stdout + proc.stderr,
        metrics=None,
    ).outcome
    assert outcome is Outcome.OOM
    exit_line = events(hook_file)[-1]
    assert exit_line["event"] == "exit" and exit_line["exception"].startswith("torch.OutOfMemoryError")
    plain, _ = run_hooked(tmp_path, "3", "--hidden", "2048")  # no card: the same script runs
    assert plain.returncode == 0, plain.stderr


def test_spawned_data_loader_workers_do_not_count_against_the_card(tmp_path: Path) -> None:
    """Workers started with spawn import torch (and the hook) afresh: only the training process
    has the card, so a card too small for the workers' own tensors is never theirs to break."""
    code = (
        "import sys, runpy, torch.multiprocessing as mp\n"
        "mp.set_start_method('spawn', force=True)\n"
        f"sys.argv = [{str(SCRIPT)!r}, '4', '--data', '10', '--batch', '4', '--workers', '1']\n"
        f"runpy.run_path({str(SCRIPT)!r}, run_name='__main__')\n"
    )
    hook_file = tmp_path / "hook.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_")}
    env.update(
        {"PYTHONPATH": str(HOOK_DIR), "AUTOTUNE_HOOK_FILE": str(hook_file), "AUTOTUNE_EMULATED_VRAM_GB": "1"}
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=180)
    assert proc.returncode == 0, proc.stderr
    records = events(hook_file)
    cards = [r for r in records if r["event"] == "card"]
    assert len(cards) == 1  # the trainer's own; the spawned worker made none
    assert [r["samples"] for r in records if r["event"] == "step"] == [4, 4, 2, 4]
