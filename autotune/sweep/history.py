"""The strategy's view of a study: one ``Observation`` per trial that tells it something."""

from __future__ import annotations

from optuna.trial import FrozenTrial, TrialState

from autotune.core.space import Space
from autotune.core.strategy import Observation
from autotune.errors import ConfigError
from autotune.store import study as st


def observations(
    study: st.SweepStudy, space: Space, *, include_confirm: bool = False
) -> list[tuple[FrozenTrial, Observation]]:
    """Every finished trial but the interrupted (and the confirmations), plus those running elsewhere
    (outcome None: never proposed again), each with the trial it came from. Each trial's
    observation is made once per trial as read (``SweepStudy.memo``): the strategy asks every turn."""
    key = ("observation", id(space), include_confirm)
    out = []
    for t in study.trials():
        made = study.memo(t, key, lambda t: (space, _observe(study, space, t, include_confirm)))
        obs = made[1] if made[0] is space else _observe(study, space, t, include_confirm)
        if obs is not None:
            out.append((t, obs))
    return out


def _observe(study: st.SweepStudy, space: Space, t: FrozenTrial, include_confirm: bool) -> Observation | None:
    record = study.record(t)
    if record.is_interrupted or (record.role == "confirm" and not include_confirm):
        return None
    if t.state not in (TrialState.COMPLETE, TrialState.FAIL, TrialState.RUNNING):
        return None
    try:
        cand = space.candidate(t.params)
    except ConfigError:
        return None  # params from another knob set (should not happen: settings are checked)
    return Observation.from_record(cand, record)


def history(study: st.SweepStudy, space: Space, *, include_confirm: bool = False) -> list[Observation]:
    """The observations alone, as ``Strategy.next_candidate`` takes them."""
    return [o for _, o in observations(study, space, include_confirm=include_confirm)]
