"""The reference trainer, for real: training on CPU, LTX-2 output, exact memory, every knob, OOM."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import REPO
from trials.reference.config import DataShape, ModelShape, TrainConfig, parse_config

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.torch, pytest.mark.untimed]  # untimed: scripts/test.sh runs it on two workers

from trials.reference.memory import EmulatedCard, format_size  # noqa: E402
from trials.reference.train import run, statistics_block, step_line  # noqa: E402

MIB = 2**20

# The LTX-2 trainer's output, as LTX2-TRAINER.md gives it (what the ltx2 adapter parses).
STEP_RE = re.compile(
    r"^Step (\d+)/(\d+) - Loss: (nan|-?\d+\.\d{4}), LR: (\d\.\d{2}e[+-]\d{2}), "
    r"Time/Step: (\d+\.\d{2})s, Total Time: (\d+)h (\d+)m$"
)
STATS_RE = re.compile(
    r"📊 Training Statistics:\n"
    r" - Total time: (\d+\.\d) minutes\n"
    r" - Training speed: (\d+\.\d{2}) steps/second\n"
    r" - Samples/second: (\d+\.\d{2})\n"
    r" - Peak GPU memory: (\d+\.\d{2}) GB"
)


def tiny(**changes: Any) -> TrainConfig:
    """A model small enough to train in well under a second, big enough for every knob to show."""
    base = TrainConfig(
        lora_rank=32,
        lora_alpha=32,
        steps=3,
        batch_size=2,
        optimizer="adamw",
        checkpointing=False,
        quantization=None,
        mixed_precision="no",
        device="cpu",
        log_interval=1,
        warmup_steps=1,
        memory_steps=3,
        threads=1,  # as the baselines: extra threads spin against the rest of a busy test machine
        model=ModelShape(hidden_dim=128, depth=3, heads=2, mlp_ratio=4, patch_size=(1, 2, 2)),
        data=DataShape(num_samples=8, channels=8, frames=2, height=8, width=8, text_tokens=8, text_dim=64),
    )
    return dataclasses.replace(base, **changes)


def peak(cfg: TrainConfig) -> int:
    metrics = run(cfg, progress_bars=False)
    return round(metrics["peak_vram_gb"] * 2**30)


# -- output formats ---------------------------------------------------------------------------------


def test_step_line_matches_ltx2_format() -> None:
    assert step_line(20, 50, 0.1234, 1e-4, 1.234, 61) == (
        "Step 20/50 - Loss: 0.1234, LR: 1.00e-04, Time/Step: 1.23s, Total Time: 0h 1m"
    )
    assert step_line(3, 9, math.nan, 5e-5, 0.5, 3700).startswith("Step 3/9 - Loss: nan, LR: 5.00e-05")
    assert STEP_RE.match(step_line(3, 9, math.nan, 5e-5, 0.5, 3700))


def test_statistics_block_matches_ltx2_format() -> None:
    block = statistics_block(738.0, 0.4321, 0.4321, 45.678)
    assert block == (
        "📊 Training Statistics:\n - Total time: 12.3 minutes\n - Training speed: 0.43 steps/second\n"
        " - Samples/second: 0.43\n - Peak GPU memory: 45.68 GB"
    )


@pytest.mark.parametrize(
    ("nbytes", "text"),
    [(512, "512 bytes"), (2048, "2.00 KiB"), (3 * MIB, "3.00 MiB"), (int(1.5 * 2**30), "1.50 GiB")],
)
def test_sizes_are_worded_like_torch(nbytes: int, text: str) -> None:
    assert format_size(nbytes) == text


# -- the emulated card ------------------------------------------------------------------------------


def test_card_counts_storages_once_and_frees_them() -> None:
    card = EmulatedCard(None)
    with card:
        a = torch.empty(MIB, dtype=torch.uint8)
        assert card.live == MIB
        view = a[10:]  # a view shares the storage: not counted again
        b = a.view(2, -1).t()
        assert card.live == MIB
        c = torch.ones(256, 1024, dtype=torch.float32)  # 1 MiB more
        assert card.live == 2 * MIB
        del a, view, b
        assert card.live == MIB  # storage freed with its last view
        del c
        assert card.live == 0
    assert card.peak == 2 * MIB


def test_card_counts_tensors_made_before_it() -> None:
    model = torch.nn.Linear(256, 256)  # 256*256*4 + 256*4 bytes
    card = EmulatedCard(None)
    with card:
        card.adopt_module(model)
        assert card.live == 256 * 256 * 4 + 256 * 4


def test_card_raises_a_real_oom_at_the_allocation_that_passes_it() -> None:
    card = EmulatedCard(3 * MIB)
    with card:
        keep = torch.zeros(MIB, dtype=torch.uint8)
        with pytest.raises(torch.OutOfMemoryError) as err:
            torch.zeros(4 * MIB, dtype=torch.uint8)
        assert card.live == MIB  # the failed allocation is not counted
        del keep
    message = str(err.value)
    assert message.startswith(
        "CUDA out of memory. Tried to allocate 4.00 MiB. GPU 0 has a total capacity of 3.00 MiB"
    )
    assert "of which 2.00 MiB is free" in message
    assert "emulated card on CPU" in message


# -- training, in process (tiny model) --------------------------------------------------------------


def test_trains_on_cpu_and_the_loss_goes_down(capsys: pytest.CaptureFixture[str]) -> None:
    metrics = run(
        tiny(steps=20, learning_rate=2e-3, scheduler="constant", log_interval=10), progress_bars=False
    )
    out = capsys.readouterr().out
    assert [m.group(1) for m in map(STEP_RE.match, out.splitlines()) if m] == ["10", "20"]
    losses = metrics["losses"]
    assert len(losses) == len(metrics["step_times_s"]) == 20
    assert sum(losses[-5:]) < sum(losses[:5])
    assert STATS_RE.search(out)


def test_same_seed_same_losses() -> None:
    first = run(tiny(), progress_bars=False)
    second = run(tiny(), progress_bars=False)
    assert first["losses"] == second["losses"]
    assert first["peak_vram_gb"] == second["peak_vram_gb"]


def test_counting_a_few_steps_finds_the_peak_of_counting_all() -> None:
    """Later steps repeat the same allocations: stopping the counter early loses nothing."""
    assert peak(tiny(steps=6, memory_steps=3)) == peak(tiny(steps=6, memory_steps=None))


# One test per knob: the memory moves the way it does in real trainers, by the expected amount.


def test_gradient_checkpointing_lowers_activation_memory() -> None:
    on, off = peak(tiny(batch_size=4, checkpointing=True)), peak(tiny(batch_size=4, checkpointing=False))
    print(f"batch 4: checkpointing {on / MIB:.2f} MiB, without {off / MIB:.2f} MiB")
    assert on < off * 0.9


def test_int8_quantization_lowers_weight_memory() -> None:
    cfg = tiny()
    int8, full = peak(dataclasses.replace(cfg, quantization="int8-quanto")), peak(cfg)
    # The blocks' Linear weights go from 4 bytes to 1 byte per element (plus a scale per row).
    d, depth, mlp = cfg.model.hidden_dim, cfg.model.depth, cfg.model.mlp_ratio
    block_weights = depth * (8 * d * d + 2 * mlp * d * d)
    print(
        f"int8 {int8 / MIB:.2f} MiB, none {full / MIB:.2f} MiB, expected saving {3 * block_weights / MIB:.2f} MiB"
    )
    # At the peak one Linear's weight is dequantized to fp32 for its matmul, so a little less is saved.
    assert 0.75 * 3 * block_weights < full - int8 <= 3 * block_weights


def test_8bit_adamw_lowers_optimizer_state_memory() -> None:
    cfg = tiny()
    eight, adamw = peak(dataclasses.replace(cfg, optimizer="adamw8bit")), peak(cfg)
    # LoRA on 8 projections per block: 2 states x (4 - 1) bytes saved per trainable element.
    trainable = cfg.model.depth * 8 * 2 * cfg.model.hidden_dim * cfg.lora_rank
    print(
        f"adamw8bit {eight / MIB:.2f} MiB, adamw {adamw / MIB:.2f} MiB, expected saving {6 * trainable / MIB:.2f} MiB"
    )
    assert adamw - eight == pytest.approx(6 * trainable, rel=0.1)


def test_batch_size_raises_activation_memory_linearly() -> None:
    b1, b2, b4 = (peak(tiny(batch_size=b)) for b in (1, 2, 4))
    print(f"batch 1/2/4: {b1 / MIB:.2f} / {b2 / MIB:.2f} / {b4 / MIB:.2f} MiB")
    assert b1 < b2 < b4
    assert (b4 - b2) == pytest.approx(2 * (b2 - b1), rel=0.15)


def test_gradient_accumulation_costs_one_micro_batch_plus_the_kept_gradients() -> None:
    cfg = tiny(batch_size=2)
    accum, b2, b4 = (
        peak(dataclasses.replace(cfg, grad_accum=2)),
        peak(cfg),
        peak(dataclasses.replace(cfg, batch_size=4)),
    )
    grads = cfg.model.depth * 8 * 2 * cfg.model.hidden_dim * cfg.lora_rank * 4  # fp32 LoRA gradients
    print(f"batch 2x2 {accum / MIB:.2f} MiB, batch 2 {b2 / MIB:.2f} MiB, batch 4 {b4 / MIB:.2f} MiB")
    assert b2 <= accum <= b2 + 2 * grads < b4


def test_full_training_makes_every_weight_trainable_and_needs_more_memory() -> None:
    full = run(tiny(training_mode="full"), progress_bars=False)
    lora = run(tiny(), progress_bars=False)
    assert full["peak_vram_gb"] > 1.5 * lora["peak_vram_gb"]


def test_target_modules_that_match_nothing_are_an_error() -> None:
    with pytest.raises(ValueError, match="matched no module"):
        run(tiny(lora_targets=("to_nothing",)), progress_bars=False)


# -- as a subprocess, like autotune runs it ---------------------------------------------------------


def _trial(tmp_path: Path, **changes: Any) -> subprocess.CompletedProcess[str]:
    data = yaml.safe_load((REPO / "configs" / "reference" / "low_vram.yaml").read_text(encoding="utf-8"))
    for path, value in changes.items():
        *parents, last = path.split("__")
        node = data
        for key in parents:
            node = node[key]
        node[last] = value
    data["output_dir"] = str(tmp_path / "out")
    parse_config(data)  # a typo in a test should fail here, not look like a trainer failure
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(data), encoding="utf-8")
    env = {**os.environ, "AUTOTUNE_METRICS_FILE": str(tmp_path / "metrics.json"), "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [sys.executable, "-m", "trials.reference", str(config), "--disable-progress-bars"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=300,
        check=False,
    )


def test_baseline_trial_prints_ltx2_lines_and_writes_metrics(tmp_path: Path) -> None:
    proc = _trial(tmp_path, optimization__steps=6, reference__log_interval=2)
    assert proc.returncode == 0, proc.stderr
    steps = [m for m in map(STEP_RE.match, proc.stdout.splitlines()) if m]
    assert [(m.group(1), m.group(2)) for m in steps] == [("2", "6"), ("4", "6"), ("6", "6")]
    stats = STATS_RE.search(proc.stdout)
    assert stats, proc.stdout
    metrics = json.loads((tmp_path / "metrics.json").read_text(encoding="utf-8"))
    assert len(metrics["step_times_s"]) == len(metrics["losses"]) == 6
    assert metrics["peak_vram_gb"] == pytest.approx(float(stats.group(4)), abs=0.005)
    assert metrics["peak_vram_gb"] < 0.0275 * 0.9  # the baseline fits its emulated card, with headroom
    assert metrics["samples_per_s"] == pytest.approx(1 / metrics["step_time_s"])
    assert metrics["loss"] == metrics["losses"][-1]
    assert list((tmp_path / "out" / "checkpoints").glob("lora_weights_step_00006.pt"))


def test_over_the_emulated_card_dies_of_a_real_oom(tmp_path: Path) -> None:
    proc = _trial(
        tmp_path,
        optimization__steps=3,
        optimization__batch_size=8,
        optimization__enable_gradient_checkpointing=False,
    )
    assert proc.returncode == 1
    assert "📊 Training Statistics:" not in proc.stdout
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ")
    assert "GPU 0 has a total capacity of 28.16 MiB of which" in last
    assert "(emulated card on CPU" in last
    assert "Traceback (most recent call last):" in proc.stderr
    assert "trials/reference/model.py" in proc.stderr  # raised inside the model, at the allocation
    assert not (tmp_path / "metrics.json").exists()
