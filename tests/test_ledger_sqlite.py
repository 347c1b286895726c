"""The ledger contract on the embedded SQLite backend, plus what only a file can show."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
from temporal_ledger.ledger import (
    Authority,
    IdempotencyConflictError,
    InvalidRequest,
    Ledger,
    LedgerUnavailable,
)
from temporal_ledger.ledger._models import EffectState, NextOperation
from temporal_ledger.ledger._sqlite import SQLiteRecorder, path_from_url
from temporal_ledger.ledger._sqlite_write import MIGRATIONS
from temporal_ledger.ledger._testing_child import AUTHORITY, _CountingAdapter, request
from temporal_ledger.ledger.testing import LedgerContract


class TestSQLiteLedger(LedgerContract):
    @pytest.fixture
    def ledger_url(self, sqlite_url: str) -> str:
        return sqlite_url


def test_sqlite_file_is_wal_with_full_sync(sqlite_url: str, tmp_path: Path) -> None:
    with Ledger.open(sqlite_url) as ledger:
        conn = ledger._recorder._conn  # the connection the ledger commits on
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    tables = {
        r[0]
        for r in sqlite3.connect(tmp_path / "ledger.db").execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'"
        )
    }
    assert {"ledger_events", "ledger_keys"} <= tables


# 12 ---------------------------------------------------------------------------------
async def _populated(url: str) -> dict[str, str]:
    async with Ledger.open(url) as ledger:
        ok = await ledger.execute(request("ok"), authority=AUTHORITY, adapter=_CountingAdapter())
        await ledger.execute(request("ok"), authority=AUTHORITY, adapter=_CountingAdapter())
        failed = await ledger.execute(
            request("failed"),
            authority=AUTHORITY,
            adapter=_CountingAdapter(raise_after=OSError("x")),
        )
        await ledger.execute(request("failed"), authority=AUTHORITY, adapter=_CountingAdapter())
        try:
            await ledger.execute(
                request("ok", instruction="other"), authority=AUTHORITY, adapter=_CountingAdapter()
            )
        except Exception:
            pass
        assert ledger.verify().ok
    return {"ok": ok.action_id, "failed": failed.action_id}


def _edit(path: Path, sql: str, *params: object) -> None:
    conn = sqlite3.connect(path)
    with conn:
        changed = conn.execute(sql, params).rowcount
    conn.close()
    assert changed == 1, "the corruption must change exactly one record"


def _problems(url: str) -> list[str]:
    with Ledger.open(url) as ledger:
        report = ledger.verify()
    assert not report.ok
    return report.problems


async def test_verify_names_a_replay_pointing_elsewhere(sqlite_url: str, tmp_path: Path) -> None:
    ids = await _populated(sqlite_url)
    _edit(
        tmp_path / "ledger.db",
        "UPDATE ledger_events SET payload = json_set(payload, '$.reused_from_action_id', ?)"
        " WHERE key = 'ok' AND type = 'action.completed' AND json_extract(payload, '$.replayed')",
        ids["failed"],
    )
    problems = _problems(sqlite_url)
    assert any("payload edited" in p for p in problems)
    assert any(
        "replay provenance points to action " + ids["failed"] in p and "another key" in p
        for p in problems
    )


async def test_verify_names_a_rewritten_failure(sqlite_url: str, tmp_path: Path) -> None:
    ids = await _populated(sqlite_url)
    _edit(
        tmp_path / "ledger.db",
        "UPDATE ledger_events SET payload = json_set(payload, '$.status', 'succeeded')"
        " WHERE action_id = ? AND type = 'action.completed'",
        ids["failed"],
    )
    problems = _problems(sqlite_url)
    assert any("payload edited" in p and "key 'failed'" in p for p in problems)
    assert any(
        "replayed status 'failed' differs from the original outcome 'succeeded'" in p
        for p in problems
    )


async def test_verify_names_a_dropped_request(sqlite_url: str, tmp_path: Path) -> None:
    ids = await _populated(sqlite_url)
    _edit(
        tmp_path / "ledger.db",
        "DELETE FROM ledger_events WHERE action_id = ? AND type = 'action.requested'",
        ids["ok"],
    )
    problems = _problems(sqlite_url)
    assert any("hash chain broken" in p for p in problems)
    assert any(f"answers action {ids['ok']}, whose request is missing" in p for p in problems)


async def test_verify_names_a_dropped_refusal(sqlite_url: str, tmp_path: Path) -> None:
    await _populated(sqlite_url)
    _edit(tmp_path / "ledger.db", "DELETE FROM ledger_events WHERE type = 'action.replay_refused'")
    problems = _problems(sqlite_url)
    assert any("was never resolved" in p for p in problems)
    assert any("records were dropped or added" in p for p in problems)


async def test_verify_names_an_inserted_completion(sqlite_url: str, tmp_path: Path) -> None:
    ids = await _populated(sqlite_url)
    _edit(
        tmp_path / "ledger.db",
        "INSERT INTO ledger_events (key, action_id, type, payload, recorded_at, body_hash,"
        " prev_hash, hash) SELECT key, action_id, type, payload, recorded_at, body_hash,"
        " prev_hash, hash FROM ledger_events WHERE action_id = ? AND type = 'action.completed'",
        ids["ok"],
    )
    problems = _problems(sqlite_url)
    assert any(f"action {ids['ok']} (key 'ok'): resolved 2 times" in p for p in problems)
    assert any("hash chain broken" in p for p in problems)


class _AnswerLostOnce(SQLiteRecorder):
    """A real SQLite recorder whose first claiming commit lands but whose answer is lost,
    as when a connection dies during COMMIT."""

    lost = False

    def submit(self, key, fn):
        return None  # every write takes transact, where the fault is injected

    def transact(self, key, fn):
        result = super().transact(key, fn)
        if not self.lost and type(result).__name__ == "Claimed":
            self.lost = True
            raise LedgerUnavailable("connection lost during commit", maybe_committed=True)
        return result


async def test_a_claim_whose_commit_answer_was_lost_is_released(sqlite_url: str) -> None:
    far_side = _CountingAdapter()
    ledger = Ledger(_AnswerLostOnce(path_from_url(sqlite_url)), lease=30, url=sqlite_url)
    async with ledger:
        with pytest.raises(LedgerUnavailable):
            await ledger.execute(request("k"), authority=AUTHORITY, adapter=far_side)
        assert far_side.calls == []
        state = ledger.state("k")
        assert (state.effect, state.next_operation) == (
            EffectState.NONE,
            NextOperation.START_ACTION,
        )
        assert ledger.open_effects() == []
        retry = await ledger.execute(request("k"), authority=AUTHORITY, adapter=far_side)
        assert retry.status == "succeeded" and not retry.replayed
        assert len(far_side.calls) == 1
        assert ledger.verify().ok


async def test_concurrent_calls_on_one_file_each_act_once(tmp_path: Path) -> None:
    far_side = _CountingAdapter()
    async with Ledger(SQLiteRecorder(tmp_path / "ledger.db"), lease=5.0) as ledger:
        results = await asyncio.gather(
            *(
                ledger.execute(request(f"k{i}"), authority=AUTHORITY, adapter=far_side)
                for i in range(64)
            )
        )
        again = await asyncio.gather(
            *(
                ledger.execute(request(f"k{i}"), authority=AUTHORITY, adapter=far_side)
                for i in range(64)
            )
        )
        assert all(r.ok and not r.replayed for r in results)
        assert all(r.replayed for r in again) and len(far_side.calls) == 64
        assert ledger.verify().ok


async def test_one_failing_transition_does_not_undo_the_others(tmp_path: Path) -> None:
    async with Ledger(SQLiteRecorder(tmp_path / "ledger.db"), lease=5.0) as ledger:
        await ledger.execute(
            request("taken", action_id="same"), authority=AUTHORITY, adapter=_CountingAdapter()
        )
        outcomes = await asyncio.gather(
            ledger.execute(
                request("other", action_id="same"), authority=AUTHORITY, adapter=_CountingAdapter()
            ),
            *(
                ledger.execute(request(f"k{i}"), authority=AUTHORITY, adapter=_CountingAdapter())
                for i in range(8)
            ),
            return_exceptions=True,
        )
        assert isinstance(outcomes[0], InvalidRequest)
        assert all(r.ok for r in outcomes[1:])
        assert ledger.events("other") == [] and ledger.verify().ok


def test_a_transition_failing_after_it_wrote_is_undone_alone(tmp_path: Path) -> None:
    """A transition that fails after writing leaves nothing; those queued beside it commit."""
    import threading

    from temporal_ledger.ledger._transaction import KeyRecord

    recorder = SQLiteRecorder(tmp_path / "ledger.db")
    gate = threading.Event()
    runs: dict[str, int] = {}

    def write(key: str, *, fail: bool = False):
        def fn(tx):
            runs[key] = runs.get(key, 0) + 1
            tx.append("test.event", None, {"n": runs[key]})
            tx.save(tx.record or KeyRecord(key=key))
            if fail:
                raise ValueError("after writing")
            return key

        return fn

    try:
        held = recorder.submit("gate", lambda tx: gate.wait(10))
        futures = [
            recorder.submit("a", write("a")),
            recorder.submit("bad", write("bad", fail=True)),
            recorder.submit("b", write("b")),
        ]
        gate.set()  # the three queued meanwhile
        held.result(10)
        assert [f.result(10) for f in (futures[0], futures[2])] == ["a", "b"]
        with pytest.raises(ValueError, match="after writing"):
            futures[1].result(10)
        assert runs == {"a": 1, "bad": 1, "b": 1}
        assert recorder.get("bad") is None and recorder.events("bad") == []
        for key in ("a", "b"):
            assert [e.payload for e in recorder.events(key)] == [{"n": 1}]
            record = recorder.get(key)
            assert record is not None and record.events == 1
    finally:
        recorder.close()


async def test_a_batched_replay_answers_from_the_record_and_audits_atomically(
    sqlite_url: str,
) -> None:
    far_side = _CountingAdapter({"line": 1})
    async with Ledger.open(sqlite_url, replay_audit="batched") as ledger:
        first = await ledger.execute(request("k"), authority=AUTHORITY, adapter=far_side)
        replays = await asyncio.gather(
            *(
                ledger.execute(request("k"), authority=AUTHORITY, adapter=far_side)
                for _ in range(20)
            )
        )
        assert all(r.replayed and r.output == {"line": 1} for r in replays)
        assert all(r.reused_from_action_id == first.action_id for r in replays)
        # Denials and conflicts still answer only once they are durable.
        denied = await ledger.execute(
            request("k"), authority=Authority("agent-1", []), adapter=far_side
        )
        assert denied.status == "denied"
        assert ledger.events("k")[-1].type == "action.completed"
        with pytest.raises(IdempotencyConflictError):
            await ledger.execute(
                request("k", payload={"line": "other"}), authority=AUTHORITY, adapter=far_side
            )
        assert ledger.events("k")[-1].type == "action.replay_refused"
    assert len(far_side.calls) == 1
    with Ledger.open(sqlite_url) as reopened:
        events = reopened.events("k")
        audited = [e for e in events if e.type == "action.completed" and e.payload.get("replayed")]
        assert len(audited) == 20  # every replay's audit record was written before closing
        assert reopened.verify().ok


def test_replay_audit_must_be_one_the_ledger_takes(sqlite_url: str) -> None:
    with pytest.raises(InvalidRequest, match="replay_audit"):
        Ledger.open(sqlite_url, replay_audit="never")


def test_migrations_are_applied_in_order_and_recorded(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    SQLiteRecorder(path).close()
    conn = sqlite3.connect(path)
    version = conn.execute("SELECT value FROM ledger_meta WHERE name = 'schema_version'")
    assert version.fetchone() == (str(len(MIGRATIONS)),)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"ledger_meta", "ledger_events", "ledger_keys"} <= tables
    conn.execute("UPDATE ledger_meta SET value = '99' WHERE name = 'schema_version'")
    conn.commit()
    conn.close()
    with pytest.raises(InvalidRequest, match="schema version 99"):
        SQLiteRecorder(path)


def _indexes(path: Path) -> dict[str, str]:
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'ledger_keys'"
        ).fetchall()
    finally:
        conn.close()
    return {name: " ".join((sql or "").split()) for name, sql in rows}


def test_the_open_effects_index_holds_only_what_open_effects_asks_for(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    SQLiteRecorder(path).close()
    indexes = _indexes(path)
    assert "ledger_keys_settled" not in indexes
    assert indexes["ledger_keys_open"].endswith(
        "ON ledger_keys (key) WHERE effect = 'unknown' OR phase IN ('claimed', 'running')"
    )


async def test_a_keys_events_are_found_by_their_links_and_by_a_scan_if_edited(
    sqlite_url: str, tmp_path: Path
) -> None:
    async with Ledger.open(sqlite_url) as ledger:
        for key in ("a", "b", "a", "c", "a"):  # interleaved: a's events are not adjacent
            await ledger.execute(request(key), authority=AUTHORITY, adapter=_CountingAdapter())
        everything = ledger.events()
        mine = [e for e in everything if e.key == "a"]
        assert ledger.events("a") == mine
        assert ledger.events("a", after=mine[1].seq, limit=2) == mine[2:4]
        assert ledger.events("nobody") == []
    conn = sqlite3.connect(tmp_path / "ledger.db")
    plan = conn.execute(
        "EXPLAIN QUERY PLAN SELECT * FROM ledger_events WHERE key = 'a' ORDER BY seq"
    ).fetchall()
    assert "SCAN" in str(plan)  # no index of (key, seq) left to write in every commit
    # A link edited by hand (to the key's first event, or to a later one: a loop) hides
    # nothing: the links no longer reach the events the record counts.
    for target in (mine[0].seq, mine[-1].seq):
        conn.execute("UPDATE ledger_events SET key_prev = ? WHERE seq = ?", (target, mine[-1].seq))
        conn.commit()
        with Ledger.open(sqlite_url) as reopened:
            assert reopened.events("a") == mine
    conn.close()
