"""Knobs are the ones the trainer has: the ``--knob`` parser, the space narrowed to the knobs a
``--cmd`` template names, the dominance order of declared knobs, and a resume with other knobs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autotune.core.knobflag import parse_knob, parse_knobs
from autotune.core.space import Candidate, Knob, Space
from autotune.core.strategy import Observation, Strategy
from autotune.errors import UsageError
from autotune.store.settings import settings_diff
from autotune.sweep.options import SweepOptions, options_from_attr, options_to_attr
from autotune.sweep.setup import plan_sweep
from autotune.trainers import Winner, get_adapter

# --- the parser -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "name", "values"),
    [
        ("swap=0,1,2", "swap", (0, 1, 2)),
        ("offload=yes,no", "offload", (True, False)),
        ("compile=True,FALSE", "compile", (True, False)),
        ("precision=bf16, fp32", "precision", ("bf16", "fp32")),
        ("mode=none,low,-3", "mode", ("none", "low", -3)),
        ("model.blocks_to_swap=int:1..4", "model.blocks_to_swap", (1, 2, 3, 4)),
        ("swap=int:3..0", "swap", (3, 2, 1, 0)),  # a larger number saves memory
        ("shift=int:-1..1", "shift", (-1, 0, 1)),
        (" res = int: 2 .. 3", "res", (2, 3)),
    ],
)
def test_knob_flags_parse(spec: str, name: str, values: tuple[Any, ...]) -> None:
    knob = parse_knob(spec)
    assert (knob.name, knob.values, knob.spec) == (name, values, spec)
    assert [type(v) for v in knob.values] == [type(v) for v in values]


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("swap", r"--knob 'swap': no '=' in it; write --knob NAME=v1,v2"),
        ("swap=", r"no values after '='"),
        ("swap=1,,2", r"an empty value in the list"),
        ("swap=1,2,", r"an empty value"),
        ("swap=3", r"one value leaves nothing to sweep"),
        ("swap=int:2..2", r"one value leaves nothing to sweep"),
        ("swap=1,2,1", r"the value 1 is listed twice"),
        ("offload=yes,true", r"the value true is listed twice"),
        ("swap=int:1..x", r"not a range; write int:LO..HI"),
        ("swap=int:1-4", r"not a range"),
        ("swap=int:0..100000", r"100001 values, more than 256"),
        ("2fast=1,2", r"'2fast' is not a knob name"),
        ("a..b=1,2", r"not a knob name"),
        ("bad-name=1,2", r"not a knob name"),
    ],
)
def test_bad_knob_flags_say_what_and_how(spec: str, match: str) -> None:
    with pytest.raises(UsageError, match=match):
        parse_knob(spec)


def test_reserved_names_and_repeats_are_refused() -> None:
    with pytest.raises(UsageError, match=r"'steps' is already a placeholder.*another name"):
        parse_knob("steps=1,2", reserved=("steps", "config"))
    with pytest.raises(UsageError, match=r"--knob swap is given twice"):
        parse_knobs(["swap=0,1", "swap=int:0..3"])
    assert [k.name for k in parse_knobs(["a=1,2", "b=x,y"])] == ["a", "b"]


# --- the dominance order of a declared int knob ------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "hungrier", "leaner"),
    [
        ("swap=int:0..3", 3, 0),  # a larger number needs more
        ("swap=int:3..0", 0, 3),  # blocks swapped: a larger number needs less
        ("precision=bf16,fp32", "fp32", "bf16"),
    ],
)
def test_a_declared_knob_orders_memory_as_written(spec: str, hungrier: Any, leaner: Any) -> None:
    declared = parse_knob(spec)
    space = Space([Knob("batch_size", (1, 2, 4), is_int=True), Knob(declared.name, declared.values)])
    big = space.candidate({"batch_size": 2, declared.name: hungrier})
    small = space.candidate({"batch_size": 2, declared.name: leaner})
    assert space.needs_at_least(big, small) and not space.needs_at_least(small, big)


def test_an_oom_at_the_saving_end_of_a_reversed_range_rules_out_less_swapping() -> None:
    """int:3..0: an OOM with 3 blocks swapped rules out 2, 1 and 0 at that batch, never 3 at a smaller one."""
    declared = parse_knob("swap=int:3..0")
    space = Space([Knob("batch_size", (1, 2, 4), is_int=True), Knob("swap", declared.values)])
    base = space.candidate({"batch_size": 1, "swap": 3})
    strategy = Strategy(space, base, card_gb=10.0, headroom=0.1)
    oom = Observation(
        candidate=space.candidate({"batch_size": 2, "swap": 3}),
        outcome="oom",
        samples_per_s=None,
        peak_vram_gb=None,
        fits=False,
        spread=None,
    )
    ok = Observation(
        candidate=base, outcome="ok", samples_per_s=1.0, peak_vram_gb=2.0, fits=True, spread=None
    )
    ruled = {c for v in strategy.ruled_out([ok, oom]) for c in [v.candidate]}
    for swap in (3, 2, 1, 0):
        assert space.candidate({"batch_size": 4, "swap": swap}) in ruled
        assert space.candidate({"batch_size": 2, "swap": swap}) in ruled or swap == 3
    assert space.candidate({"batch_size": 1, "swap": 0}) not in ruled


# --- the space a --cmd template gets -------------------------------------------------------------------


def _plan(tmp_path: Path, cmd: str, *, config: str | None = None, knobs: tuple[str, ...] = ()) -> Any:
    path = None
    if config is not None:
        path = tmp_path / "base.yaml"
        path.write_text(config)
    opts = SweepOptions(
        trainer="command", cmd=cmd, config=path, workdir=tmp_path / "runs", vram_gb=8, knobs=list(knobs)
    )
    return plan_sweep(opts, False)


LTX2_CONFIG = (
    "optimization:\n  batch_size: 2\n  optimizer_type: adamw\n  steps: 100\n"
    "acceleration:\n  quantization: null\n"
)


@pytest.mark.parametrize(
    ("cmd", "config", "knobs", "names", "base"),
    [
        ("train --bs {batch_size} --steps {steps}", None, (), ["batch_size"], {"batch_size": 1}),
        ("train {quantization} {optimizer}", None, (), ["quantization", "optimizer"], None),
        ("train --max_iters={steps}", None, (), [], {}),
        # no --config: {config} is a flat YAML of every knob, so the script receives them all
        (
            "train --config {config}",
            None,
            (),
            ["quantization", "optimizer", "batch_size", "gradient_checkpointing"],
            None,
        ),
        # {config} names a knob when the config holds its key (LTX-2's keys here: no checkpointing key)
        ("train {config}", LTX2_CONFIG, (), ["quantization", "optimizer", "batch_size"], None),
        ("train --bs {batch_size}", LTX2_CONFIG, (), ["batch_size"], {"batch_size": 2}),
        (
            "train --bs {batch_size} --swap {swap}",
            None,
            ("swap=int:2..0",),
            ["batch_size", "swap"],
            {"batch_size": 1, "swap": 2},  # the memory-saving end
        ),
        (
            "train {config} --p {precision}",
            "swap: 1\nprecision: fp32\n",
            ("swap=int:2..0", "precision=bf16,fp32"),
            ["swap", "precision"],
            {"swap": 1, "precision": "fp32"},  # the config's own values
        ),
    ],
)
def test_only_the_knobs_the_command_receives_are_swept(
    tmp_path: Path, cmd: str, config: str | None, knobs: tuple[str, ...], names: list[str], base: Any
) -> None:
    plan = _plan(tmp_path, cmd, config=config, knobs=knobs)
    assert list(plan.space.names) == names
    assert [k["name"] for k in plan.settings["knobs"]] == names
    assert sorted(plan.distributions) == sorted(names)
    assert set(plan.space.fidelity) <= set(names)
    if base is not None:
        assert plan.base_params == base
    # every candidate of the space is a distinct command
    adapter = plan.adapter
    argvs = set()
    for i, cand in enumerate(plan.space):
        spec = adapter.render(
            plan.baseline, cand.params, gradient_accumulation_steps=1, steps=5, trial_dir=tmp_path / f"t{i}"
        )
        text = (tmp_path / f"t{i}" / "config.yaml").read_text()
        argvs.add((tuple(a.replace(str(tmp_path / f"t{i}"), "T") for a in spec.argv), text))
    assert len(argvs) == len(plan.space)


@pytest.mark.parametrize(
    ("cmd", "config", "knobs", "match"),
    [
        ("train {swap}", None, (), r"unknown placeholder\(s\) \{swap\}.*--knob swap=VALUE1,VALUE2"),
        ("train {batch_size}", None, ("swap=0,1",), r"--knob swap: the command never receives it"),
        ("train {batch_size} {steps}", None, ("steps=1,2",), r"--knob steps: that name is a built-in"),
        ("train {batch_size}", None, ("batch_size=1,2",), r"--knob batch_size: that name is a built-in"),
        ("train {swap}", "swap: 5\n", ("swap=0,1",), r"holds swap: 5, which is not one of its values"),
        ("train {swap}", None, ("swap=0,0",), r"the value 0 is listed twice"),
    ],
)
def test_bad_declared_knobs_fail_before_anything_runs(
    tmp_path: Path, cmd: str, config: str | None, knobs: tuple[str, ...], match: str
) -> None:
    with pytest.raises(UsageError, match=match):
        _plan(tmp_path, cmd, config=config, knobs=knobs)
    assert not (tmp_path / "runs").exists()


def test_knob_goes_with_cmd_only(tmp_path: Path) -> None:
    opts = SweepOptions(trainer="reference", workdir=tmp_path / "runs", vram_gb=8, knobs=["swap=0,1"])
    with pytest.raises(UsageError, match=r"--knob declares a knob of a trainer run through --cmd"):
        plan_sweep(opts, False)


def test_declared_knobs_reach_the_config_and_a_worker_rebuilds_the_same_space(tmp_path: Path) -> None:
    plan = _plan(
        tmp_path, "train {config} --bs {batch_size}", config="swap: 1\nother: x\n", knobs=("swap=int:2..0",)
    )
    assert plan.settings["declared_knobs"] == ["swap=int:2..0"]
    plan.adapter.render(
        plan.baseline,
        {"batch_size": 2, "swap": 0},
        gradient_accumulation_steps=1,
        steps=3,
        trial_dir=tmp_path / "t",
    )
    assert (tmp_path / "t" / "config.yaml").read_text() == "swap: 0\nother: x\n"
    # the worker: the options as stored on the study, back into a plan
    again = plan_sweep(options_from_attr(options_to_attr(plan.opts), workdir=tmp_path / "runs"), False)
    assert again.space.names == plan.space.names and again.settings == plan.settings
    assert [k.values for k in again.space.knobs] == [k.values for k in plan.space.knobs]


def test_the_report_adapter_rebuilt_from_the_settings_knows_the_declared_placeholders(tmp_path: Path) -> None:
    from autotune.store.settings import read_settings

    plan = _plan(tmp_path, "train --bs {batch_size} --swap {swap}", knobs=("swap=0,1",))
    options = read_settings(plan.settings)["trainer_options"]
    adapter = get_adapter("command", **options)
    assert "--swap 1" in adapter.training_command(
        tmp_path / "c.yaml", Winner(params={"batch_size": 2, "swap": 1}, steps=10)
    )


def test_a_resume_with_other_knobs_says_which_changed() -> None:
    stored = {
        "knobs": [{"name": "batch_size", "values": []}, {"name": "swap", "values": [2, 1, 0]}],
        "declared_knobs": ["swap=int:2..0"],
    }
    current = {
        "knobs": [{"name": "batch_size", "values": []}, {"name": "swap", "values": [0, 1, 2]}, {"name": "p"}],
        "declared_knobs": ["swap=int:0..2", "p=a,b"],
    }
    lines = settings_diff(stored, current)
    assert "knobs: p is in this run, not in the study" in lines
    assert "knobs.swap.values: the study has [2, 1, 0], this run [0, 1, 2]" in lines
    assert any(line.startswith("declared_knobs: the study has ['swap=int:2..0']") for line in lines)


def test_a_space_of_no_knob_is_the_baseline_alone() -> None:
    space = Space([Knob("batch_size", (1, 2), is_int=True)]).restricted(())
    assert list(space) == [Candidate(())] and space.batch_knob is None
    strategy = Strategy(space, Candidate(()), card_gb=8.0, headroom=0.1)
    assert strategy.next_candidate([]) == Candidate(())
    done = Observation(
        Candidate(()), outcome="ok", samples_per_s=1.0, peak_vram_gb=1.0, fits=True, spread=None
    )
    assert strategy.next_candidate([done]) is None


# --- one command, one trial -------------------------------------------------------------------------


def test_the_launch_digest_leaves_the_trial_folder_out_and_keeps_the_config_in(tmp_path: Path) -> None:
    from autotune.sweep.samecommand import launch_digest

    adapter = get_adapter("command", template="train --config {config} --out {trial_dir}/x", cwd=tmp_path)
    baseline = adapter.load_baseline(None)

    def digest(folder: str, batch: int) -> str:
        spec = adapter.render(
            baseline,
            {"batch_size": batch},
            gradient_accumulation_steps=1,
            steps=3,
            trial_dir=tmp_path / folder,
        )
        return launch_digest(spec, tmp_path / folder)

    assert digest("a", 2) == digest("b", 2)  # only the folder differs
    assert digest("c", 4) != digest("a", 2)  # the config file differs, the argv does not
    bare = get_adapter("command", template="train --bs {batch_size}", cwd=tmp_path)
    spec = bare.render(
        baseline, {"batch_size": 2}, gradient_accumulation_steps=1, steps=3, trial_dir=tmp_path / "d"
    )
    # a file the command does not name (the config nobody reads) is not part of its launch
    (tmp_path / "d" / "config.yaml").write_text("anything: else\n")
    assert launch_digest(spec, tmp_path / "d") == launch_digest(spec, tmp_path / "d")
    other = bare.render(
        baseline, {"batch_size": 2}, gradient_accumulation_steps=1, steps=3, trial_dir=tmp_path / "e"
    )
    assert launch_digest(spec, tmp_path / "d") == launch_digest(other, tmp_path / "e")


@pytest.mark.parametrize(
    ("state", "outcome", "reused"),
    [
        ("COMPLETE", "ok", True),
        ("FAIL", "oom", True),
        ("FAIL", "interrupted", False),
        ("RUNNING", None, False),
    ],
)
def test_only_a_finished_run_with_a_result_is_reused(state: str, outcome: str | None, reused: bool) -> None:
    from optuna.distributions import IntDistribution
    from optuna.trial import TrialState, create_trial

    from autotune.sweep.samecommand import earlier_same, reused_attrs

    attrs: dict[str, Any] = {
        "launch_digest": "d1",
        "role": "search",
        "pid": 5,
        "wall_s": 9.0,
        "trial_dir": "/t0",
    }
    if outcome is not None:
        attrs["outcome"] = outcome
    earlier = create_trial(
        state=TrialState[state],
        value=3.0 if state == "COMPLETE" else None,
        params={"batch_size": 2},
        distributions={"batch_size": IntDistribution(1, 4)},
        user_attrs=attrs,
    )
    earlier.number = 0
    twin = earlier_same([earlier], "d1", number=1)
    assert (twin is not None) == reused
    assert earlier_same([earlier], "other", number=1) is None
    if twin is not None:
        out = reused_attrs(twin)
        assert out["same_command_as"] == 0 and out["outcome"] == outcome and out["wall_s"] == 0.0
        assert not {"pid", "role", "trial_dir"} & set(out)


@pytest.mark.parametrize(
    ("knobs", "fidelity"),
    [
        (None, {"quantization": "none", "optimizer": "adamw"}),
        (["quantization", "batch_size"], {"quantization": "none"}),
        (["batch_size"], {}),  # a --cmd template naming only the batch: no tie is broken on anything else
        ([], {}),  # no knob at all (it once meant "every knob")
    ],
)
def test_near_ties_are_judged_only_on_the_knobs_the_sweep_had(knobs: list[str] | None, fidelity: Any) -> None:
    from autotune.config.knobs import trainer_fidelity

    assert trainer_fidelity("command", knobs) == fidelity


# --- every kind is capped; a switch with no value is a knob too ---------------------------------------


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("x=count:1000000000", r"1000000001 values, more than 256; a count knob takes every integer"),
        ("x=count:256", r"257 values, more than 256"),
        ("x=fraction:0.0000001", r"10000001 values, more than 256; write a coarser step"),
        ("x=fraction:0.001", r"1001 values, more than 256"),
        ("x=" + ",".join(map(str, range(300))), r"300 values, more than 256"),
        ("x=int:1..1000000000", r"1000000000 values, more than 256"),
    ],
)
def test_every_kind_of_knob_is_capped(spec: str, match: str) -> None:
    with pytest.raises(UsageError, match=match):
        parse_knob(spec)


def test_knobs_at_the_cap_still_parse() -> None:
    assert len(parse_knob("x=count:255").values) == 256
    assert parse_knob("x=fraction:0.01").values[:2] == (1.0, 0.99)


def test_an_uncapped_count_exits_2_at_once_from_the_command_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "autotune", "sweep", "--cmd", "train {x}", "--knob", "x=count:1000000000",
         "--workdir", str(tmp_path / "runs"), "--vram-gb", "8"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert (
        proc.stderr.strip()
        .splitlines()[-1]
        .startswith("error: --knob 'x=count:1000000000': 1000000001 values")
    )
    assert not (tmp_path / "runs" / "studies.db").exists()


@pytest.mark.parametrize(
    ("spec", "values", "flag"),
    [
        ("ckpt=flag", (True, False), "--ckpt"),
        ("ckpt=flag:--grad-checkpointing", (True, False), "--grad-checkpointing"),
        ("ckpt=flag:--grad-checkpointing:saves", (True, False), "--grad-checkpointing"),
        ("ema=flag:--use-ema:costs", (False, True), "--use-ema"),
    ],
)
def test_flag_knobs_parse_in_the_order_of_their_meaning(
    spec: str, values: tuple[bool, ...], flag: str
) -> None:
    knob = parse_knob(spec)
    assert (knob.values, knob.flag) == (values, flag)


@pytest.mark.parametrize(
    ("spec", "match"),
    [("x=flag:--a b", r"must be one argument"), ("x=flag:--a:maybe", r"is not a flag knob")],
)
def test_bad_flag_knobs_say_how(spec: str, match: str) -> None:
    with pytest.raises(UsageError, match=match):
        parse_knob(spec)


def test_a_flag_knob_renders_as_the_flag_or_nothing(tmp_path: Path) -> None:
    from autotune.store.settings import read_settings

    plan = _plan(
        tmp_path,
        "train --bs {batch_size} {ckpt} --steps {steps}",
        knobs=("ckpt=flag:--grad-checkpointing",),
    )
    assert plan.base_params["ckpt"] is True  # the saving end: present
    argvs = []
    for value in (True, False):
        spec = plan.adapter.render(
            plan.baseline, {"batch_size": 2, "ckpt": value}, gradient_accumulation_steps=1, steps=3,
            trial_dir=tmp_path / f"t{value}",
        )  # fmt: skip
        argvs.append(list(spec.argv))
    assert argvs == [
        ["train", "--bs", "2", "--grad-checkpointing", "--steps", "3"],
        ["train", "--bs", "2", "--steps", "3"],
    ]
    # the report's launch command, from the adapter rebuilt out of the stored settings
    options = read_settings(plan.settings)["trainer_options"]
    adapter = get_adapter("command", **options)
    command = adapter.training_command(
        tmp_path / "c.yaml", Winner(params={"batch_size": 2, "ckpt": False}, steps=10)
    )
    assert command.endswith("train --bs 2 --steps 10")


def test_a_flag_knob_inside_a_larger_argument_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"is part of the template argument '--ckpt=\{ckpt\}'"):
        _plan(tmp_path, "train --ckpt={ckpt}", knobs=("ckpt=flag",))
