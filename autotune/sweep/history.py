"""The strategy's view of a study: one ``Observation`` per trial that tells it something."""

from __future__ import annotations

from optuna.trial import FrozenTrial, TrialState

from autotune.core.record import TrialRecord
from autotune.core.space import Space
from autotune.core.strategy import Observation
from autotune.errors import ConfigError
from autotune.store import study as st


def observations(
    study: st.SweepStudy, space: Space, *, include_confirm: bool = False
) -> list[tuple[FrozenTrial, Observation]]:
    """Every finished trial but the interrupted (and the confirmations), plus those running elsewhere
    (outcome None: never proposed again), each with the trial it came from."""
    out = []
    for t in study.trials():
        record = TrialRecord.from_trial(t)
        if record.is_interrupted or (record.role == "confirm" and not include_confirm):
            continue
        if t.state not in (TrialState.COMPLETE, TrialState.FAIL, TrialState.RUNNING):
            continue
        try:
            cand = space.candidate(t.params)
        except ConfigError:
            continue  # params from another knob set (should not happen: settings are checked)
        out.append((t, Observation.from_record(cand, record)))
    return out


def history(study: st.SweepStudy, space: Space, *, include_confirm: bool = False) -> list[Observation]:
    """The observations alone, as ``Strategy.next_candidate`` takes them."""
    return [o for _, o in observations(study, space, include_confirm=include_confirm)]
