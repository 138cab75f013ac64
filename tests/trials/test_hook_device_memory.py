"""The hook's emulated card counts what a GPU run would hold on the device, not host-held data.

The subject keeps its whole dataset (32 MiB) in CPU tensors and a host-only "decoder" it never
runs; on a GPU only the model, its gradients, AdamW's state, the activations and one batch reach the
device (well under 1 MiB here).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import FAKES, REPO

HOOK_DIR = REPO / "trials" / "hook"
SCRIPT = FAKES / "host_data_train.py"
MIB = 2**20

pytest.importorskip("torch")
pytestmark = [pytest.mark.torch, pytest.mark.untimed]  # untimed: scripts/test.sh runs it on two workers

MODEL_BYTES = 4 * (256 * 64 + 64 + 64 * 10 + 10)


def run(tmp_path: Path, *args: str, vram_mib: float, steps: str = "3") -> tuple[Any, list[dict[str, Any]]]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    hook_file = tmp_path / "hook.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_")}
    env.update(
        {
            "PYTHONPATH": str(HOOK_DIR),
            "AUTOTUNE_HOOK_FILE": str(hook_file),
            "AUTOTUNE_EMULATED_VRAM_GB": str(vram_mib / 1024),
            "AUTOTUNE_EMULATED_COUNT_STEPS": "0",
        }
    )
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), steps, *args], capture_output=True, text=True, env=env, timeout=120
    )
    records = [json.loads(line) for line in hook_file.read_text(encoding="utf-8").splitlines()]
    return proc, records


def _peak(records: list[dict[str, Any]]) -> float:
    return max(r["max_memory_reserved_gb"] for r in records if r["event"] == "step") * 1024**3


@pytest.mark.parametrize("feed", ["loader", "slices", "index"])
def test_a_dataset_held_in_cpu_tensors_is_not_on_the_card(tmp_path: Path, feed: str) -> None:
    # An 8 MiB card: the 32 MiB dataset and the 16 MiB host decoder would not fit on it; training does.
    proc, records = run(tmp_path, "--feed", feed, "--data-mib", "32", "--decoder-mib", "16", vram_mib=8)
    assert proc.returncode == 0, proc.stderr
    peak = _peak(records)
    # the weights, their gradients and AdamW's two moments, at least
    assert peak >= 4 * MODEL_BYTES
    assert peak < 1 * MIB  # and not the dataset (32 MiB) or the decoder (16 MiB)
    card = next(r for r in records if r["event"] == "card")
    assert "host-held data left out" in card["note"]


def test_the_batch_and_activations_still_count(tmp_path: Path) -> None:
    """A batch 64x larger is 64x the batch bytes more on the card: batches are device memory."""
    small = _peak(run(tmp_path / "a", "--batch", "8", vram_mib=64)[1])
    large = _peak(run(tmp_path / "b", "--batch", "512", vram_mib=64)[1])
    batch_bytes = 504 * (256 * 4 + 8)  # the extra rows of features and labels
    assert large - small >= batch_bytes


def test_training_that_does_not_fit_still_dies_of_a_real_oom(tmp_path: Path) -> None:
    # A card smaller than the model's weights, gradients and AdamW moments.
    proc, records = run(tmp_path, "--data-mib", "1", vram_mib=3 * MODEL_BYTES / MIB)
    assert proc.returncode == 1
    assert "torch.OutOfMemoryError: CUDA out of memory." in proc.stderr
    assert records[-1]["event"] == "exit" and records[-1]["exception"].startswith("torch.OutOfMemoryError")


def test_a_script_that_never_trains_puts_nothing_on_the_card(tmp_path: Path) -> None:
    """No module forward, no optimizer step: nothing reached the device, so no peak (not 0)."""
    hook_file = tmp_path / "hook.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_")}
    env.update(
        {"PYTHONPATH": str(HOOK_DIR), "AUTOTUNE_HOOK_FILE": str(hook_file), "AUTOTUNE_EMULATED_VRAM_GB": "1"}
    )
    code = "import torch; x = torch.randn(1 << 20); print(float(x.sum()))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    exit_line = [json.loads(line) for line in hook_file.read_text(encoding="utf-8").splitlines()][-1]
    assert exit_line["event"] == "exit" and exit_line["max_memory_reserved_gb"] is None
