"""A fresh PostgreSQL database per test, on the server named by LEDGER_TEST_POSTGRES_URL."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit, urlunsplit

ENV = "LEDGER_TEST_POSTGRES_URL"
HOW = (
    f"PostgreSQL tests need {ENV}, e.g. "
    f"{ENV}=postgresql://postgres@127.0.0.1:5432/postgres (CI sets it)"
)


def admin_url() -> str | None:
    return os.environ.get(ENV) or None


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


@contextmanager
def fresh_database() -> Iterator[str]:
    """Create a database for one test and drop it afterwards (terminating its sessions)."""
    import psycopg

    url = admin_url()
    if url is None:
        raise RuntimeError(HOW)
    name = f"ledger_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield _with_database(url, name)
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
