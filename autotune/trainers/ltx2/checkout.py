"""The LTX-2 checkout on disk: where its trainer package is, and how many samples its data holds.

Kept apart from the adapter (``autotune.trainers.ltx2.adapter``), which knows the config's keys:
these functions only look at folders, so the adapter stays about configs and launch lines.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from autotune.errors import CandidateRefused, UsageError
from autotune.trainers.ltx2.data import count_samples

TRAIN_SCRIPT = "scripts/train.py"
TRAINER_SUBDIR = "packages/ltx-trainer"


def trainer_package(folder: Path) -> Path | None:
    """``folder`` itself or its ``packages/ltx-trainer``, whichever holds ``scripts/train.py``."""
    for candidate in (folder, folder / TRAINER_SUBDIR):
        if (candidate / TRAIN_SCRIPT).is_file():
            return candidate.resolve()
    return None


def find_trainer_package(trainer_dir: Path | None, hints: Iterable[Path]) -> Path:
    """The trainer's package folder: in ``trainer_dir`` when given (else an error), else the
    first of ``hints`` that holds it."""
    if trainer_dir is not None:
        found = trainer_package(trainer_dir)
        if found:
            return found
        raise UsageError(
            f"no LTX-2 trainer at {trainer_dir}: expected {TRAIN_SCRIPT} or "
            f"{TRAINER_SUBDIR}/{TRAIN_SCRIPT} there. Point --trainer-dir at your LTX-2 checkout."
        )
    for hint in hints:
        found = trainer_package(hint)
        if found:
            return found
    raise UsageError(
        "cannot find the LTX-2 trainer (packages/ltx-trainer/scripts/train.py) near the config or "
        "the current folder; pass --trainer-dir /path/to/LTX-2"
    )


def sample_limit(root: Any, sources: list[str], cwd: Path, num_gpus: int) -> tuple[int, Path, int] | None:
    """(largest per-GPU batch, data root, sample count) when the preprocessed data under ``root``
    (relative to the trainer's ``cwd``) is on this machine with every folder in ``sources``; None
    when it is not. Samples are counted as the trainer counts them (``ltx2.data.count_samples``)."""
    if not isinstance(root, str) or not root:
        return None
    folder = cwd / Path(root).expanduser()
    try:
        if not folder.is_dir():
            return None
    except OSError:
        return None
    count = count_samples(folder, sources)
    if count is None:
        return None
    return count // max(1, num_gpus), folder, count


def check_batch_fits(
    batch: int, limit: tuple[int, Path, int] | None, num_gpus: int, sources: list[str]
) -> None:
    """Refuse a batch larger than the preprocessed data (``sample_limit``'s answer) can fill."""
    if limit is not None and batch > limit[0]:
        raise CandidateRefused(
            f"batch_size {batch} needs at least {batch * max(1, num_gpus)} preprocessed samples "
            f"({batch} per GPU x {max(1, num_gpus)} GPU(s)), but {limit[1]} holds {limit[2]} "
            f"(.pt files found in each of {', '.join(d + '/' for d in sources)}): "
            "the LTX-2 trainer would die with StopIteration. Preprocess more samples or cap "
            "--max-batch-size."
        )
