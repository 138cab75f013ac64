"""PostgreSQL: Optuna's start-up, one process at a time.

Why: Optuna's start-up writes even with ``skip_table_creation``: once the tables exist it
adds the version row and stamps ``alembic_version``. On a fresh database, a worker polling
for the study (``create=False``) and the sweep creating it stamped at the same moment and
one of them died on ``alembic_version`` (UniqueViolation or DuplicateTable): when it was the
sweep, its workers waited for a study that never came. Under a database-wide advisory lock
every start-up sees the schema either absent or complete. It is held only for the start-up
(milliseconds) and ends with its transaction, whatever happens.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from autotune.errors import StorageError
from autotune.store.urls import redact_url

#: Advisory lock key ("autotune" in ASCII) under which Optuna sets its tables up in PostgreSQL.
PG_SETUP_LOCK_KEY = int.from_bytes(b"autotune", "big")
#: How long opening a PostgreSQL study database waits for another process's start-up to end.
PG_SETUP_LOCK_TIMEOUT_S = 120


def is_postgres(url: str) -> bool:
    from sqlalchemy.engine import make_url

    return make_url(url).get_backend_name() == "postgresql"


@contextlib.contextmanager
def setup_lock(url: str, engine_kwargs: Mapping[str, Any], *, create: bool) -> Iterator[None]:
    """Hold the setup lock of the database at ``url`` while the body runs (Optuna's start-up).

    ``create=False`` (a reader, or a worker polling for its study): a database without
    Optuna's tables is a ``StorageError`` saying so, before Optuna says "exceeding max length".
    """
    import sqlalchemy
    from sqlalchemy.pool import NullPool

    lock = sqlalchemy.create_engine(url, poolclass=NullPool, **engine_kwargs)
    try:
        with lock.begin() as conn:  # a transaction-level lock: released when this transaction ends
            conn.execute(sqlalchemy.text(f"SET LOCAL lock_timeout = '{PG_SETUP_LOCK_TIMEOUT_S}s'"))
            conn.execute(sqlalchemy.text("SELECT pg_advisory_xact_lock(:key)"), {"key": PG_SETUP_LOCK_KEY})
            if not create and not sqlalchemy.inspect(conn).has_table("version_info"):
                raise StorageError(
                    f"{redact_url(url)} holds no study yet (none of Optuna's tables are there): run "
                    "'autotune sweep' first, or check the database name in the URL"
                )
            yield
    finally:
        lock.dispose()
