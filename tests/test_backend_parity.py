"""SQLite and PostgreSQL ledgers export the same event shapes (issue 4, item 5)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from temporal_ledger.ledger import IdempotencyConflictError, Ledger
from temporal_ledger.ledger._testing_child import AUTHORITY, _CountingAdapter, request

from tests.temporal_support import ROOT

pytestmark = pytest.mark.postgres


async def _write_the_same_history(url: str) -> None:
    async with Ledger.open(url) as ledger:
        await ledger.execute(request("ok"), authority=AUTHORITY, adapter=_CountingAdapter())
        await ledger.execute(request("ok"), authority=AUTHORITY, adapter=_CountingAdapter())
        with pytest.raises(IdempotencyConflictError):
            await ledger.execute(
                request("ok", instruction="other"), authority=AUTHORITY, adapter=_CountingAdapter()
            )
        await ledger.execute(
            request("lost"),
            authority=AUTHORITY,
            adapter=_CountingAdapter(raise_after=ConnectionResetError("reset")),
        )
        await ledger.reconcile("lost", "effect_confirmed", "ops", "seen", output={"n": 1})
        await ledger.execute(
            request("denied"),
            authority=AUTHORITY.model_copy(update={"capabilities": ()}),
            adapter=_CountingAdapter(),
        )


def _export(url: str) -> list[dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-m", "temporal_ledger.ledger", "--db", url, "--json", "events"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(done.stdout)


def _shape(value: Any) -> Any:
    """Structure and types, without the values that differ run to run (ids, times, hashes)."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [_shape(v) for v in value]
    return type(value).__name__


async def test_sqlite_and_postgresql_export_the_same_event_shapes(
    sqlite_url: str, postgres_url: str
) -> None:
    await _write_the_same_history(sqlite_url)
    await _write_the_same_history(postgres_url)
    from_sqlite, from_postgres = _export(sqlite_url), _export(postgres_url)
    assert len(from_sqlite) == len(from_postgres) == 14
    assert [(e["key"], e["type"]) for e in from_sqlite] == [
        (e["key"], e["type"]) for e in from_postgres
    ]
    assert [_shape(e) for e in from_sqlite] == [_shape(e) for e in from_postgres]
    # Values that do not depend on ids or clocks are equal too.
    for a, b in zip(from_sqlite, from_postgres, strict=True):
        assert a["payload"].get("status") == b["payload"].get("status")
        assert a["payload"].get("fingerprint") == b["payload"].get("fingerprint")
        assert a["payload"].get("dimensions") == b["payload"].get("dimensions")
