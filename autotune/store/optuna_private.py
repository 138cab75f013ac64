"""Every use of Optuna's private attributes and internal modules, in one place.

Why a module of its own: Optuna may rename or move anything private in any release. Here each
reach is one small function saying why we need it and what breaks if it changes, so an Optuna
upgrade is checked in one file (``tests/test_study.py``, ``tests/test_claims.py`` and
``tests/test_pg_storage.py`` exercise every function below). Nothing else in ``autotune``
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
    key is renamed, Optuna's tools rank too-big trials again (``tests/test_optuna_tools.py``
    fails); if the model moves, this fails with ``ImportError`` or ``AttributeError``.
    """
    from optuna.storages._rdb import models
    from optuna.storages._rdb.storage import _create_scoped_session

    value_json = json.dumps([float(v) for v in values])
    with _create_scoped_session(storage.scoped_session, True) as session:
        model = models.TrialSystemAttributeModel
        row = (
            session.query(model)
            .filter(model.trial_id == trial_id, model.key == CONSTRAINTS_KEY)
            .one_or_none()
        )
        if row is None:
            session.add(model(trial_id=trial_id, key=CONSTRAINTS_KEY, value_json=value_json))
        else:
            row.value_json = value_json


def has_constraints(trial: FrozenTrial) -> bool:
    """Whether a stored trial carries constraint values (see ``set_trial_constraints``)."""
    return CONSTRAINTS_KEY in trial.system_attrs


def set_trial_user_attrs(storage: RDBStorage, trial_id: int, attrs: Mapping[str, Any]) -> None:
    """All of ``attrs`` of one trial in one transaction.

    Why: Optuna's public ``set_trial_user_attr`` commits each key on its own: a dozen commits
    per trial, and a kill in between leaves half of a trial's record. This uses the internals
    that ``RDBStorage.set_trial_user_attr`` itself uses (``optuna.storages._rdb.models``,
    ``_create_scoped_session``, ``RDBStorage._set_trial_attr_without_commit``,
    ``RDBStorage.scoped_session``). If they move, this falls back to the public call, key by
    key: slower and not atomic, but correct.
    """
    try:
        from optuna.storages._rdb import models
        from optuna.storages._rdb.storage import _create_scoped_session

        setter = storage._set_trial_attr_without_commit
    except (ImportError, AttributeError):  # pragma: no cover - another Optuna layout
        for key, value in attrs.items():
            storage.set_trial_user_attr(trial_id, key, value)
        return
    with _create_scoped_session(storage.scoped_session, True) as session:
        for key, value in attrs.items():
            setter(session, models.TrialUserAttributeModel, trial_id, key, value)


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
