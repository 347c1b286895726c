"""What only the PostgreSQL backend has to prove: schema migration, per-key locking,
surviving killed connections, and leases judged by the database clock.

The behaviour every backend shares is in temporal_ledger.ledger.testing.
"""

from __future__ import annotations

import asyncio
import itertools
import multiprocessing
import os
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import psycopg
import pytest
from temporal_ledger.ledger import (
    ActionInProgressError,
    ActionRequest,
    ActionResult,
    InvalidRequest,
    Ledger,
    LedgerUnavailable,
    NoEffect,
)
from temporal_ledger.ledger._models import EffectState, ExecutionContext
from temporal_ledger.ledger._pg_loop import Wire
from temporal_ledger.ledger._pg_write import MIGRATIONS
from temporal_ledger.ledger._postgres import PostgresRecorder
from temporal_ledger.ledger._recorder import SCHEMA_VERSION
from temporal_ledger.ledger._testing_child import AUTHORITY, request
from temporal_ledger.ledger._transaction import KeyRecord

from tests import pg
from tests.pg_turns import TurnCounter, measure

pytestmark = pytest.mark.postgres

KEY_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))"


def db_clock(url: str) -> float:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()
    assert row is not None
    return float(row[0])


def ledger_backends(admin: psycopg.Connection[Any], dbname: str) -> list[int]:
    """The ledger's own sessions on the test database (not the test's raw connections)."""
    rows = admin.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = %s"
        " AND application_name = 'temporal-ledger'",
        (dbname,),
    ).fetchall()
    return [pid for (pid,) in rows]


def dbname_of(url: str) -> str:
    return psycopg.conninfo.conninfo_to_dict(url)["dbname"]


class Effects:
    """The world: which actions actually acted, in order."""

    def __init__(self) -> None:
        self.done: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def __call__(self, req: ActionRequest, ctx: ExecutionContext) -> dict[str, Any]:
        with self._lock:
            self.done.append((req.key, ctx.action_id))
        return {"ok": True}

    def per_key(self) -> Counter[str]:
        return Counter(key for key, _ in self.done)


# -- (a) schema ---------------------------------------------------------------------


def test_migrations_match_the_shared_schema_version() -> None:
    # Both backends record the same schema_version for the same table layout.
    assert len(MIGRATIONS) == SCHEMA_VERSION


async def test_schema_created_on_first_open_and_reopen_keeps_data(postgres_url: str) -> None:
    effects = Effects()
    async with Ledger.open(postgres_url) as ledger:
        first = await ledger.execute(request("a"), authority=AUTHORITY, adapter=effects)
    assert first.status == "succeeded"

    with psycopg.connect(postgres_url) as conn:
        tables = {
            name
            for (name,) in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
            )
        }
        assert {"ledger_meta", "ledger_events", "ledger_keys"} <= tables
        versions = conn.execute(
            "SELECT value FROM ledger_meta WHERE name = 'schema_version'"
        ).fetchall()
        assert versions == [(str(SCHEMA_VERSION),)]
        columns = dict(
            conn.execute(
                "SELECT column_name, data_type FROM information_schema.columns"
                " WHERE table_name = 'ledger_events'"
            ).fetchall()
        )
        # TEXT, not jsonb: the stored bytes are the hashed bytes.
        assert columns["payload"] == "text"
        assert columns["seq"] == "bigint"
        indexes = {
            name: ddl
            for name, ddl in conn.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'ledger_events'"
            )
        }
        assert "UNIQUE" in indexes["ledger_events_one_request"]
        assert "action.requested" in indexes["ledger_events_one_request"]

    async with Ledger.open(postgres_url) as ledger:
        again = await ledger.execute(request("a"), authority=AUTHORITY, adapter=effects)
        assert again.replayed and again.reused_from_action_id == first.action_id
        assert ledger.verify().ok
    assert effects.per_key() == {"a": 1}
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT count(*) FROM ledger_meta").fetchone() == (1,)


async def test_a_newer_schema_is_refused(postgres_url: str) -> None:
    Ledger.open(postgres_url).close()
    with psycopg.connect(postgres_url) as conn:
        conn.execute("UPDATE ledger_meta SET value = '99' WHERE name = 'schema_version'")
    with pytest.raises(InvalidRequest, match="schema version 99"):
        Ledger.open(postgres_url)


async def test_duplicate_action_id_is_refused_like_sqlite(postgres_url: str) -> None:
    effects = Effects()
    async with Ledger.open(postgres_url) as ledger:
        await ledger.execute(request("a", action_id="same"), authority=AUTHORITY, adapter=effects)
        with pytest.raises(InvalidRequest, match="already submitted"):
            await ledger.execute(
                request("b", action_id="same"), authority=AUTHORITY, adapter=effects
            )
        assert ledger.events("b") == []
        assert ledger.verify().ok
    assert effects.per_key() == {"a": 1}


async def test_values_bound_on_the_client_are_stored_exactly(postgres_url: str) -> None:
    # The writes are bound on the client (quoted as libpq would): quotes, backslashes, dollar
    # quotes, statement separators and non-ASCII text must come back byte for byte.
    awkward = "it's \\ a $$; DROP TABLE ledger_events; -- \u00e9\u2028\U0001f600 \\'"
    key = "k'\\;--$$ \u00e9"
    async with Ledger.open(postgres_url) as ledger:
        first = await ledger.execute(
            request(key, instruction=awkward, payload={awkward: [awkward, 1.5, -2]}),
            authority=AUTHORITY,
            adapter=lambda req, ctx: {"echo": req.instruction},
        )
        again = await ledger.execute(
            request(key, instruction=awkward, payload={awkward: [awkward, 1.5, -2]}),
            authority=AUTHORITY,
            adapter=lambda req, ctx: {"echo": "never"},
        )
        assert first.output == {"echo": awkward} and not first.replayed
        assert again.replayed and again.output == {"echo": awkward}
        requested = ledger.events(key)[0]
        assert requested.payload["instruction"] == awkward
        assert requested.payload["payload"] == {awkward: [awkward, 1.5, -2]}
        assert ledger.verify().ok
        with pytest.raises(InvalidRequest, match="NUL"):
            await ledger.execute(
                request("nul", action_id="a\x00b"), authority=AUTHORITY, adapter=Effects()
            )
        assert ledger.events("nul") == []


async def test_a_call_larger_than_the_socket_buffers_is_sent_whole(postgres_url: str) -> None:
    """A request and an output of several megabytes (non-ASCII, nested) go out in one
    statement that libpq sends in pieces as the socket drains, are stored exactly, and
    replay; a second key right after finds the connection idle."""
    big = {"lines": [f"ligne {i} \u00e9\U0001f600 " * 20 for i in range(20_000)], "deep": [[[1.5]]]}
    async with Ledger.open(postgres_url) as ledger:
        first = await ledger.execute(
            request("big", payload=big), authority=AUTHORITY, adapter=lambda req, ctx: big
        )
        again = await ledger.execute(
            request("big", payload=big), authority=AUTHORITY, adapter=Effects()
        )
        after = await ledger.execute(request("after big"), authority=AUTHORITY, adapter=Effects())
        assert not first.replayed and first.output == big
        assert again.replayed and again.output == big
        assert after.status == "succeeded"
        assert ledger.events("big")[0].payload["payload"] == big
        assert ledger.verify().ok


async def test_a_connection_broken_during_a_call_is_lost_not_refused(postgres_url: str) -> None:
    """The socket breaks while the one-statement write waits for its answer (a reset,
    with nothing said by the server): the caller must hear a lost connection, which may
    have committed (``OperationalError``, no SQLSTATE), never a refusal that says the
    transaction rolled back. libpq reports this break as a result, not by raising."""
    conn = await psycopg.AsyncConnection.connect(postgres_url, autocommit=True)
    try:
        wire = Wire(conn, asyncio.get_running_loop())
        call = asyncio.create_task(wire.call(b"SELECT pg_sleep(0.5), 1, 2", ()))
        await asyncio.sleep(0.1)
        with socket.socket(fileno=os.dup(conn.pgconn.socket)) as sock:
            sock.shutdown(socket.SHUT_RDWR)  # the client's side of a connection reset
        with pytest.raises(psycopg.OperationalError) as lost:
            await call
        assert lost.value.sqlstate is None
        assert "server closed the connection" in str(lost.value)
        assert conn.pgconn.status == psycopg.pq.ConnStatus.BAD
    finally:
        wire.release()
        await conn.close()


async def test_a_socket_given_a_lost_connections_number_is_heard(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """libpq closes a broken connection's socket as it reads the break, and the next
    socket the process opens (the pool's replacement connection, say) is given the same
    number, possibly before the lost call runs on. The loop must then watch that number
    for the new socket: were it still registered for the lost one, the loop would never
    tell the new connection's call its answer came, and the call would wait for ever."""
    loop = asyncio.get_running_loop()
    conn = await psycopg.AsyncConnection.connect(postgres_url, autocommit=True)
    lost = conn.pgconn.socket
    opened: list[socket.socket] = []
    heard = loop.create_future()
    wake = Wire._wake

    def wake_then_open(self: Wire) -> None:  # the lost call is told; it has not run on
        wake(self)
        if not opened:
            assert conn.pgconn.status == psycopg.pq.ConnStatus.BAD  # its socket is closed
            ours, theirs = socket.socketpair()
            if theirs.fileno() == lost:
                ours, theirs = theirs, ours
            if ours.fileno() != lost:  # give the new socket the lost one's number
                number = os.dup2(ours.fileno(), lost)
                ours.close()
                ours = socket.socket(fileno=number)
            opened.extend((ours, theirs))
            loop.add_reader(ours, lambda: heard.done() or heard.set_result(ours.fileno()))
            theirs.send(b"answer")

    monkeypatch.setattr(Wire, "_wake", wake_then_open)
    wire = Wire(conn, loop)
    try:
        call = asyncio.create_task(wire.call(b"SELECT pg_sleep(0.5), 1, 2", ()))
        await asyncio.sleep(0.1)
        with socket.socket(fileno=os.dup(lost)) as sock:
            sock.shutdown(socket.SHUT_RDWR)
        with pytest.raises(psycopg.OperationalError):
            await call
        assert await asyncio.wait_for(heard, 5) == lost
    finally:
        for sock in opened:
            loop.remove_reader(sock)
            sock.close()
        wire.release()
        await conn.close()


def _open_and_act(url: str, key: str, barrier: Any, results: Any) -> None:
    async def run() -> str:
        barrier.wait()
        async with Ledger.open(url) as ledger:
            result = await ledger.execute(
                request(key), authority=AUTHORITY, adapter=lambda req, ctx: {"by": key}
            )
            return result.status

    try:
        results.put((key, asyncio.run(run())))
    except BaseException as exc:
        results.put((key, f"error: {exc!r}"))


def test_concurrent_first_opens_from_four_processes(postgres_url: str) -> None:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(4)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_open_and_act, args=(postgres_url, f"p{i}", barrier, results))
        for i in range(4)
    ]
    for proc in procs:
        proc.start()
    got = dict(results.get(timeout=120) for _ in procs)
    for proc in procs:
        proc.join(timeout=30)
    assert got == {f"p{i}": "succeeded" for i in range(4)}
    with Ledger.open(postgres_url) as ledger:
        assert ledger.verify().ok
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT value FROM ledger_meta").fetchall() == [(str(SCHEMA_VERSION),)]


# -- (b) per-key locking ------------------------------------------------------------


async def test_a_held_key_blocks_only_itself(postgres_url: str) -> None:
    effects = Effects()
    async with Ledger.open(postgres_url) as ledger:
        with psycopg.connect(postgres_url) as holder:
            # Hold key A's lock as a slow transaction of another worker would.
            holder.execute(KEY_LOCK, ("key-A",))
            on_a = asyncio.create_task(
                ledger.execute(request("key-A"), authority=AUTHORITY, adapter=effects)
            )
            on_b = await asyncio.wait_for(
                ledger.execute(request("key-B"), authority=AUTHORITY, adapter=effects), 10
            )
            assert on_b.status == "succeeded"
            await asyncio.sleep(0.3)
            assert not on_a.done(), "key A must wait for the transaction holding it"
            holder.rollback()
        on_a_result = await asyncio.wait_for(on_a, 10)
        assert on_a_result.status == "succeeded"
        assert ledger.verify().ok
    assert effects.per_key() == {"key-A": 1, "key-B": 1}


# -- (c) killed connections ---------------------------------------------------------


async def test_terminated_backends_never_cause_an_unrecorded_or_duplicate_effect(
    postgres_url: str,
) -> None:
    effects = Effects()
    dbname = dbname_of(postgres_url)
    admin_url = pg.admin_url()
    assert admin_url is not None
    stop = threading.Event()
    kills: list[int] = []

    def killer() -> None:
        # A few rounds, spread over the run: each kills every session the ledger
        # holds, in use or idle, as a failover or an operator's kill would.
        with psycopg.connect(admin_url, autocommit=True) as admin:
            while len(kills) < 8 and not stop.wait(0.15):
                pids = ledger_backends(admin, dbname)
                for pid in pids:
                    admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
                kills.append(len(pids))

    outcomes: dict[str, ActionResult | LedgerUnavailable] = {}
    async with Ledger.open(postgres_url, lease=1.0) as ledger:
        thread = threading.Thread(target=killer, daemon=True)
        thread.start()
        try:
            # At least 200 calls, and as many more as it takes the storm to blow three
            # times: how fast a call is must not decide whether it meets a kill.
            for i in itertools.count():
                if i >= 200 and len(kills) >= 3:
                    break
                key = f"storm-{i}"
                try:
                    outcomes[key] = await ledger.execute(
                        request(key), authority=AUTHORITY, adapter=effects
                    )
                except LedgerUnavailable as exc:
                    outcomes[key] = exc
        finally:
            stop.set()
            thread.join(timeout=10)

        failed = [k for k, v in outcomes.items() if isinstance(v, LedgerUnavailable)]
        assert len(kills) >= 3 and sum(kills) > 0, "the storm never terminated a connection"
        for key in failed:
            message = str(outcomes[key])
            assert "PostgreSQL ledger" in message and "unavailable" in message, message

        # The pool recovered: with the killer gone, every call works again.
        started = {
            (e.key, e.action_id) for e in ledger.events() if e.type == "action.execution_started"
        }
        for key, action_id in effects.done:
            assert (key, action_id) in started, f"{key} acted without a durable started marker"
        assert max(effects.per_key().values()) <= 1
        assert ledger.verify().ok

        # Keys whose call failed: once any claim that did land has expired, the same
        # request is answered (a fresh run if nothing landed, the interruption if the
        # marker landed) and never acts twice.
        await asyncio.sleep(1.1)
        for key in failed:
            result = await ledger.execute(request(key), authority=AUTHORITY, adapter=effects)
            assert result.status in ("succeeded", "failed")
            if result.status == "failed":
                assert result.effect is EffectState.UNKNOWN
        assert max(effects.per_key().values()) <= 1
        assert ledger.verify().ok
    print(f"kills={sum(kills)} unavailable={len(failed)} effects={len(effects.done)}")


async def test_a_failure_before_the_marker_acts_nothing_and_the_key_stays_usable(
    postgres_url: str,
) -> None:
    effects = Effects()
    async with Ledger.open(postgres_url) as ledger:
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            with admin.transaction():
                admin.execute(KEY_LOCK, ("k",))
                call = asyncio.create_task(
                    ledger.execute(request("k"), authority=AUTHORITY, adapter=effects)
                )
                # Wait until the ledger's transaction is queued behind our lock, then
                # kill it: the server fails it before anything was recorded.
                pid = None
                for _ in range(200):
                    row = admin.execute(
                        "SELECT pid FROM pg_stat_activity WHERE application_name ="
                        " 'temporal-ledger' AND wait_event_type = 'Lock'"
                        " AND datname = current_database()"
                    ).fetchone()
                    if row:
                        pid = row[0]
                        break
                    await asyncio.sleep(0.02)
                assert pid is not None, "the ledger never waited for the key's lock"
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
                with pytest.raises(LedgerUnavailable, match="nothing was recorded"):
                    await asyncio.wait_for(call, 10)
        assert effects.done == []
        assert ledger.events("k") == []

        result = await ledger.execute(request("k"), authority=AUTHORITY, adapter=effects)
        assert result.status == "succeeded" and not result.replayed
        assert effects.per_key() == {"k": 1}
        assert ledger.verify().ok


async def test_the_pool_recovers_after_every_connection_is_killed(postgres_url: str) -> None:
    effects = Effects()
    admin_url = pg.admin_url()
    assert admin_url is not None
    async with Ledger.open(postgres_url) as ledger:
        await ledger.execute(request("before"), authority=AUTHORITY, adapter=effects)
        with psycopg.connect(admin_url, autocommit=True) as admin:
            pids = ledger_backends(admin, dbname_of(postgres_url))
            assert pids
            for pid in pids:
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        after = await ledger.execute(request("after"), authority=AUTHORITY, adapter=effects)
        assert after.status == "succeeded"
        assert ledger.state("before").status == "succeeded"
    assert effects.per_key() == {"before": 1, "after": 1}


def test_an_unreachable_server_is_a_clear_error() -> None:
    started = time.monotonic()
    with pytest.raises(LedgerUnavailable, match=r"cannot open the PostgreSQL ledger at .*:1/"):
        Ledger.open("postgresql://nobody:secret@127.0.0.1:1/ledger?connect_timeout=2")
    assert time.monotonic() - started < 10


def test_the_password_never_reaches_the_message() -> None:
    with pytest.raises(LedgerUnavailable) as caught:
        Ledger.open("postgresql://nobody:hunter2@127.0.0.1:1/ledger?connect_timeout=2")
    assert "hunter2" not in str(caught.value)


@pytest.fixture
def own_server() -> Iterator[tuple[str, Callable[[str], None]]]:
    """A private PostgreSQL server this test may stop and restart (the shared one is not)."""
    with pg.private_server() as server:
        yield server


async def test_a_server_stop_is_unavailable_and_a_restart_recovers(
    own_server: tuple[str, Callable[[str], None]],
) -> None:
    url, ctl = own_server
    effects = Effects()
    async with Ledger(PostgresRecorder(url, timeout=2.0), url=url) as ledger:
        await ledger.execute(request("before"), authority=AUTHORITY, adapter=effects)

        await asyncio.to_thread(ctl, "stop")
        started = time.monotonic()
        with pytest.raises(LedgerUnavailable, match="nothing was recorded"):
            await ledger.execute(request("down"), authority=AUTHORITY, adapter=effects)
        assert time.monotonic() - started < 10, "an unreachable server must fail fast"

        await asyncio.to_thread(ctl, "start")
        # The pool reconnects in the background with backoff; the key is untouched.
        for _ in range(30):
            try:
                await ledger.execute(request("down"), authority=AUTHORITY, adapter=effects)
                break
            except LedgerUnavailable:
                await asyncio.sleep(0.5)
        assert ledger.state("down").status == "succeeded"

        # Every pooled connection dies in a restart; the first call afterwards must
        # not pay for them one by one.
        await asyncio.to_thread(ctl, "restart")
        result = await ledger.execute(request("after"), authority=AUTHORITY, adapter=effects)
        assert result.status == "succeeded"
        assert ledger.verify().ok
    assert effects.per_key() == {"before": 1, "down": 1, "after": 1}


# -- (d) the database clock ---------------------------------------------------------


async def test_leases_are_judged_by_the_database_clock(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()
    effects = Effects()

    def slow(req: ActionRequest, ctx: ExecutionContext) -> dict[str, Any]:
        release.wait(30)
        return effects(req, ctx)

    async def no_renewal(key: str, token: int) -> None:
        return None

    async with Ledger.open(postgres_url, lease=0.5) as holder, Ledger.open(postgres_url) as other:
        # The holder never renews, as if its worker had stalled after acting.
        monkeypatch.setattr(holder, "_keep_lease", no_renewal)
        before = db_clock(postgres_url)
        running = asyncio.create_task(
            holder.execute(request("lease"), authority=AUTHORITY, adapter=slow)
        )
        for _ in range(200):
            state = other.state("lease")
            if state.holder_action_id:
                break
            await asyncio.sleep(0.01)
        after = db_clock(postgres_url)
        expires = state.lease_expires_at
        assert expires is not None
        assert before + 0.5 <= expires <= after + 0.5

        # A worker whose own clock runs an hour fast must still see a live lease.
        real_time = time.time
        monkeypatch.setattr(time, "time", lambda: real_time() + 3600)
        with pytest.raises(ActionInProgressError):
            await other.execute(request("lease"), authority=AUTHORITY, adapter=effects)
        monkeypatch.setattr(time, "time", real_time)

        for _ in range(100):
            if db_clock(postgres_url) > expires:
                break
            await asyncio.sleep(0.05)
        recovered = await other.execute(request("lease"), authority=AUTHORITY, adapter=effects)
        assert recovered.replayed
        assert recovered.status == "failed"
        assert recovered.effect is EffectState.UNKNOWN

        release.set()
        late = await asyncio.wait_for(running, 10)
        # The stalled attempt's report is late evidence, not the outcome.
        assert late.effect is EffectState.UNKNOWN
        types = [e.type for e in other.events("lease")]
        assert "action.late_completion" in types
        assert other.verify().ok
    assert effects.per_key() == {"lease": 1}


# -- (e) round trips ------------------------------------------------------------------
#
# Counted on the wire (tests/pg_turns.py), on warm pooled connections: a structure, not
# a timing. A transaction whose record the process can expect (one it wrote or read
# last, or none for a key it never met) is one message: the lock, the writes guarded by
# the chain head it expects, COMMIT, and a read-back of the clock and the record. One
# that meets another record writes nothing and learns it from the read-back.


async def test_a_fresh_call_costs_two_round_trips_and_a_recent_replay_one(
    postgres_url: str,
) -> None:
    turns = await measure(postgres_url, calls=3)
    # Fresh: the claim with its started marker, then the completion, each one message.
    # Replay: its audit record, against the record the completion left.
    assert turns == {"fresh": 2, "replay": 1}, turns


async def test_a_one_message_claim_keeps_time_by_the_database_clock(postgres_url: str) -> None:
    """The clock of a claim sent without a read is estimated from the last reading plus
    the time elapsed since: never ahead of the database's, and not far behind."""
    async with Ledger.open(postgres_url, lease=30.0) as ledger:

        async def adapter(req: ActionRequest, ctx: ExecutionContext) -> dict[str, bool]:
            return {"ok": True}

        await ledger.execute(request("warm-up"), authority=AUTHORITY, adapter=adapter)
        for i in range(3):
            await asyncio.sleep(0.2)
            before = db_clock(postgres_url)
            await ledger.execute(request(f"clock-{i}"), authority=AUTHORITY, adapter=adapter)
            after = db_clock(postgres_url)
            events = ledger.events(f"clock-{i}")
            started = next(e for e in events if e.type == "action.execution_started")
            at = datetime.fromisoformat(started.recorded_at).timestamp()
            assert before - 0.1 <= at <= after, (before, at, after)
            lease_end = datetime.fromisoformat(started.payload["lease_expires_at"]).timestamp()
            assert lease_end == pytest.approx(at + 30.0, abs=1e-3)


async def test_an_expectation_is_checked_not_trusted(postgres_url: str) -> None:
    """Another process's writes are seen: a stale record costs one round trip that
    writes nothing, and the call then goes against what that round trip read back."""
    counter = TurnCounter(postgres_url)
    calls: list[str] = []

    def acting(name: str, *, fails: bool = False) -> Callable[..., dict[str, str]]:
        def adapter(req: ActionRequest, ctx: ExecutionContext) -> dict[str, str]:
            calls.append(name)
            if fails:
                raise NoEffect("refused before acting", retryable=True)
            return {"by": name}

        return adapter

    try:
        async with (
            Ledger.open(counter.url) as here,
            Ledger.open(postgres_url) as elsewhere,
        ):
            await here.execute(request("warm-up"), authority=AUTHORITY, adapter=acting("here"))
            # Here remembers a failure that may act again; elsewhere then acts and succeeds.
            failed = await here.execute(
                request("k"), authority=AUTHORITY, adapter=acting("here", fails=True)
            )
            assert failed.effect is EffectState.NONE
            done = await elsewhere.execute(
                request("k"), authority=AUTHORITY, adapter=acting("elsewhere")
            )
            assert done.ok and done.output == {"by": "elsewhere"}
            # Settled elsewhere, a key here never met.
            await elsewhere.execute(
                request("new-here"), authority=AUTHORITY, adapter=acting("elsewhere")
            )
            assert calls == ["here", "here", "elsewhere", "elsewhere"]

            for key in ("k", "new-here"):
                with counter.counting() as turns:
                    replay = await here.execute(
                        request(key), authority=AUTHORITY, adapter=acting("here")
                    )
                assert replay.replayed and replay.output == {"by": "elsewhere"}, key
                assert turns[0] == 2, (key, turns)
            assert calls == ["here", "here", "elsewhere", "elsewhere"]
            assert here.verify().ok
    finally:
        counter.close()


async def test_a_completion_whose_key_moved_on_is_recorded_the_usual_way(
    postgres_url: str,
) -> None:
    """A request deferred while the adapter runs appends to the key: the one-message
    completion finds another chain head, writes nothing, and the usual one records it."""
    counter = TurnCounter(postgres_url)
    try:
        async with Ledger.open(counter.url, lease=5.0) as ledger:
            deferred: list[BaseException] = []

            async def adapter(req: ActionRequest, ctx: Any) -> dict[str, bool]:
                try:
                    await ledger.execute(request("k"), authority=AUTHORITY, adapter=adapter)
                except ActionInProgressError as exc:
                    deferred.append(exc)
                return {"done": True}

            with counter.counting() as turns:
                result = await ledger.execute(request("k"), authority=AUTHORITY, adapter=adapter)
            assert result.ok and len(deferred) == 1
            types = [e.type for e in ledger.events("k")]
            assert types.count("action.completed") == 1 and "action.deferred" in types
            assert ledger.verify().ok
            # claim 2 + the deferred request's 2 + the refused shortcut 1 + completion 2
            assert turns[0] == 7, turns
    finally:
        counter.close()


def test_a_pooled_connection_is_handed_out_without_a_round_trip(postgres_url: str) -> None:
    counter = TurnCounter(postgres_url)
    recorder = PostgresRecorder(counter.url, pool_size=1)
    try:
        recorder.get("warm-up")

        def three_events(tx: Any) -> None:
            for i in range(3):
                tx.append("test.event", None, {"i": i})
            tx.save(tx.record or KeyRecord(key=tx.key))

        # The proxy sees TCP reads: on a loaded machine a turn can land in the window
        # beside its own (seen in CI: (1, 3, 1)), or a message split across two reads
        # around a reply can count as one more ((1, 2, 3), beside two lanes of tests). A
        # round trip the code makes shows in every run: up to three keys are tried, and
        # one of them must show exactly one turn to read and two to write each.
        seen = []
        for key in ("k1", "k2", "k3"):
            with counter.counting() as read:
                recorder.get(key)
            with counter.counting() as empty:
                recorder.transact(key, lambda tx: None)
            with counter.counting() as written:
                recorder.transact(key, three_events)
            seen.append((read[0], empty[0], written[0]))
            assert [e.type for e in recorder.events(key)] == ["test.event"] * 3
            record = recorder.get(key)
            assert record is not None and record.events == 3
            if seen[-1] == (1, 2, 2):
                break
        assert seen[-1] == (1, 2, 2), seen
    finally:
        recorder.close()
        counter.close()
