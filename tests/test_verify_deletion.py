"""A whole key deleted (its events and its record) is seen by ``verify``, on both backends:
the ledger-wide tally (``ledger_stripes``) still counts it."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from temporal_ledger.ledger import Ledger
from temporal_ledger.ledger._sqlite import path_from_url
from temporal_ledger.ledger._testing_child import AUTHORITY, _CountingAdapter, request


@contextmanager
def database(url: str) -> Iterator[Any]:
    """A raw connection to the ledger's database (what an intruder or an accident uses)."""
    if url.startswith("sqlite:///"):
        conn = sqlite3.connect(path_from_url(url), isolation_level=None)
        try:
            yield conn
        finally:
            conn.close()
    else:
        with psycopg.connect(url, autocommit=True) as conn:
            yield conn


async def _populate(url: str) -> None:
    async with Ledger.open(url) as ledger:
        for key in ("a", "b", "c/with/slashes", "d"):
            await ledger.execute(request(key), authority=AUTHORITY, adapter=_CountingAdapter())
        await ledger.execute(
            request("b"), authority=AUTHORITY, adapter=_CountingAdapter()
        )  # a replay
        assert ledger.verify().ok


async def test_a_whole_key_deleted_is_named_by_verify(ledger_url: str) -> None:
    await _populate(ledger_url)
    with database(ledger_url) as conn:
        conn.execute("DELETE FROM ledger_events WHERE key = 'b'")
        conn.execute("DELETE FROM ledger_keys WHERE key = 'b'")
    with Ledger.open(ledger_url) as ledger:
        report = ledger.verify()
        assert not report.ok
        assert report.keys == 3
    (problem,) = report.problems
    assert problem.startswith("tally stripe ") and "a whole key was deleted" in problem
    assert "holding 5 records" in problem and "and 0 records" in problem, problem
