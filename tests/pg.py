"""A fresh PostgreSQL database per test, on the server named by LEDGER_TEST_POSTGRES_URL."""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import NoReturn
from urllib.parse import urlsplit, urlunsplit

ENV = "LEDGER_TEST_POSTGRES_URL"
#: Set by ``pytest --fast`` (tests/conftest.py): the tier that starts no service, so the
#: helpers that start one inside a test (here, tests/temporal_support.py) skip it.
FAST_TIER = "LEDGER_TEST_FAST_TIER"
HOW = (
    f"PostgreSQL tests need {ENV}, e.g. "
    f"{ENV}=postgresql://postgres@127.0.0.1:5432/postgres (CI sets it; bash scripts/test "
    "sets it when a server answers on 127.0.0.1:5432)"
)


def admin_url() -> str | None:
    return os.environ.get(ENV) or None


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


#: Two threads create the next tests' databases while a test runs, and one more drops
#: each test's after it: CREATE DATABASE takes 0.2-2 s on the shared server (it copies
#: template1 through the WAL, slower the more the machine is loaded), DROP far less. Most
#: of some 200 tests a run take less than one CREATE: with one spare made at a time each
#: of them waited for it; two made side by side are ready in about half the time
#: (measured: 0.31 s a database one at a time, 0.17 s two at a time).
_CREATOR = ThreadPoolExecutor(max_workers=2, thread_name_prefix="test-databases")
_DROPPER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="test-databases-drop")
#: How many databases are being made, or made, ahead of the tests that will use them.
SPARES = 2
#: The databases the next tests get, by server URL, oldest first: being created, or made.
_spare: dict[str, deque[Future[str]]] = {}


def _create(url: str) -> str:
    import psycopg

    name = f"ledger_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return name


def _drop(url: str, name: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@atexit.register
def _drop_the_spares() -> None:
    # The helper threads have run their queues by now (threads are joined before atexit).
    for url, spares in _spare.items():
        for made in spares:
            with suppress(Exception):
                _drop(url, made.result())
    _spare.clear()


@contextmanager
def fresh_database() -> Iterator[str]:
    """A database of its own for one test, empty; dropped afterwards (terminating its
    sessions) in the background, while the next ones are made there too."""
    url = admin_url()
    if url is None:
        raise RuntimeError(HOW)
    spares = _spare.setdefault(url, deque())
    name = spares.popleft().result() if spares else _create(url)
    while len(spares) < SPARES:
        spares.append(_CREATOR.submit(_create, url))
    try:
        yield _with_database(url, name)
    finally:
        _DROPPER.submit(_drop, url, name)


@contextmanager
def private_server() -> Iterator[tuple[str, Callable[[str], None]]]:
    """A PostgreSQL server of the test's own (initdb on a free port) and its ``pg_ctl``.

    Yields the server's URL and ``ctl(action, mode="fast")`` ("stop", "start",
    "restart"; mode "immediate" stops it as a crash would), so a test may take the
    server down, which it must never do to the shared one. Skips where no
    PostgreSQL binaries are installed, and fails there in CI (``CI`` set): CI must run
    every fault test. The server and its folder are removed afterwards. Skips in the
    fast tier (``pytest --fast``, which starts no service).
    """
    if os.environ.get(FAST_TIER):
        import pytest

        pytest.skip("starts a PostgreSQL server: not in the fast tier (pytest --fast)")
    pg_config = shutil.which("pg_config")
    if pg_config is None:
        _cannot("pg_config not found: cannot start a private PostgreSQL server")
    bindir = Path(
        subprocess.run(
            [pg_config, "--bindir"], capture_output=True, text=True, check=True
        ).stdout.strip()
    )
    if not (bindir / "initdb").exists():
        _cannot(f"no initdb in {bindir}: cannot start a private PostgreSQL server")
    as_user: list[str] = []
    root = Path(tempfile.mkdtemp(prefix="ledger-pg-"))
    if os.geteuid() == 0:  # initdb refuses to run as root
        as_user = ["runuser", "-u", "postgres", "--"]
        shutil.chown(root, "postgres")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    data = root / "data"
    pg_ctl = [*as_user, str(bindir / "pg_ctl"), "-D", str(data)]
    options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1"

    def ctl(action: str, mode: str = "fast") -> None:
        flags = ["-o", options, "-l", str(root / "log"), "-w", "-m", mode]
        subprocess.run([*pg_ctl, *flags, action], check=True, capture_output=True)

    try:
        subprocess.run(
            [*as_user, str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"],
            check=True,
            capture_output=True,
        )
        ctl("start")
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres", ctl
    finally:
        subprocess.run([*pg_ctl, "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


def _cannot(why: str) -> NoReturn:
    """Skip a test that needs what this machine lacks; in CI, fail it."""
    import pytest

    if os.environ.get("CI"):
        pytest.fail(f"{why}; in CI the PostgreSQL fault tests must run")
    pytest.skip(why)
