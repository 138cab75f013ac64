"""No two trials of a study run the same command: a digest of each rendered launch.

Why: a knob the trainer never receives makes two candidates one command (the issue's
``--cmd`` sweep ran 5 of 12 trials twice, and one of the twins lost a near-tie on knob
values the script never saw). The space is narrowed to the knobs in play, so this should
not happen; this guard makes sure of it for every adapter. The digest covers what the trial
would run: the argv, the working folder, the environment the adapter sets and the bytes of
every file ``render`` wrote in the trial folder that the argv or the environment names (the
config), with the trial's own folder replaced by a placeholder, since that is the one thing
every trial differs in.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from autotune.core.outcome import Outcome
from autotune.core.record import TrialRecord
from autotune.execution.launch import LaunchSpec

_HOLE = "{trial_dir}"
#: Attrs of the earlier trial that belong to its own run, not to its result.
_NOT_REUSED = frozenset(
    {
        "role",
        "trial_tag",
        "orchestrator_pid",
        "orchestrator_host",
        "orchestrator_start",
        "orchestrator_place",
        "pid",
        "pgid",
        "pid_start",
        "process_mark",
        "trial_dir",
        "confirm_of",
        "wall_s",
        "spent_s",
        "same_command_as",
        "command",  # the twin's own, with its own folder
    }
)


def launch_digest(spec: LaunchSpec, trial_dir: Path) -> str:
    """sha256 of the rendered launch, the trial folder's path left out (``spec``: as the adapter
    rendered it, before the sweep adds its own per-trial environment)."""
    folders = sorted({str(trial_dir), str(Path(trial_dir).resolve())}, key=len, reverse=True)

    def plain(text: str) -> str:
        for folder in folders:
            text = text.replace(folder, _HOLE)
        return text

    h = hashlib.sha256()
    head = {
        "argv": [plain(a) for a in spec.argv],
        "cwd": plain(str(spec.cwd)) if spec.cwd is not None else None,
        "env": {k: plain(v) for k, v in sorted(spec.env.items())},
    }
    h.update(json.dumps(head, sort_keys=True).encode("utf-8"))
    root = Path(trial_dir)
    named = "\n".join([*spec.argv, *spec.env.values()])
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        if str(path) not in named and str(path.resolve()) not in named:
            continue  # a file the command does not name (autotune's own trial record) is not its input
        data = path.read_bytes()
        for folder in folders:
            data = data.replace(folder.encode("utf-8"), _HOLE.encode("utf-8"))
        h.update(b"\0" + path.relative_to(root).as_posix().encode("utf-8") + b"\0")
        h.update(hashlib.sha256(data).digest())
    return h.hexdigest()


def earlier_same(
    trials: Sequence[FrozenTrial],
    digest: str,
    number: int,
    record_of: Callable[[FrozenTrial], TrialRecord] = TrialRecord.from_trial,
) -> FrozenTrial | None:
    """The first finished trial (not ``number``) that ran this very launch and has a result to
    reuse: an interrupted one has none, so it runs again (``record_of``: the study's cached reader)."""
    for t in trials:
        if t.number == number or t.state not in (TrialState.COMPLETE, TrialState.FAIL):
            continue
        record = record_of(t)
        if record.get("launch_digest") != digest or record.outcome in (None, Outcome.INTERRUPTED.value):
            continue
        if record.get("same_command_as") is not None:
            continue  # a reuse itself: point at the trial that ran
        return t
    return None


def reused_attrs(earlier: FrozenTrial) -> dict[str, Any]:
    """The attrs a twin of ``earlier`` is finished with: its result, and where it came from."""
    attrs: Mapping[str, Any] = earlier.user_attrs
    out = {k: v for k, v in attrs.items() if k not in _NOT_REUSED}
    why = f"same command as trial {earlier.number}, not run again (its result reused)"
    reason = str(attrs.get("reason") or "")
    out.update(
        TrialRecord.attrs_of(
            same_command_as=earlier.number,
            reason=f"{why}: {reason}" if reason else why,
            wall_s=0.0,
        )
    )
    return out
