"""The hook as the adapters and the sweep use it: on by default, first on PYTHONPATH (keeping what
was there), the --vram-gb card it emulates (and how the card is named and described), and the
samples/s it credits from the data loader's real batches."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.sweep.options import SweepOptions, options_from_attr, options_to_attr
from autotune.sweep.setup import emulation_note, pick_card
from autotune.trainers import adapter_class, adapter_names, get_adapter
from autotune.trainers.base import Baseline
from autotune.trainers.kit.common import hook_dir
from autotune.trainers.kit.readers.hookfile import read_hook_file
from tests.fake_nvml import FakeNvml
from tests.helpers import FAKES

SCRIPT = FAKES / "plain_torch_train.py"
HOOK = str(hook_dir())


def test_every_pytorch_trainer_takes_the_hook_and_has_it_on_by_default() -> None:
    assert [n for n in adapter_names() if adapter_class(n).traits.takes_hook] == adapter_names()
    assert get_adapter("command", template="python t.py").hook
    assert get_adapter("sana").hook and get_adapter("reference").hook
    assert not get_adapter("command", template="python t.py", hook=False).hook
    with pytest.raises(Exception, match="hook must be true or false"):
        get_adapter("sana", hook="no")


def test_the_hook_goes_first_and_keeps_the_baselines_pythonpath(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", "/from/the/user")
    config = tmp_path / "sana.yaml"
    config.write_text(
        f"script: {FAKES / 'fake_sana_train.py'}\nlauncher: [{sys.executable}]\n"
        "args: [--train_batch_size=1]\nenv: {PYTHONPATH: /from/the/baseline}\n",
        encoding="utf-8",
    )
    adapter = get_adapter("sana")
    spec = adapter.render(
        adapter.load_baseline(config), {}, gradient_accumulation_steps=1, steps=2, trial_dir=tmp_path / "t"
    )
    assert spec.env["PYTHONPATH"] == os.pathsep.join([HOOK, "/from/the/baseline"])
    command = get_adapter("command", template="python t.py {steps}")
    spec = command.render(
        command.load_baseline(None), {}, gradient_accumulation_steps=1, steps=2, trial_dir=tmp_path / "c"
    )
    assert spec.env["PYTHONPATH"] == os.pathsep.join([HOOK, "/from/the/user"])  # the inherited one, kept
    assert "AUTOTUNE_EMULATED_VRAM_GB" not in spec.env  # no --vram-gb: no card


CARD = ("NVIDIA A100-SXM4-80GB", 80.0)


@pytest.mark.parametrize(
    ("hook", "gpus", "name", "how"),
    [
        pytest.param(
            True, [], "emulated 512.0 MiB card (CPU)", "counted: the trial-side hook", id="cpu-hook"
        ),
        pytest.param(False, [], "planned 0.5 GB card", "not emulated: no GPU", id="cpu-no-hook"),
        pytest.param(
            True, [CARD], f"emulated 512.0 MiB card on {CARD[0]}", "capped: the trial-side hook", id="gpu"
        ),
        pytest.param(False, [CARD], CARD[0], "not emulated (--no-hook)", id="gpu-no-hook"),
    ],
)
def test_the_vram_gb_card_is_emulated_where_the_hook_can(
    tmp_path: Path, hook: bool, gpus: list[tuple[str, float]], name: str, how: str
) -> None:
    opts = SweepOptions(trainer="command", cmd="python t.py", vram_gb=0.5, hook=hook, workdir=tmp_path)
    adapter = get_adapter("command", template="python t.py", hook=hook)
    card = pick_card(
        opts, adapter, Baseline(trainer="command", text="", data={}), FakeNvml(gpus) if gpus else None
    )
    assert (card.name, card.vram_gb) == (name, 0.5)
    assert card.emulation.startswith(how)


def test_how_each_card_is_emulated_in_words() -> None:
    reference = get_adapter("reference")
    hooked = get_adapter("command", template="python t.py")
    gpu = [(0, "NVIDIA L4", 24 * 1024**3)]
    assert emulation_note(reference, 2, []).startswith("counted: the reference trainer counts live tensor")
    assert "set_per_process_memory_fraction" in emulation_note(hooked, 16, gpu)
    assert emulation_note(hooked, 48, gpu).startswith("not capped: the 48.00 GB card is not smaller")


def test_no_hook_is_a_sweep_option_stored_for_workers_and_resumes(tmp_path: Path) -> None:
    from autotune.cli import build_parser
    from autotune.cli.sweep_worker import sweep_options

    args = build_parser().parse_args(["sweep", "--cmd", "python t.py", "--vram-gb", "1", "--no-hook"])
    opts = sweep_options(args)
    assert opts.hook is False
    assert options_from_attr(options_to_attr(opts), workdir=tmp_path).hook is False
    assert options_from_attr({"trainer": "command"}, workdir=tmp_path).hook is True  # stored before the flag
    assert sweep_options(build_parser().parse_args(["sweep", "--cmd", "python t.py"])).hook is True


@pytest.mark.torch
@pytest.mark.process
@pytest.mark.untimed
@pytest.mark.parametrize("hook", [True, False])
def test_a_real_script_is_credited_its_real_batch(tmp_path: Path, hook: bool) -> None:
    """6 items at batch 8: every step trains on 6 samples. With the hook, samples/s is 6 per step
    time (not the 8 asked for); without it, this script (no time printed) cannot be measured."""
    template = f"{sys.executable} {SCRIPT} {{steps}} --data 6 --batch {{batch_size}}"
    adapter = get_adapter("command", template=template, cwd=tmp_path, hook=hook)
    trial = tmp_path / "trial"
    spec = adapter.render(
        adapter.load_baseline(None),
        {"batch_size": 8},
        gradient_accumulation_steps=1,
        steps=12,
        trial_dir=trial,
    )
    proc = subprocess.run(
        spec.argv, cwd=spec.cwd, env={**os.environ, **spec.env}, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    metrics = adapter.read_metrics(trial, proc.stdout + proc.stderr)
    if not hook:
        assert not (trial / "hook.jsonl").exists()
        assert not metrics.measured and metrics.losses  # its printed losses, but no time
        return
    assert metrics.step_time_s is not None and metrics.samples_per_s is not None
    hook_metrics = read_hook_file(trial / "hook.jsonl")
    assert hook_metrics.step_time_s == metrics.step_time_s
    assert metrics.samples_per_s == pytest.approx(6 / metrics.step_time_s)  # not 8: the real batch
    assert "hook" in metrics.source
