"""The loop's own reading and writing of the study stays the same per trial however long the study.

A sweep resumed on a study of 8 and of 60 finished trials (the synthetic ones of
``scripts/bench_overhead.py``, written through the real store API) runs 4 more real trials of the
fastest fake trainer; between two trial starts we count the trials Optuna's storage builds from
database rows and the SQL statements sent. Both must not depend on the study's size: a loop that
reads every trial before each decision builds hundreds of trials per trial at 60. Timings are
the benchmark's business (``scripts/bench_overhead.py``), not this test's.
"""

from __future__ import annotations

import io
import itertools
import re
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from optuna.storages import RDBStorage

from autotune.core.record import TrialRecord
from scripts import bench_overhead as bench


class _Counting(io.StringIO):
    """The sweep's progress stream: notes the counters at every "trial N started" line."""

    def __init__(self, counters: dict[str, int]) -> None:
        super().__init__()
        self.counters = counters
        self.at_start: list[tuple[int, dict[str, int]]] = []

    def write(self, s: str) -> int:
        m = re.match(r"trial (\d+) started", s)
        if m:
            self.at_start.append((int(m.group(1)), dict(self.counters)))
        return super().write(s)


def _per_trial(tmp_path: Path, size: int, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, int]]:
    folder = tmp_path / f"s{size}"
    folder.mkdir()
    bench._sweep(folder, 1)
    bench._prefill(folder, size)

    counters = {"built": 0, "sql": 0, "decoded": 0}
    build = RDBStorage._build_frozen_trial_from_trial_model

    def counting_build(self: RDBStorage, trial: Any) -> Any:
        counters["built"] += 1
        return build(self, trial)

    monkeypatch.setattr(RDBStorage, "_build_frozen_trial_from_trial_model", counting_build)
    from_trial = TrialRecord.from_trial.__func__  # type: ignore[attr-defined]

    def counting_from_trial(cls: type[TrialRecord], trial: Any) -> TrialRecord:
        counters["decoded"] += 1
        result: TrialRecord = from_trial(cls, trial)
        return result

    monkeypatch.setattr(TrialRecord, "from_trial", classmethod(counting_from_trial))

    def on_sql(*_args: Any) -> None:
        counters["sql"] += 1

    sa.event.listen(sa.engine.Engine, "before_cursor_execute", on_sql)
    stream = _Counting(counters)
    try:
        import optuna

        from autotune.sweep.api import run_sweep
        from autotune.sweep.options import SweepOptions

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        knobs, base, template = bench.write_inputs(folder)
        opts = SweepOptions(
            trainer="command", config=base, workdir=folder / "runs", study="bench", cmd=template,
            knob_file=knobs, vram_gb=16, steps=3, max_batch_size=bench.MAX_BATCH, max_trials=size + 4,
            trial_timeout_s=60, stall_timeout_s=60, hook=False,
        )  # fmt: skip
        run_sweep(opts, stream=stream, tty=False, nvml=False)
    finally:
        sa.event.remove(sa.engine.Engine, "before_cursor_execute", on_sql)
        monkeypatch.undo()
    starts = stream.at_start
    assert [n for n, _ in starts] == list(range(size, size + 4)), stream.getvalue()
    return [{k: b[k] - a[k] for k in a} for (_, a), (_, b) in itertools.pairwise(starts)]


@pytest.mark.timeout(300)
def test_reads_statements_and_decodes_per_trial_do_not_grow_with_the_study(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    small = _per_trial(tmp_path, 8, monkeypatch)
    large = _per_trial(tmp_path, 60, monkeypatch)
    print(f"\nper trial, at 8 trials: {small}; at 60: {large}")
    # The trials a turn builds: its own trial, read back a few times, and whatever changed.
    assert max(d["built"] for d in large) <= 12, large
    assert max(d["built"] for d in large) <= max(d["built"] for d in small) + 2, (small, large)
    # Statements: a constant number per trial (attrs batched: not one or two per key), the same
    # at 60 trials as at 8.
    assert max(d["sql"] for d in large) <= max(d["sql"] for d in small) + 3, (small, large)
    assert max(d["sql"] for d in large) <= 120, large
    # Trial records decoded: those of the trials that changed (a finished trial's record is kept
    # with it, ``TrialCache.memo``), not every trial's several times per turn.
    assert max(d["decoded"] for d in large) <= max(d["decoded"] for d in small) + 2, (small, large)
    assert max(d["decoded"] for d in large) < 60, large


def test_the_fast_reader_builds_the_trials_optuna_builds(tmp_path: Path) -> None:
    """``read_trials`` (plain SELECTs) against Optuna's own ``get_all_trials``, field by field,
    on every kind of trial: finished, failed, running, with intermediate values and an inf."""
    import optuna
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
    from optuna.trial import TrialState, create_trial

    from autotune.store import optuna_private as op
    from autotune.store.storage import open_storage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = open_storage(f"sqlite:///{tmp_path / 'studies.db'}")
    study = optuna.create_study(storage=storage, study_name="s", direction="maximize")
    dist = {
        "q": CategoricalDistribution(["int8-quanto", None, True]),
        "b": IntDistribution(1, 64, log=True),
        "lr": FloatDistribution(1e-5, 1e-2),
    }
    for i, (state, value) in enumerate(
        [(TrialState.COMPLETE, 1.5), (TrialState.FAIL, None), (TrialState.COMPLETE, float("inf"))]
    ):
        study.add_trial(
            create_trial(
                state=state, value=value, params={"q": [None, True, "int8-quanto"][i], "b": 2**i, "lr": 1e-3},
                distributions=dist, user_attrs={"outcome": "ok", "nested": {"a": [1, None]}},
                system_attrs={"constraints": [0.0 - i]}, intermediate_values={0: 1.0, 3: float("nan")},
            )
        )  # fmt: skip
    running = study.ask(dist)
    running.set_user_attr("pid", 7)
    sid = storage.get_study_id_from_name("s")
    want = storage.get_all_trials(sid, deepcopy=False)
    got = op.read_trials(storage, sid)

    def fields(t: Any) -> tuple[Any, ...]:
        inter = {k: ("nan" if v != v else v) for k, v in t.intermediate_values.items()}
        return (t.number, t.state, t.values, t.datetime_start, t.datetime_complete, t.params,
                t.distributions, t.user_attrs, t.system_attrs, inter, t._trial_id)  # fmt: skip

    assert [fields(t) for t in got] == [fields(t) for t in want]
    since = op.read_trials(storage, sid, changed_ids={op.trial_id(want[0])}, after_id=op.trial_id(want[2]))
    assert [t.number for t in since] == [0, 3]
