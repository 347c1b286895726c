from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import pg

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(params=BACKENDS)
def ledger_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A URL of an empty ledger, once per backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'ledger.db'}"
        return
    yield from _postgres()


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh PostgreSQL database; skipped (failed in CI) without a server URL."""
    yield from _postgres()


def _postgres() -> Iterator[str]:
    if pg.admin_url() is None:
        if os.environ.get("CI"):
            pytest.fail(pg.HOW + "; in CI the PostgreSQL tests must run")
        pytest.skip(pg.HOW)
    with pg.fresh_database() as url:
        yield url


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'ledger.db'}"
