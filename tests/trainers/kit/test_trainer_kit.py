"""What trainers/kit gives every adapter: the shared options read in one place, ``read_metrics``'
skeleton (never raising), the flag trainers' argv and short-run flags, and the full run's line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.core.metrics import TrialMetrics
from autotune.errors import UsageError
from autotune.trainers.kit.argv import drop_flags
from autotune.trainers.kit.common import TRIAL_RECORD, adapter_options, folder_command
from autotune.trainers.kit.launchscript import python_argv
from autotune.trainers.kit.output import read_trial_metrics
from autotune.trainers.kit.readers.metricsfile import METRICS_FILE_NAME


def test_adapter_options_refuse_a_stranger_and_read_the_shared_ones(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"takes no option\(s\) hoook"):
        adapter_options({"hoook": False}, "x", ("hook",))
    with pytest.raises(UsageError, match="option hook must be true or false"):
        adapter_options({"hook": "no"}, "x", ("hook",))
    with pytest.raises(UsageError, match="launcher must be a non-empty list"):
        adapter_options({"launcher": "python"}, "x", ("launcher",))
    read = adapter_options({"hook": False, "trainer_dir": str(tmp_path)}, "x", ("hook", "trainer_dir"))
    assert (read.hook, read.trainer_dir, read.launcher) == (False, tmp_path, None)
    assert adapter_options({}, "x", ()).hook is True  # the hook is on unless turned off


def _trial(tmp_path: Path, **metrics_file: object) -> Path:
    (tmp_path / TRIAL_RECORD).write_text(json.dumps({"effective_batch": 4}))
    (tmp_path / METRICS_FILE_NAME).write_text(json.dumps(metrics_file))
    return tmp_path


def test_read_trial_metrics_puts_the_better_reading_first(tmp_path: Path) -> None:
    trial = _trial(tmp_path, step_time_s=0.5)

    def log(text: str, record: object) -> TrialMetrics:
        return TrialMetrics(step_time_s=0.25, source="log")

    file_first = read_trial_metrics(trial, "out", log, own_rate=True)
    log_first = read_trial_metrics(trial, "out", log, own_rate=True, log_first=True)
    assert (file_first.step_time_s, log_first.step_time_s) == (0.5, 0.25)
    assert file_first.samples_per_s == pytest.approx(4 / 0.5)  # the record's effective batch


def test_read_trial_metrics_takes_the_batch_the_text_corrects_and_never_raises(tmp_path: Path) -> None:
    trial = _trial(tmp_path, step_time_s=0.5)
    seen: list[tuple[str, int | None]] = []

    def real(text: str, asked: int | None) -> float:
        seen.append((text, asked))
        return 2.0

    read = read_trial_metrics(trial, "printed", lambda text, record: None, own_rate=True, real_batch=real)
    assert seen == [("printed", 4)]
    assert read.samples_per_s == pytest.approx(2 / 0.5)

    def broken(text: str, record: object) -> TrialMetrics:
        raise RuntimeError("a reader bug")

    assert read_trial_metrics(trial, "out", broken, own_rate=True) == TrialMetrics()


def test_python_argv_goes_through_accelerate_only_for_several_gpus() -> None:
    assert python_argv(["/v/python"], "train.py", ["--a", "1"], 1) == ["/v/python", "train.py", "--a", "1"]
    assert python_argv(["/v/python"], "train.py", ["--a"], 2) == [
        "/v/python", "-m", "accelerate.commands.launch", "--num_processes", "2", "train.py", "--a",
    ]  # fmt: skip


def test_drop_flags_leaves_the_rest_of_the_command() -> None:
    args = ["--resume", "ckpt", "--lr", "1e-4", "--save_state", "--push_to_hub"]
    assert drop_flags(args, ("--resume",), ("--save_state", "--push_to_hub")) == ["--lr", "1e-4"]


def test_folder_command_quotes_the_folder_the_env_and_the_argv(tmp_path: Path) -> None:
    folder = tmp_path / "my runs"
    assert folder_command(folder, ["python", "a b.py"], {"HF_HOME": "/x y"}) == (
        f"cd '{folder}' && HF_HOME='/x y' python 'a b.py'"
    )
    assert folder_command("ai-toolkit", ["python", "run.py"]) == "cd ai-toolkit && python run.py"
