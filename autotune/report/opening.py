"""Opening a study for the report, read-only: never creates a database, never writes to one."""

from __future__ import annotations

from pathlib import Path

import optuna

from autotune.errors import StorageError, StudyNotFoundError
from autotune.store.storage import first_line, open_storage
from autotune.store.urls import DB_FILE, DEFAULT_WORKDIR, redact_url


def default_storage(workdir: Path | None = None) -> str:
    return f"sqlite:///{(workdir or DEFAULT_WORKDIR).as_posix()}/{DB_FILE}"


def open_study(url: str, name: str | None) -> optuna.Study:
    """Load study ``name`` (or the only one) from ``url`` without writing to it."""
    storage = open_storage(url, read_only=True)
    try:
        names = optuna.study.get_all_study_names(storage=storage)
    except Exception as exc:
        raise StorageError(
            f"cannot read studies from {redact_url(url)}: {first_line(exc)} (is it an autotune study database?)"
        ) from None
    if name is None:
        if not names:
            raise StudyNotFoundError(f"{redact_url(url)} holds no study yet; run 'autotune sweep' first")
        if len(names) > 1:
            listed = ", ".join(sorted(names))
            raise StudyNotFoundError(
                f"{redact_url(url)} holds several studies ({listed}); pick one with --study NAME"
            )
        name = names[0]
    elif name not in names:
        listed = ", ".join(sorted(names)) or "none"
        raise StudyNotFoundError(f"no study named {name!r} in {redact_url(url)} (studies there: {listed})")
    return optuna.load_study(study_name=name, storage=storage)
