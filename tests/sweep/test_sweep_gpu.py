"""The sweep's GPU path with NVML faked at its one seam: the card it judges, the drain, the tier gate."""

from __future__ import annotations

import io
import shlex
import sys
from pathlib import Path

import pytest

from autotune.errors import GpuBusyError, UnsupportedCardError
from autotune.sweep.api import run_sweep
from autotune.sweep.options import SweepOptions
from tests.fake_nvml import RTX4090, FakeNvml
from tests.helpers import FAKES

TEMPLATE = (
    f"{shlex.quote(sys.executable)} {shlex.quote(str(FAKES / 'sweep_trainer.py'))} "
    "{quantization} {optimizer} {batch_size} {gradient_checkpointing} {steps}"
)


class DrainingNvml(FakeNvml):
    """A card whose used memory reads high right after each trial, then drains; counts the reads."""

    def __init__(self, *, stuck: bool = False) -> None:
        super().__init__([("NVIDIA Fake 16GB", 16.0)])
        self.reads = 0
        self.stuck = stuck

    def memory_used_bytes(self, index: int) -> int:
        self.reads += 1
        if self.stuck and self.reads > 1:
            return 12 * 1024**3  # held by a process that outlived its trial
        return 0


@pytest.fixture
def fake_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("SWEEP_FAKE_SLEEP_S", "0.02")
    monkeypatch.setenv("SWEEP_FAKE_CARD_GB", "16")
    monkeypatch.setenv("SWEEP_FAKE_LAUNCHES", str(tmp_path / "launches.jsonl"))
    return tmp_path


def test_the_smallest_visible_gpu_is_the_card_and_it_drains_between_trials(fake_env: Path) -> None:
    nvml = DrainingNvml()
    out = io.StringIO()
    opts = SweepOptions(
        trainer="command", cmd=TEMPLATE, workdir=fake_env / "runs", steps=20, max_batch_size=2, max_trials=3
    )
    result = run_sweep(opts, stream=out, tty=False, nvml=nvml, claims=False)
    assert result.trials_run == 3 and result.stop_reason == "max-trials (3) reached"
    text = out.getvalue()
    assert "card NVIDIA Fake 16GB (16.00 GB): fits at <= 14.40 GB (10% headroom)" in text
    assert nvml.reads >= 2 * 3  # before and after every trial


def test_a_card_that_does_not_drain_stops_the_sweep_naming_it(fake_env: Path) -> None:
    opts = SweepOptions(
        trainer="command",
        cmd=TEMPLATE,
        workdir=fake_env / "runs",
        steps=20,
        max_batch_size=2,
        drain_timeout_s=0.5,
    )
    with pytest.raises(GpuBusyError):
        run_sweep(opts, stream=io.StringIO(), tty=False, nvml=DrainingNvml(stuck=True), claims=False)
    assert len((fake_env / "launches.jsonl").read_text().splitlines()) == 1  # no trial ran into a busy card


def test_ltx2_below_32gb_is_refused_unless_forced(ltx2_fixtures: Path, tmp_path: Path) -> None:
    config = ltx2_fixtures / "t2v_lora_low_vram.yaml"
    opts = SweepOptions(trainer="ltx2", config=config, workdir=tmp_path / "runs")
    with pytest.raises(UnsupportedCardError, match=r"requires a 32 GB card.*--force"):
        run_sweep(opts, stream=io.StringIO(), tty=False, nvml=FakeNvml([RTX4090]), claims=False)
    assert not (tmp_path / "runs").exists()
