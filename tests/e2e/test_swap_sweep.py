"""Issue 18 through ``--cmd``: a user's block-swapping script, a count knob declared on the command
line, and host RAM as part of fit, with the real runner measuring the trials' RSS.

The script (``tests/fakes/swap_script.py``) really holds 32 MiB of host RAM per swapped block. The
host line (``--host-ram-gb 0.3407``: 0.9 x that = 314 MiB) lets 9 blocks fit (~300 MiB) and not 10;
past 349 MiB (11 blocks and more) the runner ends the trial as ``host_oom``.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.swap_script import device_gb, step_seconds
from tests.helpers import FAKES, autotune_argv, cli_env

pytestmark = [pytest.mark.process, pytest.mark.timeout(300)]

SCRIPT = FAKES / "swap_script.py"
CARD_GB = 24.0
HOST_GB = 0.3407
TEMPLATE = (
    f"{shlex.quote(sys.executable)} {shlex.quote(str(SCRIPT))} --blocks-to-swap {{blocks_to_swap}} "
    "--batch-size {batch_size} --steps {steps}"
)


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = cli_env(drop=("AUTOTUNE_",), keep_pythonpath=False)
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=280)


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("swap")
    done = _run(
        [
            sys.executable,
            "-m",
            "autotune",
            "sweep",
            "--workdir",
            str(tmp / "runs"),
            "--cmd",
            TEMPLATE,
            "--knob",
            "blocks_to_swap=count:19",
            "--vram-gb",
            str(CARD_GB),
            "--host-ram-gb",
            str(HOST_GB),
            "--steps",
            "5",
            "--max-batch-size",
            "4",
        ],
        tmp,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    storage = f"sqlite:///{tmp / 'runs' / 'studies.db'}"
    report = _run([*autotune_argv(), "report", "--storage", storage, "--format", "json"], tmp)
    assert report.returncode == 0, report.stdout + report.stderr
    markdown = (tmp / "runs" / "command-default" / "report.md").read_text(encoding="utf-8")
    return {"stdout": done.stdout + done.stderr, "report": json.loads(report.stdout), "markdown": markdown}


def _speed(p: dict[str, Any]) -> float:
    return p["batch_size"] / step_seconds(p["blocks_to_swap"], p["batch_size"])


def test_the_winner_is_the_fastest_config_that_fits_card_and_host(swept: dict[str, Any]) -> None:
    fitting = [
        {"blocks_to_swap": s, "batch_size": b}
        for s in range(20)
        for b in range(1, 4)
        if device_gb(s, b) <= 0.9 * CARD_GB and s <= 9  # 9 blocks: the most the host line holds
    ]
    truth = max(_speed(p) for p in fitting)
    winner = swept["report"]["best"]["params"]
    assert winner["blocks_to_swap"] <= 9
    assert _speed(winner) >= truth * (1 - 0.02)  # the search stops where no candidate can gain 2 %


def test_host_ram_overruns_are_host_oom_and_rule_out_more_offload(swept: dict[str, Any]) -> None:
    trials = swept["report"]["trials"]
    killed = [t for t in trials if t["outcome"] == "host_oom"]
    assert killed, "some trial passed the host line"
    assert all(t["params"]["blocks_to_swap"] >= 11 for t in killed)
    over = [t for t in trials if t["outcome"] == "ok" and t.get("host_fits") is False]
    assert all(t["params"]["blocks_to_swap"] >= 10 for t in over)
    for failed in [*killed, *over]:
        for later in trials:
            if (
                later["number"] > failed["number"]
                and later["params"]["batch_size"] >= failed["params"]["batch_size"]
            ):
                assert later["params"]["blocks_to_swap"] < failed["params"]["blocks_to_swap"], later
    assert "ran out of host RAM; less offload is tried" in swept["stdout"]  # the baseline: 19 blocks
    if over:  # the report says which line it passed: the host's, not the card's headroom
        assert "above the host line (--host-ram-gb less the headroom): does not fit" in swept["markdown"]
    assert "needs at least as much host RAM as" in swept["markdown"]
    assert (
        "**Host RAM:** fits at <= 0.31 GiB of the trial's processes' RSS (0.34 GiB: --host-ram-gb)"
        in (swept["markdown"])
    )


def test_the_count_knob_was_refined_between_its_coarse_values(swept: dict[str, Any]) -> None:
    tried = {t["params"]["blocks_to_swap"] for t in swept["report"]["trials"]}
    assert tried - {19, 16, 12, 8, 4, 0}, tried
    assert "blocks_to_swap=" in swept["stdout"]  # progress lines name the count
