"""A whole sweep over a plain PyTorch script through --cmd on CPU, with the hook's emulated card.

The script (``tests/fakes/plain_torch_train.py --quiet``) prints only ``done``: no time, no memory,
no loss, no metrics file. Everything the sweep knows comes from the hook: step times, the card's counted
peaks, OOMs past the ``--vram-gb`` card, the data loader's real batch, a diverging loss.
"""

from __future__ import annotations

import io
import json
import shlex
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

from autotune.errors import BaselineFailedError
from autotune.sweep.api import run_sweep
from autotune.sweep.options import SweepOptions
from tests.helpers import FAKES

pytest.importorskip("torch")
pytestmark = [pytest.mark.torch, pytest.mark.process]

SCRIPT = FAKES / "plain_torch_train.py"
#: SGD on a 16-4096-1 MLP over 64 items: batch 1-16 peak at 0.6-1.1 MiB, batch 32 at 1.8 MiB.
CARD_GB = 1.5 / 1024


def _attrs(db: Path) -> list[dict[str, Any]]:
    conn = sqlite3.connect(db)
    try:
        out = []
        for (trial_id,) in conn.execute("SELECT trial_id FROM trials ORDER BY number"):
            rows = conn.execute(
                "SELECT key, value_json FROM trial_user_attributes WHERE trial_id=?", (trial_id,)
            )
            out.append({k: json.loads(v) for k, v in rows})
        return out
    finally:
        conn.close()


def _sweep(tmp_path: Path, extra: str, **opts: Any) -> tuple[list[dict[str, Any]], str]:
    knobs = tmp_path / "knobs.yaml"
    # Only the batch moves (the template names no other knob; the baseline's values stay put).
    knobs.write_text(
        "knobs:\n  - {name: quantization, values: [int8-quanto]}\n  - {name: optimizer, values: [adamw8bit]}\n"
        "  - {name: batch_size, type: int}\n  - {name: gradient_checkpointing, values: [true]}\n",
        encoding="utf-8",
    )
    template = (
        f"{shlex.quote(sys.executable)} {shlex.quote(str(SCRIPT))} {{steps}} --data 64 "
        f"--batch {{batch_size}} --hidden 4096 --optimizer sgd --lr 1e-5 --threads 1 --quiet {extra}"
    )
    out = io.StringIO()
    run_sweep(
        SweepOptions(
            trainer="command",
            cmd=template,
            workdir=tmp_path / "runs",
            study="hooked",
            knob_file=knobs,
            steps=40,
            max_batch_size=32,
            vram_gb=CARD_GB,
            **opts,
        ),
        nvml=False,
        stream=out,
        tty=False,
    )
    return _attrs(tmp_path / "runs" / "studies.db"), out.getvalue()


@pytest.mark.timeout(600)
def test_a_plain_script_sweeps_on_the_emulated_card(tmp_path: Path) -> None:
    trials, log = _sweep(tmp_path, "", max_trials=6)
    assert (
        "card counted: the trial-side hook counts the tensor storage a GPU run would hold on the device"
        in log
    )
    ok = [t for t in trials if t.get("outcome") == "ok"]
    ooms = [t for t in trials if t.get("outcome") == "oom"]
    assert ok and ooms, log
    for t in ok:  # measured by the hook: the script prints neither
        assert t["step_time_s"] > 0 and 0 < t["peak_vram_gb"] <= CARD_GB
    report = (tmp_path / "runs" / "hooked" / "report.md").read_text(encoding="utf-8")
    assert (
        "**Emulation:** counted: the trial-side hook counts the tensor storage a GPU run would hold on the device"
        in report
    )


@pytest.mark.timeout(300)
def test_a_diverging_loss_is_caught_as_nan(tmp_path: Path) -> None:
    with pytest.raises(BaselineFailedError, match="failed with outcome nan: loss went NaN"):
        _sweep(tmp_path, "--lr 1e9", max_trials=1)  # judged although --max-trials is reached
    trials = _attrs(tmp_path / "runs" / "studies.db")
    assert [t.get("outcome") for t in trials] == ["nan"]
