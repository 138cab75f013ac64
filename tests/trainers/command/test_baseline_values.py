"""``--baseline NAME=VALUE``: the values a ``--cmd`` command runs with today, so a script that
cannot run at autotune's starting values (a BatchNorm at batch 1: "Expected more than 1 value per
channel when training") starts from its own; and ``--batch-sizes`` ("only these") starts a
template's baseline at its smallest batch, not at 1."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from autotune.cli.sweep_worker import template_baseline
from autotune.errors import UsageError
from autotune.trainers import get_adapter
from tests.helpers import cli_env

TEMPLATE = "python train.py --bs {batch_size} --ckpt {gradient_checkpointing} --steps {steps}"


def _args(*baseline: str, batch_sizes: tuple[int, ...] | None = None) -> argparse.Namespace:
    return argparse.Namespace(baseline=list(baseline), batch_sizes=batch_sizes)


@pytest.mark.parametrize(
    ("baseline", "batch_sizes", "want"),
    [
        ((), None, {}),
        (("batch_size=64",), None, {"baseline": {"batch_size": 64}}),
        (("gradient_checkpointing=no", "batch_size=8"), None, {"baseline": {"gradient_checkpointing": False, "batch_size": 8}}),
        ((), (8, 16, 64), {"default_batch": 8}),
        (("batch_size=32",), (16, 8), {"baseline": {"batch_size": 32}, "default_batch": 8}),
    ],
)  # fmt: skip
def test_baseline_flags_become_the_command_adapters_options(
    baseline: tuple[str, ...], batch_sizes: tuple[int, ...] | None, want: dict[str, Any]
) -> None:
    assert template_baseline(_args(*baseline, batch_sizes=batch_sizes), "command") == want


@pytest.mark.parametrize(
    ("baseline", "trainer", "match"),
    [
        (("batch_size",), "command", "write NAME=VALUE"),
        (("=4",), "command", "write NAME=VALUE"),
        (("batch_size=4", "batch_size=8"), "command", "given twice"),
        (("batch_size=4",), "ltx2", "reads them from its --config"),
    ],
)
def test_bad_baseline_flags_are_usage_errors_with_the_fix(
    baseline: tuple[str, ...], trainer: str, match: str
) -> None:
    with pytest.raises(UsageError, match=match):
        template_baseline(_args(*baseline), trainer)


def test_the_baseline_takes_the_given_values_then_the_default_batch_then_the_saving_end(
    tmp_path: Path,
) -> None:
    plain = get_adapter("command", template=TEMPLATE)
    base = plain.load_baseline(None)
    assert (
        plain.baseline_params(base)["batch_size"],
        plain.baseline_params(base)["gradient_checkpointing"],
    ) == (1, True)
    floor = get_adapter("command", template=TEMPLATE, default_batch=8)
    assert floor.baseline_params(base)["batch_size"] == 8
    given = get_adapter(
        "command",
        template=TEMPLATE,
        default_batch=8,
        baseline={"batch_size": 64, "gradient_checkpointing": False},
    )
    params = given.baseline_params(base)
    assert (params["batch_size"], params["gradient_checkpointing"]) == (64, False)
    assert given.knob_location(base, "batch_size") == "--baseline batch_size"


@pytest.mark.parametrize(
    ("options", "config", "match"),
    [
        ({"baseline": {"bs": 4}}, None, "'bs' is no knob of this sweep"),
        ({"baseline": {"optimizer": "adamw"}}, None, "never receives optimizer"),
        ({"baseline": {"batch_size": 4}}, "batch_size: 2\n", "both give the baseline's batch_size"),
    ],
)
def test_a_baseline_value_nothing_can_use_or_two_sources_give_is_refused(
    tmp_path: Path, options: dict[str, Any], config: str | None, match: str
) -> None:
    path = None
    if config is not None:
        path = tmp_path / "base.yaml"
        path.write_text(config)
    template = TEMPLATE + (" --config {config}" if path else "")
    with pytest.raises(UsageError, match=match):
        adapter = get_adapter("command", template=template, **options)
        adapter.baseline_params(adapter.load_baseline(path))


#: A BatchNorm net, as pytorch/examples' mnist_rnn and siamese_network have (BatchNorm1d/2d in
#: training mode refuses a batch of one: torch/nn/functional.py's _verify_batch_size).
BATCHNORM = """\
import argparse, torch
p = argparse.ArgumentParser()
p.add_argument("--batch-size", type=int, default=64)
p.add_argument("--steps", type=int, default=20)
a = p.parse_args()
net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
opt = torch.optim.SGD(net.parameters(), lr=0.01)
for _ in range(a.steps):
    loss = net(torch.randn(a.batch_size, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


@pytest.mark.process
@pytest.mark.torch
@pytest.mark.untimed
def test_a_batchnorm_script_says_how_to_start_elsewhere_and_starts_where_told(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(BATCHNORM)

    def sweep(workdir: str, *extra: str) -> subprocess.CompletedProcess[str]:
        argv = [
            sys.executable, "-m", "autotune", "sweep", "--workdir", str(tmp_path / workdir),
            "--cmd", "python train.py --batch-size {batch_size} --steps {steps}",
            "--vram-gb", "1", "--max-trials", "1", *extra,
        ]  # fmt: skip
        return subprocess.run(argv, cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=240)

    at_one = sweep("one")
    assert at_one.returncode == 1
    last = at_one.stderr.strip().splitlines()[-1]
    assert "Expected more than 1 value per channel" in last and "--baseline batch_size=" in last, last
    told = sweep("told", "--baseline", "batch_size=4")
    assert told.returncode == 0, told.stderr
    said = told.stdout + told.stderr  # progress lines go to stderr, the summary to stdout
    assert "trial 0 started (baseline): bs=4" in said and "trial 0 ok" in said, said
    ladder = sweep("ladder", "--batch-sizes", "4,8")
    assert ladder.returncode == 0, ladder.stderr
    assert "trial 0 started (baseline): bs=4" in ladder.stdout + ladder.stderr, ladder.stderr
