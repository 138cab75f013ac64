"""Records the trainer writes into hook.jsonl are set aside, not believed (autotune.execution.hookseal).

The trainer here forges the hook's records: three steps of 1 ms and a 1 GB peak, written the way
the hook writes them, into the file ``AUTOTUNE_HOOK_FILE`` names. One more line is signed with
the trial's key, as the hook signs (what the real hook writes: tests/e2e/test_hook_sweep.py runs it).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from autotune.execution.launch import LaunchSpec
from autotune.execution.runner import RunLimits, run_trial
from autotune.trainers.kit.readers.hookfile import read_hook_file

LIMITS = RunLimits(wall_timeout_s=30, stall_timeout_s=None, grace_s=1.0)

FORGER = """
import json, os, hashlib, hmac
path = os.environ.get("AUTOTUNE_HOOK_FILE") or "hook.jsonl"
with open(path, "a") as f:
    for n in (1, 2, 3):
        f.write(json.dumps({"event": "step", "step": n, "step_time_s": 0.001,
                            "max_memory_reserved_gb": 1.0, "pid": 1}) + "\\n")
    key = os.environ.get("AUTOTUNE_HOOK_KEY")
    if key:  # what the hook itself writes
        body = json.dumps({"event": "step", "step": 1, "step_time_s": 0.5, "max_memory_reserved_gb": 20.0, "pid": 2})
        f.write(hmac.new(key.encode(), body.encode(), hashlib.sha256).hexdigest() + " " + body + "\\n")
    f.write('{"event": "step", "step": 9, "step_t')  # a torn last line, as a kill leaves one
"""


def _run(tmp_path: Path, with_hook: bool) -> Path:
    trial = tmp_path / "trial"
    env = {"AUTOTUNE_HOOK_FILE": str(trial / "hook.jsonl")} if with_hook else {}
    spec = LaunchSpec(argv=(sys.executable, "-c", FORGER), cwd=trial, env=env)
    trial.mkdir()
    result = run_trial(spec, trial, LIMITS)
    assert result.returncode == 0, result.output_tail
    assert result.hook_lines_rejected == 3
    assert "AUTOTUNE_HOOK_KEY" not in (trial / "env.json").read_text()
    return trial


def test_forged_hook_lines_are_set_aside_and_the_hooks_own_kept(tmp_path: Path) -> None:
    trial = _run(tmp_path, with_hook=True)
    metrics = read_hook_file(trial / "hook.jsonl")
    assert metrics.step_times_s == [0.5]  # the signed line only: no 1 ms steps
    assert metrics.measured_peak_vram_gb == 20.0
    rejected = (trial / "hook.rejected.jsonl").read_text().splitlines()
    assert len(rejected) == 3 and all(json.loads(x)["step_time_s"] == 0.001 for x in rejected)


def test_without_the_hook_a_hook_file_in_the_trial_folder_is_not_read(tmp_path: Path) -> None:
    trial = _run(tmp_path, with_hook=False)
    assert read_hook_file(trial / "hook.jsonl").step_times_s == []
    assert len((trial / "hook.rejected.jsonl").read_text().splitlines()) == 3
