"""The musubi-tuner baseline command read: a launch script or a YAML record, its training script
known, its dataset TOML found and parsed (or taken from the heredoc a winning script carries)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autotune.config.tomledit import TomlConfig
from autotune.errors import ConfigError
from autotune.trainers.kit.argv import flag_value
from autotune.trainers.kit.launchscript import read_launch_record
from autotune.trainers.musubi.flags import DATASET_FLAG, SCRIPTS

#: The heredoc ``final_config`` writes the winning dataset TOML with (read back by ``load_baseline``).
HEREDOC = "AUTOTUNE_DATASET_TOML"


def read_command(text: str, path: Path | None, trainer_dir: Path | None) -> dict[str, Any]:
    """The baseline record (``script``, ``args``, ``launcher``, ``cwd``, ``env``, ``arch``, the
    dataset's path and text) of a command's text; ``trainer_dir`` replaces its ``cwd``."""
    source = str(path) if path else "<command>"
    command, dataset_text = split_heredoc(text, source)
    record = read_launch_record(command, path)
    if trainer_dir is not None:
        record["cwd"] = str(trainer_dir)
    script = Path(record["script"]).name
    if script not in SCRIPTS:
        raise ConfigError(
            f"{source}: {record['script']} is not a training script autotune knows for musubi-tuner; "
            f"it drives {', '.join(sorted(SCRIPTS))}"
        )
    args = record["args"]
    if flag_value(args, "--config_file") is not None:
        raise ConfigError(
            f"{source}: --config_file: autotune edits the command's own flags; write the options of "
            "that file on the command line instead"
        )
    dataset = flag_value(args, DATASET_FLAG)
    if dataset is None:
        raise ConfigError(
            f"{source}: the command has no {DATASET_FLAG} (musubi-tuner needs one, trainer_base.py:1394)"
        )
    dataset_path = Path(record["cwd"]) / Path(dataset).expanduser()
    if dataset_text is None:
        try:
            dataset_text = dataset_path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(
                f"{source}: {DATASET_FLAG} {dataset}: cannot read {dataset_path} ({exc.strerror}); "
                "give a path that exists (relative paths start at the folder the command runs in)"
            ) from None
    TomlConfig(dataset_text, str(dataset_path))  # a malformed file is named now, not in a trial
    record["arch"] = SCRIPTS[script]
    record["dataset_path"] = str(dataset_path)
    record["dataset_text"] = dataset_text
    return record


def split_heredoc(text: str, source: str) -> tuple[str, str | None]:
    """The command without the dataset TOML heredoc ``final_config`` writes, and that TOML (None: none)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.rstrip().endswith(f"<<'{HEREDOC}'")), None)
    if start is None:
        return text, None
    try:
        end = lines.index(HEREDOC, start + 1)
    except ValueError:
        raise ConfigError(
            f"{source}:{start + 1}: the dataset config block never ends (no {HEREDOC} line)"
        ) from None
    rest = lines[:start] + lines[end + 1 :]
    return "\n".join(rest) + "\n", "\n".join(lines[start + 1 : end]) + "\n"
