"""The sweep's pure helpers, the progress view and the sweep/status flags."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from autotune.cli import build_parser, main
from autotune.core import verdict
from autotune.core.metrics import TrialMetrics
from autotune.sweep import naming as sw
from autotune.sweep import options as opt
from autotune.sweep.progress import Progress


@pytest.mark.parametrize(
    ("batch", "target", "gpus", "expected"),
    [
        (1, 1, 1, (1, 1)),
        (1, 8, 1, (8, 8)),
        (2, 8, 1, (4, 8)),
        (8, 8, 1, (1, 8)),
        (16, 8, 1, (1, 16)),  # past the target: accumulation 1, effective batch grows (recorded)
        (3, 8, 1, (2, 6)),  # not a divisor: accumulation only goes down, never past the target
        (2, 8, 2, (2, 8)),
        (4, 2, 2, (1, 8)),
    ],
)
def test_accumulation_keeps_effective_batch_where_it_can(
    batch: int, target: int, gpus: int, expected: tuple[int, int]
) -> None:
    assert sw.accumulation_for(batch, target, gpus) == expected


@pytest.mark.parametrize(
    ("metrics", "effective", "expected"),
    [
        (TrialMetrics(samples_per_s=3.0, step_time_s=1.0), 8, 3.0),  # the trainer's own figure wins
        (TrialMetrics(step_time_s=0.5), 4, 8.0),
        (TrialMetrics(samples_per_s=0.0, step_time_s=2.0), 4, 2.0),
        (TrialMetrics(), 4, None),
    ],
)
def test_samples_per_s(metrics: TrialMetrics, effective: int, expected: float | None) -> None:
    assert verdict.samples_per_s(metrics, effective) == expected


@pytest.mark.parametrize(
    ("trainer", "measured", "expected"),
    [(None, None, None), (10.0, None, 10.0), (None, 9.0, 9.0), (10.0, 12.5, 12.5), (11.0, 9.0, 11.0)],
)
def test_fit_is_judged_on_the_larger_peak(
    trainer: float | None, measured: float | None, expected: float | None
) -> None:
    assert (
        verdict.judged_peak(TrialMetrics(trainer_peak_vram_gb=trainer, measured_peak_vram_gb=measured))
        == expected
    )


@pytest.mark.parametrize(
    ("peak", "card", "headroom", "expected"),
    [
        (None, 80, 0.1, None),
        (72.0, 80, 0.1, True),
        (72.01, 80, 0.1, False),
        (31.0, 32, 0.1, False),
        (31.0, 32, 0.0, True),
    ],
)
def test_fits(peak: float | None, card: float, headroom: float, expected: bool | None) -> None:
    assert verdict.fits(peak, card, headroom) is expected


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        (
            {
                "quantization": "int8-quanto",
                "optimizer": "adamw8bit",
                "batch_size": 4,
                "gradient_checkpointing": True,
            },
            "int8-quanto adamw8bit bs=4 ckpt",
        ),
        (
            {"quantization": "none", "optimizer": "adamw", "batch_size": 1, "gradient_checkpointing": False},
            "no-quant adamw bs=1 no-ckpt",
        ),
        ({"offload": True, "cache_latents": False}, "offload no-cache_latents"),
    ],
)
def test_label(params: dict[str, Any], expected: str) -> None:
    assert sw.label(params) == expected


@pytest.mark.parametrize(
    ("opts", "expected"),
    [
        (opt.SweepOptions.demo_defaults(), "demo"),
        (opt.SweepOptions(trainer="ltx2", config=Path("/x/my plan.yaml")), "ltx2-my-plan"),
        (opt.SweepOptions(trainer="command"), "command-default"),
    ],
)
def test_default_study_name_is_stable(opts: opt.SweepOptions, expected: str) -> None:
    assert sw.default_study_name(opts) == expected


# --- progress view ---------------------------------------------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_progress_plain_lines_when_not_a_tty() -> None:
    out, clock = io.StringIO(), _Clock()
    p = Progress(out, tty=False, clock=clock)
    p.set_best("3.2 samples/s (trial 1)")
    p.trial_started(2, "int8-quanto adamw8bit bs=4 ckpt", 70.0)
    p.on_output("Step 20/50 - Loss: 0.1")
    p.tick()
    clock.t += 65
    p.trial_finished(2, "ok: 4 samples/s")
    assert out.getvalue() == (
        "trial 2 started: int8-quanto adamw8bit bs=4 ckpt, estimate ~1m10s; best so far: 3.2 samples/s (trial 1)\n"
        "trial 2 ok: 4 samples/s (1m05s)\n"
    )
    assert "\r" not in out.getvalue()


def test_progress_redraws_one_status_line_on_a_tty() -> None:
    out, clock = io.StringIO(), _Clock()
    p = Progress(out, tty=True, clock=clock)
    p.set_best("3.2 samples/s (trial 1)")
    p.trial_started(2, "bs=4", 70.0)
    clock.t += 12
    p.on_output("INFO Step 20/50 - Loss: 0.1, LR: 1e-4")
    p.tick()
    assert p.status_text() == "trial 2: bs=4 | 12.0s of ~1m10s | step 20/50 | best 3.2 samples/s (trial 1)"
    p.line("a message")
    p.trial_finished(2, "oom: tried 2 GiB")
    text = out.getvalue()
    assert "\r\x1b[Ktrial 2: bs=4 | 12.0s of ~1m10s | step 20/50" in text
    assert "\r\x1b[Ka message\n" in text
    assert text.endswith("\r\x1b[Ktrial 2 oom: tried 2 GiB (12.0s)\n")


# --- flags -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--steps", "0"], "--steps must be at least 1"),
        (["--steps", "x"], "--steps wants a whole number"),
        (["--max-trials", "-1"], "--max-trials must be at least 1"),
        (["--max-batch-size", "1.5"], "--max-batch-size wants a whole number"),
        (["--budget", "soon"], "invalid duration 'soon'"),
        (["--trial-timeout", "0"], "more than zero"),
        (["--stall-timeout", "5x"], "--stall-timeout"),
        (["--headroom", "1"], "--headroom must be at least 0 and below 1"),
        (["--headroom", "-0.1"], "--headroom must be at least 0"),
        (["--headroom", "lots"], "--headroom wants a fraction"),
        (["--vram-gb", "-4"], "--vram-gb"),
        (["--cmd", "python x.py", "--trainer", "ltx2"], "--cmd goes with --trainer command"),
        (["--study", "../escape"], "not a valid study name"),
        (["--storage", "studies.db"], "not a database URL"),
    ],
)
def test_bad_sweep_flags_are_usage_errors(
    argv: list[str],
    needle: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["sweep", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and needle in err, err
    assert "Traceback" not in err
    assert not (tmp_path / "autotune-runs").exists()  # nothing was started


@pytest.mark.parametrize(("text", "value"), [("0.1", 0.1), ("10%", 0.1), ("0", 0.0), ("0.25", 0.25)])
def test_headroom_forms(text: str, value: float) -> None:
    args = build_parser().parse_args(["sweep", "--headroom", text])
    assert args.headroom == pytest.approx(value)


def test_no_arguments_is_the_demo() -> None:
    from autotune.cli import _sweep_options

    opts = _sweep_options(build_parser().parse_args(["sweep"]))
    assert opts.demo and opts.trainer == "reference" and opts.study == "demo"
    assert opts.steps == opt.DEMO_STEPS and opts.max_batch_size == opt.DEMO_MAX_BATCH_SIZE
    assert opts.headroom == opt.DEFAULT_HEADROOM
    # bounded by trials, not seconds: a busy host must not cut the demo short before its OOM
    assert opts.budget_s is None and opts.max_trials == opt.DEMO_MAX_TRIALS


def test_flags_reach_the_options() -> None:
    from autotune.cli import _sweep_options

    args = build_parser().parse_args(
        [
            "sweep",
            "--cmd",
            "python t.py {batch_size}",
            "--budget",
            "1h30m",
            "--max-trials",
            "7",
            "--steps",
            "9",
            "--trial-timeout",
            "20m",
            "--stall-timeout",
            "90s",
            "--headroom",
            "0.2",
            "--max-batch-size",
            "32",
            "--keep-effective-batch",
            "--allow-extra-savers",
            "--confirm",
            "--force",
            "--vram-gb",
            "48",
            "--workdir",
            "w",
            "--study",
            "s",
            "--storage",
            "sqlite:///x.db",
        ]
    )
    o = _sweep_options(args)
    assert (o.trainer, o.budget_s, o.max_trials, o.steps, o.trial_timeout_s, o.stall_timeout_s) == (
        "command",
        5400,
        7,
        9,
        1200,
        90,
    )
    assert (o.headroom, o.max_batch_size, o.vram_gb, o.workdir, o.study, o.storage) == (
        0.2,
        32,
        48,
        Path("w"),
        "s",
        "sqlite:///x.db",
    )
    assert o.keep_effective_batch and o.allow_extra_savers and o.confirm and o.force and not o.demo
    assert o.cmd == "python t.py {batch_size}"


def test_help_explains_the_headroom_default(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["sweep", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "default: 0.1, i.e. 10%" in text and "2000 steps" in text
    for flag in (
        "--budget",
        "--max-trials",
        "--keep-effective-batch",
        "--allow-extra-savers",
        "--confirm",
        "--stall-timeout",
        "--force",
    ):
        assert flag in text


def test_status_without_a_database_says_what_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status", "--workdir", str(tmp_path / "none")]) == 2  # a wrong path: bad input, like report
    err = capsys.readouterr().err
    assert "no study database at" in err and "autotune sweep" in err
    assert not (tmp_path / "none").exists()


@pytest.mark.parametrize(
    ("hook", "nvml", "expected"), [(5.0, 6.0, 6.0), (7.0, 6.0, 7.0), (None, 6.0, 6.0), (5.0, None, 5.0)]
)
def test_measure_judges_the_larger_of_the_hooks_peak_and_nvmls(
    tmp_path: Path, hook: float | None, nvml: float | None, expected: float
) -> None:
    """Both are the trial's own: NVML's per-process sum (CUDA context included) and the hook's
    reserved peak (a validation phase included); neither replaces the other."""
    from autotune.execution.runner import RunResult
    from autotune.sweep.measure import measure

    class HookOnly:
        def read_metrics(self, trial_dir: Path, output: str) -> TrialMetrics:
            return TrialMetrics(step_time_s=1.0, step_time_spread_s=0.01, measured_peak_vram_gb=hook)

    (tmp_path / "out.log").write_text("")
    result = RunResult(
        returncode=0, signal=None, timed_out=False, stalled=False, interrupted=False, oom_seen=False,
        wall_s=1.0, stdout_path=tmp_path / "out.log", stderr_path=tmp_path / "out.log", output_tail="",
        measured_peak_vram_gb=nvml, peak_host_rss_gb=0.5, timeline_path=None, pid=1,
    )  # fmt: skip
    attrs = measure(HookOnly(), result, tmp_path, 2, card_gb=16.0, headroom=0.1).attrs  # type: ignore[arg-type]
    assert attrs["peak_vram_gb"] == expected and attrs["measured_peak_vram_gb"] == expected
