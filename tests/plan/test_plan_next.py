"""``autotune plan``'s ``Next:`` line runs as printed, from any folder, and a sweep that cannot
start its trials leaves no trial RUNNING behind (``status`` would show it with its time climbing).

The checkout is the real trainer's shipped configs (``../shared/fixtures/ltx2``) beside the fake
LTX-2 trainer (``tests/fakes/ltx2-trainer``), the data real ``torch.save`` latents."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import optuna
import pytest

from autotune.cli import main
from tests.helpers import FAKES

pytestmark = [pytest.mark.process, pytest.mark.torch]


@pytest.fixture
def checkout(tmp_path: Path, ltx2_fixtures: Path) -> Path:
    """An LTX-2 repo: the real shipped configs and the fake trainer, linked in place (never copied)."""
    pkg = tmp_path / "LTX-2" / "packages" / "ltx-trainer"
    (pkg / "configs").mkdir(parents=True)
    (pkg / "scripts").mkdir()
    (pkg / "scripts" / "train.py").symlink_to(FAKES / "ltx2-trainer" / "scripts" / "train.py")
    for f in ltx2_fixtures.glob("*.yaml"):
        (pkg / "configs" / f.name).symlink_to(f)
    (pkg / "configs" / "accelerate").symlink_to(ltx2_fixtures / "accelerate")
    return tmp_path / "LTX-2"


def _assets(root: Path) -> list[str]:
    import torch

    for i in range(2):
        for source in ("latents", "conditions", "audio_latents"):
            (root / "data" / source).mkdir(parents=True, exist_ok=True)
        latents = torch.zeros(128, 2, 3, 3, dtype=torch.bfloat16)
        torch.save({"latents": latents, "num_frames": 2, "height": 3, "width": 3, "fps": 24.0},
                   root / "data" / "latents" / f"s{i}.pt")  # fmt: skip
        torch.save({"prompt_embeds": torch.zeros(4, 8)}, root / "data" / "conditions" / f"s{i}.pt")
        torch.save({"latents": torch.zeros(8, 4, 16)}, root / "data" / "audio_latents" / f"s{i}.pt")
    (root / "gemma").mkdir()
    (root / "ltx-2.safetensors").write_bytes(b"\0")
    return ["--model", str(root / "ltx-2.safetensors"), "--text-encoder", str(root / "gemma"),
            "--data", str(root / "data")]  # fmt: skip


def _next_line(out: str) -> list[str]:
    lines = [line for line in out.splitlines() if line.startswith("Next: ")]
    assert len(lines) == 1, out
    return shlex.split(lines[0].removeprefix("Next: "))


def test_the_printed_sweep_runs_as_printed_from_another_folder(
    checkout: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assets = _assets(tmp_path / "assets")
    plan_file = tmp_path / "plans" / "plan.yaml"
    rc = main(["plan", "--trainer-dir", str(checkout), "--vram-gb", "32", *assets, "-o", str(plan_file),
               "--trainer-python", sys.executable])  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0, out
    argv = _next_line(out)
    assert argv[:2] == ["autotune", "sweep"]
    assert argv[argv.index("--trainer-dir") + 1] == str(checkout / "packages" / "ltx-trainer")
    assert argv[argv.index("--vram-gb") + 1] == "32"  # no GPU here: the card it planned for
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # neither the checkout nor the plan's folder
    monkeypatch.setenv("FAKE_LTX2_PEAK_GB", "20")
    rc = main([*argv[1:], "--steps", "3", "--max-trials", "1", "--workdir", str(elsewhere / "runs")])
    out, err = capsys.readouterr()
    assert rc == 0, out + err
    print(out, err)
    assert "trial 0 ok" in out + err, out + err
    storage = f"sqlite:///{elsewhere / 'runs' / 'studies.db'}"
    (study,) = optuna.get_all_study_summaries(storage)
    trials = optuna.load_study(study_name=study.study_name, storage=storage).trials
    assert [t.state for t in trials] == [optuna.trial.TrialState.COMPLETE]


def test_a_sweep_that_cannot_start_leaves_no_trial_running(
    checkout: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assets = _assets(tmp_path / "assets")
    plan_file = tmp_path / "plans" / "plan.yaml"
    assert (
        main(["plan", "--trainer-dir", str(checkout), "--vram-gb", "32", *assets, "-o", str(plan_file)]) == 0
    )
    argv = _next_line(capsys.readouterr().out)
    at = argv.index("--trainer-dir")
    del argv[at : at + 2]  # the command as it was printed before: no checkout named
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    runs = elsewhere / "runs"
    rc = main([*argv[1:], "--trainer-python", sys.executable, "--steps", "3", "--workdir", str(runs)])
    out, err = capsys.readouterr()
    assert rc in (1, 2), out + err
    assert "error:" in err and "ltx-trainer" in err, err
    storage = f"sqlite:///{runs / 'studies.db'}"
    for summary in optuna.get_all_study_summaries(storage) if (runs / "studies.db").exists() else []:
        states = [t.state for t in optuna.load_study(study_name=summary.study_name, storage=storage).trials]
        assert optuna.trial.TrialState.RUNNING not in states, states
    main(["status", "--storage", storage])
    status = capsys.readouterr().out
    assert "running" not in status.lower(), status
