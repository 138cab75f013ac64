"""Database URLs: the driver the ``postgres`` extra installs, advice per database kind, redaction.

A plain ``postgresql://`` URL must work on a fresh ``pip install 'autotune[postgres]'``: the
extra must install the driver SQLAlchemy picks for it (psycopg 3 since SQLAlchemy 2.1). A
missing driver is named for the URL's own database kind and driver, never with an install line
for what is installed already. A password is never shown. The real server is in
``tests/store/test_pg_urls.py``.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from autotune.errors import StorageError
from autotune.store.storage import open_storage
from autotune.store.urls import redact_url
from tests.helpers import REPO


def _extras() -> dict[str, list[str]]:
    if sys.version_info >= (3, 11):
        import tomllib

        data = tomllib.loads((REPO / "pyproject.toml").read_text())
    else:  # pragma: no cover
        import tomlkit

        data = tomlkit.parse((REPO / "pyproject.toml").read_text())
    return dict(data["project"]["optional-dependencies"])


def _names(reqs: list[str]) -> set[str]:
    return {re.split(r"[\[<>=!~; ]", r, maxsplit=1)[0].lower() for r in reqs}


def test_the_postgres_extra_installs_the_driver_of_a_plain_postgresql_url() -> None:
    driver = make_url("postgresql://u@h/db").get_dialect().driver  # what SQLAlchemy will import
    assert driver == "psycopg"
    extras = _extras()
    assert "psycopg" in _names(extras["postgres"]), extras["postgres"]
    assert any(r.startswith("psycopg[binary]") for r in extras["postgres"])
    assert "psycopg" in _names(extras["dev"])  # the tests' real server is reached the same way


@pytest.mark.parametrize(
    ("url", "module", "says", "never"),
    [
        # MySQL: its own drivers, not PostgreSQL's extra
        ("mysql://root:pw1@localhost/db", "MySQLdb", ["pip install mysqlclient", "pymysql"], ["postgres"]),
        # a PostgreSQL driver that is not installed, while psycopg 3 is: name both
        ("postgresql+pg8000://u:pw1@localhost/db", "pg8000", ["pip install pg8000", "psycopg 3 is installed"],
         ["autotune[postgres]"]),
        ("mssql://sa:pw1@localhost/db", "pyodbc", ["pip install pyodbc"], ["postgres"]),
    ],
)  # fmt: skip
def test_a_missing_driver_gets_advice_for_its_own_database(
    url: str, module: str, says: list[str], never: list[str]
) -> None:
    if importlib.util.find_spec(module) is not None:
        pytest.skip(f"{module} is installed here")
    with pytest.raises(StorageError) as err:
        open_storage(url)
    msg = str(err.value)
    for part in says:
        assert part in msg, msg
    for part in never:
        assert part not in msg, msg
    assert "pw1" not in msg and "***" in msg, msg


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://u:s3cret@db:5432/x", "postgresql://u:***@db:5432/x"),
        ("postgresql+psycopg2://u:s3cret@db/x", "postgresql+psycopg2://u:***@db/x"),
        ("postgresql://u:p@ss/w0rd@db/x", "postgresql://u:***@db/x"),  # unencoded @ and / in it
        ("postgresql://u@db/x?password=s3cret&sslmode=require", "postgresql://u@db/x?password=***&sslmode=require"),
        ("postgresql://u@db/x", "postgresql://u@db/x"),
        ("sqlite:////tmp/a:b@c/studies.db", "sqlite:////tmp/a:b@c/studies.db"),  # a path, no password
        ("mysql+pymysql://root:s3cret@localhost/x", "mysql+pymysql://root:***@localhost/x"),
    ],
)  # fmt: skip
def test_redact_url_hides_every_password(url: str, shown: str) -> None:
    assert redact_url(url) == shown
    assert "s3cret" not in redact_url(url) and "w0rd" not in redact_url(url)


@pytest.mark.filterwarnings("ignore:Query string argument")
def test_status_shows_the_storage_redacted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``status`` names its database through the one redaction (here an SQLite study reached
    through a URL carrying a ``password=`` parameter SQLite ignores)."""
    from autotune.report import status
    from autotune.trainers import registry
    from tests.report_study import TEST_TRAINER, YamlTestAdapter, build_study

    monkeypatch.setitem(registry.ADAPTERS, TEST_TRAINER, YamlTestAdapter)
    build_study(tmp_path / "runs")
    url = f"sqlite:///{tmp_path / 'runs' / 'studies.db'}?password=s3cret"
    info = status.collect(storage=url, workdir=None, study=None)
    text = status.render(info)
    assert "s3cret" not in text and "s3cret" not in str(info), text
    assert "password=***" in text
