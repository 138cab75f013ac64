"""A baseline's numeric knob values the trainer could not run with either are refused up front.

``batch_size: -3``, ``big``, ``.nan``, ``0``, ``true``, a negative block swap, an offload share of
1.5: exit 2 naming the file, the key (or flag), the value and the fix, before a study exists,
for every adapter that reads numbers from a baseline (ltx2 YAML, sana flags, musubi's command
flags and dataset TOML, diffusion-pipe TOML, ai-toolkit YAML). Before, most of them ended in
"internal error: ValueError" (exit 1), and some wrote a study first.
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from autotune.cli import main
from autotune.errors import ConfigError
from tests.cli.test_bad_input import _MINIMAL_LTX2
from tests.musubi_setup import make_setup
from tests.trainers.aitoolkit.test_trainer_aitoolkit import FAKE as AITK_FAKE
from tests.trainers.aitoolkit.test_trainer_aitoolkit import JOB
from tests.trainers.dpipe.test_trainer_dpipe import FAKE_DIR as DPIPE_FAKE
from tests.trainers.dpipe.test_trainer_dpipe import write_dpipe_setup
from tests.trainers.sana.test_trainer_sana import _baseline_yaml

KNOBS = {"knobs": [{"name": "batch_size", "type": "int"}, {"name": "swap", "type": "count"},
                   {"name": "share", "type": "fraction"}, {"name": "optimizer", "values": ["a", "b"]}]}  # fmt: skip
GOOD: dict[str, Any] = {
    "batch_size": 2,
    "swap": 0,
    "share": 0.5,
    "optimizer": "a",
    "gradient_accumulation_steps": 1,
}


@pytest.mark.parametrize(
    ("param", "value", "need"),
    [
        ("batch_size", -3, "at least 1"),
        ("batch_size", 0, "at least 1"),
        ("batch_size", "big", "whole number"),
        ("batch_size", math.nan, "whole number"),
        ("batch_size", math.inf, "whole number"),
        ("batch_size", True, "whole number"),
        ("batch_size", 2.5, "whole number"),
        ("batch_size", None, "whole number"),
        ("gradient_accumulation_steps", -1, "at least 1"),
        ("swap", -3, "at least 0"),
        ("swap", 1.5, "whole number"),
        ("share", 1.5, "from 0 to 1"),
        ("share", math.nan, "from 0 to 1"),
        ("share", "half", "from 0 to 1"),
    ],
)
def test_bad_numbers_are_named_with_where_and_the_fix(param: str, value: Any, need: str) -> None:
    from autotune.config.knobs import check_baseline_values

    with pytest.raises(ConfigError) as err:
        check_baseline_values({**GOOD, param: value}, KNOBS, lambda p: f"run.yaml: section.{p}")
    msg = str(err.value)
    assert msg.startswith(f"run.yaml: section.{param} is ")
    assert need in msg and "run again" in msg


def test_good_numbers_and_choices_pass() -> None:
    from autotune.config.knobs import check_baseline_values

    check_baseline_values({**GOOD, "swap": 8.0, "share": 1, "optimizer": "anything"}, KNOBS, str)


def _ltx2(t: Path, value: str) -> list[str]:
    (t / "c.yaml").write_text(_MINIMAL_LTX2.replace("  batch_size: 1", f"  batch_size: {value}"))
    return ["--trainer", "ltx2", "--config", f"{t}/c.yaml"]


def _aitk(t: Path, value: str, key: str = "batch_size") -> list[str]:
    job = JOB.replace("batch_size: 1", f"batch_size: {value}") if key == "batch_size" else JOB
    if key == "offload":
        job = job.replace("low_vram: true", f"low_vram: true\n        layer_offloading: true\n        layer_offloading_transformer_percent: {value}")  # fmt: skip
    (t / "job.yaml").write_text(job)
    return ["--trainer", "ai-toolkit", "--config", f"{t}/job.yaml", "--trainer-dir", str(AITK_FAKE),
            "--trainer-python", sys.executable]  # fmt: skip


def _dpipe(t: Path, value: str, key: str = "micro_batch_size_per_gpu") -> list[str]:
    path = write_dpipe_setup(t)
    text = re.sub(rf"^{key} = .*$", f"{key} = {value}", path.read_text(), flags=re.M)
    path.write_text(text)
    return ["--trainer", "diffusion-pipe", "--config", str(path), "--trainer-dir", str(DPIPE_FAKE),
            "--trainer-python", sys.executable]  # fmt: skip


def _sana(t: Path, value: str) -> list[str]:
    path = _baseline_yaml(t)
    path.write_text(path.read_text().replace("--train_batch_size=1", f"--train_batch_size={value}"))
    return ["--trainer", "sana", "--config", str(path)]


def _musubi_dataset(t: Path, value: str) -> list[str]:
    script = make_setup(t / "mu")
    dataset = t / "mu" / "dataset.toml"
    dataset.write_text(re.sub(r"batch_size = \d+", f"batch_size = {value}", dataset.read_text()))
    return ["--trainer", "musubi", "--config", str(script)]


def _musubi_flag(t: Path, flag: str, value: str) -> list[str]:
    return ["--trainer", "musubi", "--config", str(make_setup(t / "mu", extra=f"{flag} {value}"))]


CASES = [
    ("ltx2 -3", lambda t: _ltx2(t, "-3"), "c.yaml: optimization.batch_size is -3"),
    ("ltx2 big", lambda t: _ltx2(t, "big"), "c.yaml: optimization.batch_size is 'big'"),
    ("ltx2 .nan", lambda t: _ltx2(t, ".nan"), "c.yaml: optimization.batch_size is nan"),
    ("ltx2 true", lambda t: _ltx2(t, "true"), "c.yaml: optimization.batch_size is True"),
    ("aitk -3", lambda t: _aitk(t, "-3"), "job.yaml: config.process.0.train.batch_size is -3"),
    ("aitk .nan", lambda t: _aitk(t, ".nan"), "job.yaml: config.process.0.train.batch_size is nan"),
    ("aitk offload 1.5", lambda t: _aitk(t, "1.5", "offload"), "layer_offloading_transformer_percent is 1.5"),
    ("aitk offload .nan", lambda t: _aitk(t, ".nan", "offload"), "layer_offloading_transformer_percent is nan"),
    ("dpipe big", lambda t: _dpipe(t, "'big'"), "wan.toml: micro_batch_size_per_gpu is 'big'"),
    ("dpipe nan", lambda t: _dpipe(t, "nan"), "wan.toml: micro_batch_size_per_gpu is nan"),
    ("dpipe swap -3", lambda t: _dpipe(t, "-3", "blocks_to_swap"), "wan.toml: blocks_to_swap is -3"),
    ("dpipe ga 0", lambda t: _dpipe(t, "0", "gradient_accumulation_steps"), "gradient_accumulation_steps is 0"),
    ("sana -3", lambda t: _sana(t, "-3"), "sana.yaml: --train_batch_size is -3"),
    ("sana big", lambda t: _sana(t, "big"), "sana.yaml: --train_batch_size is 'big'"),
    ("musubi dataset -3", lambda t: _musubi_dataset(t, "-3"), "dataset.toml: datasets[0]: batch_size is -3"),
    ("musubi dataset nan", lambda t: _musubi_dataset(t, "nan"), "dataset.toml: datasets[0]: batch_size is nan"),
    ("musubi swap -3", lambda t: _musubi_flag(t, "--blocks_to_swap", "-3"), "train.sh: --blocks_to_swap is -3"),
    ("musubi ga big", lambda t: _musubi_flag(t, "--gradient_accumulation_steps", "big"), "train.sh: --gradient_accumulation_steps is 'big'"),
]  # fmt: skip


@pytest.mark.parametrize(("make", "expect"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_every_adapter_refuses_a_bad_baseline_number_with_exit_2(
    make: Any, expect: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["sweep", *make(tmp_path), "--workdir", str(tmp_path / "runs"), "--vram-gb", "80"]
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.startswith("error: ") and "internal error" not in err, err
    assert expect in err and "run again" in err, err
    assert not (tmp_path / "runs" / "studies.db").exists()  # refused before a study was made
