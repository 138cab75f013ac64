"""The best-config report: exact Markdown and JSON of a known study, partial studies, the
winner rule, read-only access, the CLI, the written config, and the HTML in real Chromium."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import optuna
import pytest

from autotune.cli import main
from autotune.errors import StorageError
from autotune.report import build as rep
from autotune.trainers import registry as trainer_registry
from tests.helpers import IN_CI
from tests.pngread import colour_counts, read_png
from tests.report_study import BASE, KNOB_KEYS, TEST_TRAINER, YamlTestAdapter, build_study, clone_study

DATA = Path(__file__).resolve().parents[1] / "data" / "report"
REGEN = os.environ.get("AUTOTUNE_REGEN_EXPECTED") == "1"  # rewrite the expected files, then review the diff

optuna.logging.set_verbosity(optuna.logging.WARNING)


def _normalise(text: str, workdir: Path) -> str:
    return text.replace(str(workdir), "<workdir>")


def _expect(name: str, actual: str) -> None:
    path = DATA / name
    if REGEN:
        path.write_text(actual, encoding="utf-8")
    assert actual == path.read_text(encoding="utf-8")


@pytest.fixture(autouse=True)
def yaml_test_adapter(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test adapter, registered for each test only."""
    monkeypatch.setitem(trainer_registry.ADAPTERS, TEST_TRAINER, YamlTestAdapter)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    workdir = tmp_path_factory.mktemp("template") / "runs"
    build_study(workdir)
    return workdir


@pytest.fixture
def known(tmp_path: Path, template: Path) -> tuple[Path, str]:
    workdir = tmp_path / "runs"
    url, _ = clone_study(template, workdir)
    return workdir, url


def _report(url: str, **kwargs: Any) -> rep.Report:
    return rep.build_report(rep.open_study(url, None), **kwargs)


# --- exact output of a known study ---------------------------------------------------------------


def test_markdown_of_known_study_is_exact(known: tuple[Path, str]) -> None:
    workdir, url = known
    _expect("demo.md", _normalise(rep.render_markdown(_report(url)), workdir))


def test_json_of_known_study_is_exact_and_keeps_the_contract(known: tuple[Path, str]) -> None:
    workdir, url = known
    text = _normalise(rep.render_json(_report(url)), workdir)
    _expect("demo.json", text)
    data = json.loads(text)
    for pick in ("baseline", "best"):
        assert {"trial", "params", "samples_per_s", "step_time_s", "peak_vram_gb"} <= set(data[pick])
    assert data["baseline"]["trial"] == 0 and data["best"]["trial"] == 2
    assert data["speedup"] == pytest.approx(0.6452 / 0.5, abs=1e-4)
    assert [t["number"] for t in data["trials"]] == list(range(7))
    assert all({"number", "params", "outcome"} <= set(t) for t in data["trials"])
    assert data["trials"][3]["oom_tried_gb"] == 2.0 and "samples_per_s" not in data["trials"][3]


def test_markdown_states_the_essentials(known: tuple[Path, str]) -> None:
    text = rep.render_markdown(_report(known[1]))
    assert "tried 2.00 GiB with 1.12 GiB free of 47.99 GiB" in text
    assert "1.29× the baseline" in text
    assert "| 5 | gradient_checkpointing true → false | ok, too big |" in text
    assert "effective batch 2 (baseline 4)" in text
    assert "python scripts/train.py" in text and "best-config.yaml" in text


# --- partial and failed studies -----------------------------------------------------------------


def _bare_study(tmp_path: Path, trainer: str = TEST_TRAINER) -> tuple[str, optuna.Study]:
    url = f"sqlite:///{tmp_path}/studies.db"
    study = optuna.create_study(study_name="fresh", storage=url, direction="maximize")
    study.set_user_attr(
        "settings",
        {"trainer": trainer, "card": {"name": "GPU", "vram_gb": 24.0, "count": 1, "tier": "below-32GB"}},
    )
    study.set_user_attr("baseline_params", dict(BASE))
    study.set_user_attr("baseline_trial", 0)
    return url, study


def test_study_without_trials_gets_an_honest_partial_report(tmp_path: Path) -> None:
    url, _ = _bare_study(tmp_path)
    report = _report(url)
    md = rep.render_markdown(report)
    assert "0 trials finished, 0 running; no config has fit yet" in md
    assert "No trial has started yet." in md
    data = json.loads(rep.render_json(report))
    assert data["best"] is None and data["baseline"] is None and data["speedup"] is None
    assert "<svg" not in rep.render_html(report)  # nothing to draw, and no crash


def test_study_with_only_a_running_baseline(tmp_path: Path) -> None:
    url, study = _bare_study(tmp_path)
    study.enqueue_trial(dict(BASE))
    study.ask()
    md = rep.render_markdown(_report(url))
    assert "0 trials finished, 1 running; no config has fit yet" in md
    assert "| 0 (baseline) | — | running |" in md


def test_failed_baseline_is_reported_with_its_reason(tmp_path: Path) -> None:
    url, study = _bare_study(tmp_path)
    study.add_trial(
        optuna.trial.create_trial(
            state=optuna.trial.TrialState.FAIL,
            params={},
            distributions={},
            user_attrs={
                "outcome": "oom",
                "reason": "CUDA out of memory",
                "oom_tried_gb": 4.0,
                "oom_free_gb": 0.5,
                "oom_total_gb": 23.6,
            },
        )
    )
    report = _report(url)
    assert report.best is None and report.speedup is None
    md = rep.render_markdown(report)
    assert "trial 0: oom (tried 4.00 GiB with 0.50 GiB free of 23.60 GiB; CUDA out of memory)" in md
    assert "**Winner:** none yet: 1 trial finished, 0 running; no config has fit yet" in md
    assert "**Progress:** 1 trial finished (0 ok, 1 failed), 0 running" in md


# --- warnings -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("attrs", "present", "absent"),
    [
        (
            {},
            ["Near-tie decided by fidelity: trial 4", "validation sampling and checkpoint saving"],
            ["quantiz"],
        ),
        (
            {"best_trial": 4},  # the sweep's own pick wins over the recomputed one
            ["effective batch changed", "keeps quantization int8-quanto", "validation sampling"],
            ["Near-tie", "8-bit"],
        ),
        ({"best_trial": 0}, ["keeps quantization int8-quanto", "adamw8bit optimizer"], ["effective batch"]),
    ],
)
def test_warnings_where_they_apply(
    tmp_path: Path, template: Path, attrs: dict[str, Any], present: list[str], absent: list[str]
) -> None:
    url, _ = clone_study(template, tmp_path / "runs", extra_attrs=attrs)
    warnings = " ".join(_report(url).warnings)
    for text in present:
        assert text in warnings
    for text in absent:
        assert text not in warnings


def _add_confirmation(url: str, of: int, ok: bool) -> int:
    study = optuna.load_study(study_name=None, storage=url)
    source = study.trials[of]
    attrs = {**source.user_attrs, "role": "confirm", "confirm_of": of, "steps": 90}
    if not ok:
        attrs = {"role": "confirm", "confirm_of": of, "outcome": "oom", "reason": "CUDA out of memory"}
    state = optuna.trial.TrialState.COMPLETE if ok else optuna.trial.TrialState.FAIL
    study.add_trial(
        optuna.trial.create_trial(
            state=state,
            value=attrs.get("samples_per_s") if ok else None,
            params=source.params,
            distributions=source.distributions,
            user_attrs=attrs,
        )
    )
    return study.trials[-1].number


def test_the_sweeps_own_pick_and_its_confirmation(tmp_path: Path, template: Path) -> None:
    url, study = clone_study(template, tmp_path / "runs", extra_attrs={"best_trial": 2})
    number = _add_confirmation(url, 2, ok=True)
    study.set_user_attr("confirmed_by", number)
    md = rep.render_markdown(_report(url))
    assert "; confirmed by a longer run, trial 7" in md
    assert "| 7 (confirms 2) | quantization int8-quanto → none, optimizer adamw8bit → adamw | ok |" in md


def test_a_remeasure_is_tagged_with_the_trial_it_runs_again(tmp_path: Path, template: Path) -> None:
    url, _ = clone_study(template, tmp_path / "runs")
    study = optuna.load_study(study_name=None, storage=url)
    source = study.trials[2]
    study.add_trial(
        optuna.trial.create_trial(
            state=optuna.trial.TrialState.COMPLETE,
            value=source.value,
            params=source.params,
            distributions=source.distributions,
            user_attrs={**source.user_attrs, "role": "remeasure", "remeasure_of": 2},
        )
    )
    report = _report(url)
    assert "| 7 (re-measures 2) |" in rep.render_markdown(report)
    trials = json.loads(rep.render_json(report))["trials"]
    assert trials[7]["remeasure_of"] == 2 and "remeasure_of" not in trials[2]


def test_a_finished_sweep_without_a_winner_is_not_second_guessed(tmp_path: Path, template: Path) -> None:
    url, _ = clone_study(template, tmp_path / "runs", extra_attrs={"best_trial": None})
    report = _report(url)
    assert report.best is None and report.command is None
    assert "no config has fit yet" in rep.render_markdown(report)


def test_ltx2_peak_caveat_only_for_ltx2(tmp_path: Path, template: Path) -> None:
    url, _ = clone_study(template, tmp_path / "a", settings={"trainer": "ltx2"})
    assert any("device-wide" in w for w in _report(url).warnings)
    url, _ = clone_study(template, tmp_path / "b")
    assert not any("device-wide" in w for w in _report(url).warnings)


# --- the winner rule (table-driven) --------------------------------------------------------------


def _row(
    number: int, sps: float, step: float = 1.0, spread: float = 0.0, fits: bool = True, **params: Any
) -> rep.TrialRow:
    return rep.TrialRow(
        number=number,
        state="complete",
        params={**BASE, **params},
        changed={},
        outcome="ok",
        measures={"samples_per_s": sps, "step_time_s": step, "step_time_spread_s": spread, "fits": fits},
    )


def _confirm(row: rep.TrialRow, of: int) -> rep.TrialRow:
    row.confirm_of = of
    return row


@pytest.mark.parametrize(
    ("rows", "winner", "beaten"),
    [
        ([], None, None),
        ([_row(0, 1.0), _row(1, 2.0)], 1, None),
        ([_row(0, 1.0), _row(1, 2.0, fits=False)], 0, None),  # too big never wins
        # within noise: the higher-fidelity one wins, and the report says which one it beat
        ([_row(0, 1.00, spread=0.03, quantization="none"), _row(1, 1.02, spread=0.03)], 0, 1),
        # outside noise: speed wins over fidelity
        ([_row(0, 1.00, spread=0.01, quantization="none"), _row(1, 1.10, spread=0.01)], 1, None),
        # no spread measured: the run-to-run floor (1.5 %) still makes a near-tie
        ([_row(0, 1.0, quantization="none"), _row(1, 1.01)], 0, 1),
        ([_row(0, 1.0, quantization="none"), _row(1, 1.02)], 1, None),
        ([_row(0, 1.0, quantization="none", optimizer="adamw"), _row(1, 1.0, quantization="none")], 0, None),
        # a confirmation re-run is never a candidate of its own
        ([_row(0, 1.0), _confirm(_row(1, 2.0), of=0)], 0, None),
    ],
)
def test_pick_best(rows: list[rep.TrialRow], winner: int | None, beaten: int | None) -> None:
    best, faster = rep.pick_best(rows, rep.DEFAULT_FIDELITY, limit_gb=40.0)
    assert (best.number if best else None) == winner
    assert (faster.number if faster else None) == beaten


# --- reading the study ---------------------------------------------------------------------------


def test_missing_database_is_a_usage_error_and_is_not_created(tmp_path: Path) -> None:
    db = tmp_path / "nowhere" / "studies.db"
    with pytest.raises(rep.StudyNotFoundError, match="no study database"):
        rep.open_study(f"sqlite:///{db}", None)
    assert not db.exists() and not db.parent.exists()


def test_unknown_study_names_the_ones_there(known: tuple[Path, str]) -> None:
    with pytest.raises(rep.StudyNotFoundError, match=r"no study named 'other'.*demo-48gb"):
        rep.open_study(known[1], "other")


def test_several_studies_need_a_name(known: tuple[Path, str]) -> None:
    url = known[1]
    optuna.create_study(study_name="second", storage=url)
    with pytest.raises(rep.StudyNotFoundError, match=r"several studies \(demo-48gb, second\).*--study"):
        rep.open_study(url, None)
    assert rep.open_study(url, "second").study_name == "second"


def test_a_file_that_is_not_a_study_database(tmp_path: Path) -> None:
    bogus = tmp_path / "studies.db"
    bogus.write_text("not sqlite at all\n")
    with pytest.raises(StorageError, match=r"is not an SQLite database.*never writes to such a file"):
        rep.open_study(f"sqlite:///{bogus}", None)
    assert bogus.read_text() == "not sqlite at all\n"


def test_reporting_never_writes_to_the_study(known: tuple[Path, str]) -> None:
    workdir, url = known
    db = workdir / "studies.db"
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    report = _report(url)
    for render in rep.RENDERERS.values():
        render(report)
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before


def test_timeline_reader_skips_rows_without_a_reading(tmp_path: Path) -> None:
    csv = tmp_path / "memory.csv"
    csv.write_text("t_s,vram_gb,host_rss_gb\n0.0,1.5,2.0\n0.5,,2.1\ngarbage\n1.0,nan,2.2\n1.5,3.25,2.3\n")
    assert rep.read_timeline(csv) == [(0.0, 1.5), (1.5, 3.25)]
    assert rep.read_timeline(tmp_path / "absent.csv") == []


# --- the command line ----------------------------------------------------------------------------


def test_cli_markdown_to_stdout_with_single_study(
    known: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    workdir, url = known
    assert main(["report", "--storage", url]) == 0
    out = capsys.readouterr().out
    assert _normalise(out, workdir) == (DATA / "demo.md").read_text(encoding="utf-8")


def test_cli_workdir_gives_the_default_storage(
    known: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    workdir, _ = known
    assert main(["report", "--workdir", str(workdir), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["best"]["trial"] == 2


def test_cli_default_storage_is_under_autotune_runs(
    tmp_path: Path, template: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["report"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no study database at 'autotune-runs/studies.db'")
    assert not (tmp_path / "autotune-runs").exists()
    shutil.copytree(template, tmp_path / "autotune-runs")
    assert main(["report", "--format", "json"]) == 0


def test_cli_unknown_study_exits_2(known: tuple[Path, str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "--storage", known[1], "--study", "nope"]) == 2
    assert "no study named 'nope'" in capsys.readouterr().err


def test_cli_output_file_and_written_config(tmp_path: Path, known: tuple[Path, str]) -> None:
    workdir, url = known
    baseline = workdir / "baseline.yaml"
    baseline.write_text(
        "# my settings\noptimization:\n  batch_size: 1  # per GPU\n  gradient_accumulation_steps: 4\n"
        '  optimizer_type: "adamw8bit"\n  enable_gradient_checkpointing: true\n  steps: 2000\n'
        'acceleration:\n  quantization: "int8-quanto"  # saves memory\n'
    )
    out, cfg = tmp_path / "r.html", tmp_path / "out" / "winner.yaml"
    assert (
        main(["report", "--storage", url, "--format", "html", "-o", str(out), "--write-config", str(cfg)])
        == 0
    )
    assert out.read_text().startswith("<!DOCTYPE html>") and str(cfg) in out.read_text()
    assert cfg.read_text() == (
        "# my settings\noptimization:\n  batch_size: 1  # per GPU\n  gradient_accumulation_steps: 4\n"
        '  optimizer_type: "adamw"\n  enable_gradient_checkpointing: true\n  steps: 2000\n'
        "acceleration:\n  quantization: null  # saves memory\n"
    )


def test_cli_written_config_from_a_flow_style_baseline_keeps_its_spelling(
    tmp_path: Path, known: tuple[Path, str]
) -> None:
    workdir, url = known
    flow = (
        "# my settings\noptimization: {batch_size: 1, gradient_accumulation_steps: 4,  # per GPU\n"
        '  optimizer_type: "adamw8bit", enable_gradient_checkpointing: True, steps: 2000}\n'
        "acceleration: {quantization: none}  # saves memory\n"
    )
    (workdir / "baseline.yaml").write_text(flow)
    cfg = tmp_path / "winner.yaml"
    assert (
        main(
            [
                "report",
                "--storage",
                url,
                "--format",
                "json",
                "-o",
                str(tmp_path / "r.json"),
                "--write-config",
                str(cfg),
            ]
        )
        == 0
    )
    assert cfg.read_text() == flow.replace('"adamw8bit"', '"adamw"')  # `none`, `True`, quotes: as written


def test_cli_write_config_without_a_winner_fails_clearly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, _ = _bare_study(tmp_path)
    assert main(["report", "--storage", url, "--write-config", str(tmp_path / "w.yaml")]) == 1
    assert "has no config that fit yet" in capsys.readouterr().err
    assert not (tmp_path / "w.yaml").exists()


# --- what the sweep writes at its end --------------------------------------------------------------


def _changed_lines(before: str, after: str) -> list[tuple[str, str]]:
    a, b = before.splitlines(), after.splitlines()
    assert len(a) == len(b), "lines were added or removed"
    return [(x, y) for x, y in zip(a, b, strict=True) if x != y]


def test_write_reports_on_the_real_low_vram_config(tmp_path: Path, ltx2_fixtures: Path) -> None:
    baseline = ltx2_fixtures / "t2v_lora_low_vram.yaml"
    _, study = build_study(tmp_path, baseline_config=baseline, base_gas=1)
    paths = rep.write_reports(study, tmp_path)
    assert sorted(p.name for p in paths) == ["best-config.yaml", "report.html", "report.json", "report.md"]
    report = json.loads((tmp_path / "report.json").read_text())
    best = report["best"]
    changed = {k for k in KNOB_KEYS if best["params"][k] != BASE[k]}
    assert changed, "the winner should differ from the baseline"
    lines = _changed_lines(baseline.read_text(), (tmp_path / "best-config.yaml").read_text())
    leaves = sorted(KNOB_KEYS[k].rsplit(".", 1)[1] for k in changed)
    assert sorted(old.split(":")[0].strip() for old, _ in lines) == leaves
    assert "python scripts/train.py" in (tmp_path / "report.md").read_text()


def test_ltx2_adapter_writes_only_the_winning_knobs(tmp_path: Path, ltx2_fixtures: Path) -> None:
    baseline = ltx2_fixtures / "t2v_lora_low_vram.yaml"
    _, study = build_study(tmp_path, trainer="ltx2", baseline_config=baseline, base_gas=1)
    rep.write_reports(study, tmp_path)
    written = tmp_path / "best-config.yaml"
    assert written.is_file(), (tmp_path / "report.md").read_text()
    report = json.loads((tmp_path / "report.json").read_text())
    changed = {k for k in KNOB_KEYS if report["best"]["params"][k] != BASE[k]}
    lines = _changed_lines(baseline.read_text(), written.read_text())
    leaves = sorted(KNOB_KEYS[k].rsplit(".", 1)[1] for k in changed)
    assert sorted(old.split(":")[0].strip() for old, _ in lines) == leaves
    assert report["command"] and str(written) in report["command"]


@pytest.mark.parametrize("trainer_printed_a_peak", [True, False])
def test_the_trainers_peak_note_only_where_the_winner_has_the_trainers_peak(
    tmp_path: Path, ltx2_fixtures: Path, trainer_printed_a_peak: bool
) -> None:
    """LTX-2's note on how its 'Peak GPU memory' is taken explains a figure beside ours; on CPU the
    trainer prints 0.00 GB, read as no figure, and the note would explain nothing."""
    baseline = ltx2_fixtures / "t2v_lora_low_vram.yaml"
    _, study = build_study(
        tmp_path, trainer="ltx2", baseline_config=baseline, base_gas=1, trainer_peaks=trainer_printed_a_peak
    )
    rep.write_reports(study, tmp_path)
    report = json.loads((tmp_path / "report.json").read_text())
    assert (report["best"].get("trainer_peak_vram_gb") is not None) is trainer_printed_a_peak
    md = (tmp_path / "report.md").read_text()
    assert ("'Peak GPU memory') is device-wide" in md) is trainer_printed_a_peak, md


# --- HTML in a real browser ------------------------------------------------------------------------


def test_html_is_self_contained(known: tuple[Path, str]) -> None:
    html = rep.render_html(_report(known[1]))
    assert "<script" not in html and " src=" not in html and " href=" not in html and "url(" not in html
    assert html.count("<svg") == 2 and 'id="speed-chart"' in html and 'id="memory-chart"' in html
    assert "winner #2" in html and "headroom limit 43.19 GiB" in html and "card 47.99 GiB" in html


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.browser
def test_html_renders_its_charts_in_headless_chromium(tmp_path: Path, known: tuple[Path, str]) -> None:
    browser = _chromium()
    if browser is None:
        if IN_CI:
            pytest.fail("chromium is required in CI (apt-get install chromium)")
        pytest.skip("chromium not installed")
    page, shot = tmp_path / "report.html", tmp_path / "shot.png"
    page.write_text(rep.render_html(_report(known[1])), encoding="utf-8")
    subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}",
            f"--screenshot={shot}",
            "--window-size=1200,2000",
            page.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    width, height, rows = read_png(shot)
    assert (width, height) == (1200, 2000)
    counts = colour_counts(rows)
    assert len(counts) > 50, "the screenshot is blank"

    def pixels(hex_colour: str) -> int:
        rgb = tuple(int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
        return sum(n for c, n in counts.items() if max(abs(c[i] - rgb[i]) for i in range(3)) <= 2)

    # Colours only the charts draw: the trial points and the memory lines.
    assert pixels(rep.OUTCOME_COLORS["ok"]) > 200  # four ok points
    assert pixels(rep.OUTCOME_COLORS["over"]) > 50  # the one above the headroom limit
    assert pixels(rep.OUTCOME_COLORS["oom"]) > 200  # the OOM cross and the card lines
    assert pixels(rep.LINE_COLORS[0]) > 300 and pixels(rep.LINE_COLORS[1]) > 300


# --- the chart helpers ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("upper", "ticks"),
    [
        (1.0, [0, 0.2, 0.4, 0.6, 0.8, 1.0]),
        (47.99, [0, 10, 20, 30, 40, 50]),
        (0.0, [0, 0.2, 0.4, 0.6, 0.8, 1.0]),
        (130, [0, 50, 100, 150]),
        (7, [0, 2, 4, 6, 8]),
    ],
)
def test_nice_ticks(upper: float, ticks: list[float]) -> None:
    from autotune.report.svgchart import nice_ticks

    assert nice_ticks(upper) == pytest.approx(ticks)


def test_downsample_keeps_the_peak() -> None:
    from autotune.report.svgchart import downsample

    pts = [(float(i), 1.0) for i in range(2000)]
    pts[1234] = (1234.0, 9.0)
    out = downsample(pts, limit=100)
    assert len(out) <= 100 and max(y for _, y in out) == 9.0


def test_expected_files_are_reviewed() -> None:
    """Guard: regenerating the expected files is a deliberate act, never left on."""
    assert not REGEN, "unset AUTOTUNE_REGEN_EXPECTED and review the diff of tests/data/report/"


@pytest.mark.parametrize(("trainer", "suffix"), [("ltx2", ".yaml"), ("reference", ".yaml"), ("sana", ".sh")])
def test_winning_config_file_has_the_trainers_own_suffix(trainer: str, suffix: str) -> None:
    from autotune.trainers import get_adapter

    adapter = get_adapter(trainer)
    assert rep._config_suffix(adapter) == suffix


def test_a_script_config_is_written_executable(tmp_path: Path) -> None:
    rep.write_text_atomic(tmp_path / "best-config.sh", "#!/usr/bin/env bash\necho hi\n")
    rep.write_text_atomic(tmp_path / "best-config.yaml", "a: 1\n")
    assert os.access(tmp_path / "best-config.sh", os.X_OK)
    assert not os.access(tmp_path / "best-config.yaml", os.X_OK)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best-config.sh", "best-config.yaml"]
