"""The strategy's view of a study: one ``Observation`` per trial that tells it something."""

from __future__ import annotations

from optuna.trial import FrozenTrial, TrialState

from autotune.core.outcome import Outcome
from autotune.core.space import Space
from autotune.core.strategy import Observation
from autotune.errors import ConfigError
from autotune.store import study as st
from autotune.store.recovery import is_interrupted


def observations(
    study: st.SweepStudy, space: Space, *, include_confirm: bool = False
) -> list[tuple[FrozenTrial, Observation]]:
    """Every finished trial but the interrupted (and the confirmations), plus those running elsewhere
    (outcome None: never proposed again), each with the trial it came from."""
    out = []
    for t in study.trials():
        if is_interrupted(t) or (t.user_attrs.get("role") == "confirm" and not include_confirm):
            continue
        if t.state not in (TrialState.COMPLETE, TrialState.FAIL, TrialState.RUNNING):
            continue
        try:
            cand = space.candidate(t.params)
        except ConfigError:
            continue  # params from another knob set (should not happen: settings are checked)
        a = t.user_attrs
        running = t.state == TrialState.RUNNING
        sps, step, step_spread = a.get("samples_per_s"), a.get("step_time_s"), a.get("step_time_spread_s")
        spread = None  # relative, as the strategy wants it: 0.02 is 2 %
        if isinstance(step, (int, float)) and isinstance(step_spread, (int, float)) and step > 0:
            spread = step_spread / step
        out.append(
            (
                t,
                Observation(
                    candidate=cand,
                    outcome=None if running else a.get("outcome", Outcome.CRASH.value),
                    samples_per_s=sps if isinstance(sps, (int, float)) else None,
                    peak_vram_gb=a.get("peak_vram_gb"),
                    fits=a.get("fits"),
                    spread=spread,
                ),
            )
        )
    return out


def history(study: st.SweepStudy, space: Space, *, include_confirm: bool = False) -> list[Observation]:
    """The observations alone, as ``Strategy.next_candidate`` takes them."""
    return [o for _, o in observations(study, space, include_confirm=include_confirm)]
