"""Every use of Optuna's private attributes and internal modules, in one place.

Why a module of its own: Optuna may rename or move anything private in any release. Here each
reach is one small function saying why we need it and what breaks if it changes, so an Optuna
upgrade is checked in one file (``tests/store/test_study.py``, ``tests/store/test_claims.py`` and
``tests/store/test_pg_storage.py`` exercise every function below). Nothing else in ``autotune``
touches a name of Optuna's that starts with ``_`` or an undocumented attribute.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import BaseStorage, RDBStorage
from optuna.trial import FrozenTrial
from sqlalchemy.engine import Engine


def trial_id(trial: FrozenTrial) -> int:
    """The storage's id of a trial (``FrozenTrial._trial_id``).

    Why: Optuna's storage API addresses trials by id, while ``FrozenTrial`` shows only its
    ``number``; the public way back (``get_trial_id_from_study_id_trial_number``) costs one
    query per trial, and the sweep asks for ids on every write. If Optuna renames it, every
    call fails at once with ``AttributeError`` (nothing is written wrongly).
    """
    return int(trial._trial_id)


def study_storage(study: optuna.Study) -> BaseStorage:
    """The storage behind an ``optuna.Study`` (``Study._storage``).

    Why: failing another worker's trial with its outcome and reason means writing user attrs
    of a trial this process never asked for, by id; ``Study`` has no public API for that
    (``tell`` sets only the state). If it moves, reaping and recording fail with
    ``AttributeError``; the claims tests say so.
    """
    storage: BaseStorage = study._storage
    return storage


def engine(storage: RDBStorage) -> Engine:
    """The SQLAlchemy engine an ``RDBStorage`` made (``RDBStorage.engine``, undocumented).

    Why: the claims table lives beside Optuna's tables and must use the same connections
    (SQLite's lock timeout, PostgreSQL's setup lock; one pool per process), and SQLite's
    commit mode is set on it. If it goes, opening storage fails with ``AttributeError``.
    """
    eng: Engine = storage.engine
    return eng


#: The trial system attr Optuna's constrained samplers write (``optuna.study._constrained_optimization
#: ._CONSTRAINTS_KEY``): a list of floats, the trial feasible when all are <= 0.
CONSTRAINTS_KEY = "constraints"


def set_trial_constraints(storage: RDBStorage, trial_id: int, values: Sequence[float]) -> None:
    """Store a trial's constraint values the way Optuna's constrained samplers do.

    Why: ``study.best_trial``, ``optuna best-trial`` and ``optuna-dashboard`` rank only feasible
    trials once any trial has constraints, and read them from this private key (the dashboard
    reads only this list form, not ``Trial.set_constraint``'s ``constraints:<name>`` keys).
    Written with Optuna's own ORM model (``optuna.storages._rdb.models``), because its public
    ``set_trial_system_attr`` refuses a finished trial and a resume fills the values in on
    trials stored before they existed. A race with another writer of the same trial (both
    inserting) is ignored: both computed the same value from the same stored record. If the
    key is renamed, Optuna's tools rank too-big trials again (``tests/store/test_optuna_tools.py``
    fails); if the model moves, this fails with ``ImportError`` or ``AttributeError``.
    """
    write_trial_attrs(storage, trial_id, {}, {CONSTRAINTS_KEY: [float(v) for v in values]}, finished_ok=True)


def has_constraints(trial: FrozenTrial) -> bool:
    """Whether a stored trial carries constraint values (see ``set_trial_constraints``)."""
    return CONSTRAINTS_KEY in trial.system_attrs


def set_trial_user_attrs(storage: RDBStorage, trial_id: int, attrs: Mapping[str, Any]) -> None:
    """All of ``attrs`` of one running trial in one transaction (``write_trial_attrs``)."""
    write_trial_attrs(storage, trial_id, attrs)


def write_trial_attrs(
    storage: RDBStorage,
    trial_id: int,
    user: Mapping[str, Any],
    system: Mapping[str, Any] | None = None,
    *,
    finished_ok: bool = False,
) -> None:
    """A trial's user and system attrs in one transaction: one check of the trial, then one
    multi-row upsert per table (``finished_ok``: a finished trial too, for fit constraints).

    Why: Optuna's public ``set_trial_user_attr`` commits each key on its own, and even its
    internal ``RDBStorage._set_trial_attr_without_commit`` looks the trial up again per key: two
    statements and, publicly, a commit per key, ~27 keys per trial; a kill in between leaves half
    of a trial's record. This writes Optuna's own ORM models (``optuna.storages._rdb.models``,
    ``_create_scoped_session``, ``RDBStorage.scoped_session``) with the same upsert Optuna uses
    on SQLite and PostgreSQL (other databases: Optuna's per-key setter, in the same transaction).
    If they move, this falls back to the public calls, key by key: slower, not atomic, correct.
    """
    system = system or {}
    try:
        from optuna.storages._rdb import models
        from optuna.storages._rdb.storage import _create_scoped_session

        setter = storage._set_trial_attr_without_commit
    except (ImportError, AttributeError):  # pragma: no cover - another Optuna layout
        for key, value in user.items():
            storage.set_trial_user_attr(trial_id, key, value)
        for key, value in system.items():
            storage.set_trial_system_attr(trial_id, key, value)
        return
    dialect = storage.engine.name
    with _create_scoped_session(storage.scoped_session, True) as session:
        trial = models.TrialModel.find_or_raise_by_id(trial_id, session)
        if not finished_ok:
            storage.check_trial_is_updatable(trial_id, trial.state)
        for model, values in (
            (models.TrialUserAttributeModel, user),
            (models.TrialSystemAttributeModel, system),
        ):
            if not values:
                continue
            if dialect in ("sqlite", "postgresql"):
                _upsert(session, dialect, model, trial_id, values)
            else:  # pragma: no cover - MySQL and others: Optuna's own per-key statement
                for key, value in values.items():
                    setter(session, model, trial_id, key, value)


def _upsert(session: Any, dialect: str, model: Any, trial_id: int, values: Mapping[str, Any]) -> None:
    """One INSERT ... ON CONFLICT (trial_id, key) DO UPDATE for all of ``values``."""
    from sqlalchemy.dialects import postgresql, sqlite

    insert: Any = sqlite.insert if dialect == "sqlite" else postgresql.insert
    rows = [{"trial_id": trial_id, "key": k, "value_json": json.dumps(v)} for k, v in values.items()]
    stmt = insert(model).values(rows)
    session.execute(
        stmt.on_conflict_do_update(
            index_elements=[model.trial_id, model.key], set_={"value_json": stmt.excluded.value_json}
        )
    )


def count_trials(storage: RDBStorage, study_id: int) -> int:
    """How many trials the study holds, in one ``SELECT COUNT(*)`` (Optuna's ``get_n_trials``
    reads every trial to count them: ``BaseStorage.get_n_trials``).

    Why: the sweep asks before each decision whether other writers added trials. Uses Optuna's
    ORM model of the trials table (``optuna.storages._rdb.models.TrialModel``); if it moves,
    Optuna's own count (slow, correct).
    """
    try:
        from optuna.storages._rdb import models
        from optuna.storages._rdb.storage import _create_scoped_session
    except ImportError:  # pragma: no cover - another Optuna layout
        return storage.get_n_trials(study_id)
    import sqlalchemy as sa

    with _create_scoped_session(storage.scoped_session) as session:
        q = (
            sa.select(sa.func.count())
            .select_from(models.TrialModel)
            .where(models.TrialModel.study_id == study_id)
        )
        return int(session.execute(q).scalar_one())


def read_trials_since(
    storage: RDBStorage, study_id: int, changed_ids: set[int], after_id: int
) -> list[FrozenTrial]:
    """The trials with an id in ``changed_ids`` or above ``after_id`` (``read_trials``).

    Why: a sweep reads its study's trials before every decision; reading all of them made its
    own bookkeeping grow with the study (3 s per trial at 500 trials). A finished trial never
    changes, so a reader that keeps what it read needs only the trials that were unfinished
    and those added since (the query Optuna's own cached storage used).
    """
    return read_trials(storage, study_id, changed_ids=changed_ids, after_id=after_id)


def read_trials(
    storage: RDBStorage, study_id: int, *, changed_ids: set[int] | None = None, after_id: int = -1
) -> list[FrozenTrial]:
    """A study's trials (or only those in ``changed_ids`` or above ``after_id``), in id order,
    read with six plain SELECTs on Optuna's tables (``optuna.storages._rdb.models``) and built
    the way ``RDBStorage._build_frozen_trial_from_trial_model`` builds them.

    Why: ``RDBStorage.get_all_trials`` loads every row into an ORM object first: 74,000 of them
    for a 2000-trial study, 3 s of CPU, so ``autotune status`` and ``report`` took seconds. Rows
    read as tuples, with each distinct distribution parsed once, take a tenth of that. If the
    models move, Optuna's own reader (slow, correct).
    """
    try:
        import sqlalchemy as sa
        from optuna import distributions as dists
        from optuna.storages._rdb import models
        from optuna.storages._rdb.storage import _create_scoped_session
    except ImportError:  # pragma: no cover - another Optuna layout
        trials = storage.get_all_trials(study_id, deepcopy=False)
        if changed_ids is None and after_id < 0:
            return list(trials)
        return [t for t in trials if trial_id(t) in (changed_ids or set()) or trial_id(t) > after_id]
    T = models.TrialModel.__table__
    where = T.c.study_id == study_id
    if changed_ids or after_id >= 0:
        wanted = T.c.trial_id > after_id
        if changed_ids:
            wanted = sa.or_(wanted, T.c.trial_id.in_(sorted(changed_ids)))
        where = sa.and_(where, wanted)
    ids = sa.select(T.c.trial_id).where(where).scalar_subquery()
    with _create_scoped_session(storage.scoped_session) as session:
        rows = session.execute(
            sa.select(T.c.trial_id, T.c.number, T.c.state, T.c.datetime_start, T.c.datetime_complete)
            .where(where)
            .order_by(T.c.trial_id)
        ).all()
        if not rows:
            return []

        def children(model: Any, *cols: str) -> list[Any]:
            table = model.__table__
            return list(
                session.execute(sa.select(*(table.c[c] for c in cols)).where(table.c.trial_id.in_(ids))).all()
            )

        params = children(models.TrialParamModel, "trial_id", "param_id", "param_name", "param_value",
                          "distribution_json")  # fmt: skip
        values = children(models.TrialValueModel, "trial_id", "objective", "value", "value_type")
        user = children(models.TrialUserAttributeModel, "trial_id", "key", "value_json")
        system = children(models.TrialSystemAttributeModel, "trial_id", "key", "value_json")
        inter = children(models.TrialIntermediateValueModel, "trial_id", "step", "intermediate_value",
                         "intermediate_value_type")  # fmt: skip
    by_id: dict[int, dict[str, Any]] = {
        r.trial_id: {"params": [], "values": {}, "user": {}, "system": {}, "inter": {}} for r in rows
    }
    # Each SELECT sees the database as it is then (PostgreSQL reads committed rows per
    # statement): rows of a trial created after the first SELECT are left for the next read.
    params = [r for r in params if r.trial_id in by_id]
    values = [r for r in values if r.trial_id in by_id]
    user = [r for r in user if r.trial_id in by_id]
    system = [r for r in system if r.trial_id in by_id]
    inter = [r for r in inter if r.trial_id in by_id]
    parsed: dict[str, Any] = {}
    for r in sorted(params, key=lambda r: r.param_id):
        d = parsed.get(r.distribution_json)
        if d is None:
            d = parsed[r.distribution_json] = dists.json_to_distribution(r.distribution_json)
        by_id[r.trial_id]["params"].append((r.param_name, d, d.to_external_repr(r.param_value)))
    to_value = models.TrialValueModel.stored_repr_to_value
    for r in values:
        by_id[r.trial_id]["values"][r.objective] = to_value(r.value, r.value_type)
    for r in user:
        by_id[r.trial_id]["user"][r.key] = json.loads(r.value_json)
    for r in system:
        by_id[r.trial_id]["system"][r.key] = json.loads(r.value_json)
    to_inter = models.TrialIntermediateValueModel.stored_repr_to_intermediate_value
    for r in inter:
        by_id[r.trial_id]["inter"][r.step] = to_inter(r.intermediate_value, r.intermediate_value_type)
    out = []
    for r in rows:
        parts = by_id[r.trial_id]
        vals = parts["values"]
        out.append(
            FrozenTrial(
                number=r.number,
                state=r.state,
                value=None,
                values=[vals[i] for i in range(len(vals))] if vals else None,
                datetime_start=r.datetime_start,
                datetime_complete=r.datetime_complete,
                params={name: ext for name, _, ext in parts["params"]},
                distributions={name: d for name, d, _ in parts["params"]},
                user_attrs=parts["user"],
                system_attrs=parts["system"],
                intermediate_values=parts["inter"],
                trial_id=r.trial_id,
            )
        )
    return out


def read_study_trials(study: optuna.Study) -> list[FrozenTrial]:
    """An ``optuna.Study``'s trials through ``read_trials`` when it is stored in an RDB (the
    report's reader), else ``Study.get_trials``."""
    storage = study_storage(study)
    inner = getattr(storage, "_backend", storage)  # Optuna wraps an RDBStorage in a _CachedStorage
    if not isinstance(inner, RDBStorage):
        return study.get_trials(deepcopy=False)
    return read_trials(inner, inner.get_study_id_from_name(study.study_name))


def schema_versions_folder() -> Path | None:
    """The folder of the installed Optuna's alembic migrations (``optuna/storages/_rdb/alembic``).

    Why: a study file written by a newer Optuna must be refused before anything writes to it,
    and its schema revision can only be compared with the revisions this Optuna knows, which
    Optuna keeps nowhere public. If the module moves, ``None``: the check is skipped and
    Optuna judges the file itself (with a less helpful message).
    """
    try:
        from optuna.storages._rdb import storage as rdb
    except ImportError:  # pragma: no cover - another Optuna layout: let Optuna judge
        return None
    return Path(rdb.__file__).parent / "alembic" / "versions"
