"""Faults that must not park a step by mistake (issue item 6), against real servers.

An adapter that acted, and whose completion write then met a lost connection, used to
end as an unknown effect: the step parked although the effect was observed. Here the
connection is killed (``pg_terminate_backend``), the server restarted, or the line cut
by a TCP relay exactly while the completion is written; every call must still end
SUCCEEDED with one effect, and nothing may be left for an operator. No mocks: the
ledger talks to PostgreSQL, and the faults are done to the real sessions.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from temporal_ledger.activities import tool, tool_context
from temporal_ledger.ledger import ActionRequest, Ledger
from temporal_ledger.ledger._models import EffectState, ExecutionContext
from temporal_ledger.ledger._postgres import PostgresRecorder
from temporal_ledger.ledger._testing_child import AUTHORITY, request
from temporalio.worker import Worker

from tests import pg
from tests.temporal_support import Setup, lines, open_effects
from tests.temporal_tools import Call, Hold, Lines, StepsWorkflow
from tests.test_postgres_backend import Effects, dbname_of

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(120)]

# The one statement every ledger write starts with: holding it from a session of the
# test's own makes the ledger's transaction on that key wait, its connection open.
KEY_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))"

# A ledger session waiting for a given key's lock (bigint advisory locks show their
# high and low halves as classid and objid).
WAITING_ON_KEY = """
    SELECT a.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
    WHERE l.locktype = 'advisory' AND NOT l.granted
      AND a.application_name = 'temporal-ledger' AND a.datname = %s
      AND ((l.classid::bigint << 32) | l.objid::bigint) = hashtextextended(%s, 0)
"""

LEDGER_SESSIONS = (
    "SELECT pid FROM pg_stat_activity WHERE datname = %s AND application_name = 'temporal-ledger'"
)


def wait_for_the_write(admin: psycopg.Connection[Any], dbname: str, key: str) -> bool:
    """Whether a ledger transaction on ``key`` came to wait for its lock within 10 s."""
    deadline = time.monotonic() + 10
    while not admin.execute(WAITING_ON_KEY, (dbname, key)).fetchall():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


class CompletionKiller:
    """Makes a key's completion write meet a killed connection.

    ``arm(key)`` is called by the adapter once it acted: a session of the test's own
    takes the key's lock, so the completion's transaction waits on it. A thread then
    sees that transaction waiting, terminates every ledger session on the database
    (the waiting one, idle ones, and any other call's), and lets the lock go.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.dbname = dbname_of(url)
        self.hits = 0  # completion writes whose connection was killed under them
        self.killed = 0  # sessions terminated in all
        self.misses: list[str] = []
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def arm(self, key: str) -> None:
        holder = psycopg.connect(self.url)
        holder.execute(KEY_LOCK, (key,))  # held until the thread rolls back
        thread = threading.Thread(target=self._kill_waiter, args=(holder, key), daemon=True)
        thread.start()
        self._threads.append(thread)

    def _kill_waiter(self, holder: psycopg.Connection[Any], key: str) -> None:
        try:
            with psycopg.connect(self.url, autocommit=True) as admin:
                if not wait_for_the_write(admin, self.dbname, key):
                    self.misses.append(key)
                    return
                pids = [pid for (pid,) in admin.execute(LEDGER_SESSIONS, (self.dbname,))]
                for pid in pids:
                    admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
                with self._lock:
                    self.hits += 1
                    self.killed += len(pids)
        finally:
            holder.rollback()
            holder.close()

    def join(self) -> None:
        for thread in self._threads:
            thread.join(timeout=15)
        assert not any(t.is_alive() for t in self._threads)


def completions(ledger: Ledger, key: str) -> list[str]:
    """The types of the key's events that report an outcome."""
    return [
        e.type
        for e in ledger.events(key)
        if e.type in ("action.completed", "action.late_completion")
    ]


def assert_succeeded_once(ledger: Ledger, results: dict[str, Any], effects: Effects) -> None:
    """Every call SUCCEEDED with its effect observed, acted once, and left nothing open."""
    for key, result in results.items():
        assert result.status == "succeeded", (key, result)
        assert result.effect is EffectState.OBSERVED and not result.replayed, (key, result)
        assert completions(ledger, key) == ["action.completed"], key
    assert effects.per_key() == dict.fromkeys(results, 1)
    assert ledger.open_effects() == []
    report = ledger.verify()
    assert report.ok, report


# -- a killed connection --------------------------------------------------------------


async def test_a_connection_killed_during_the_completion_write_parks_nothing(
    postgres_url: str,
) -> None:
    effects = Effects()
    killer = CompletionKiller(postgres_url)

    def act_then_kill(req: ActionRequest, ctx: ExecutionContext) -> dict[str, Any]:
        output = effects(req, ctx)
        killer.arm(req.key)
        return output

    results = {}
    async with Ledger.open(postgres_url) as ledger:
        for i in range(20):
            key = f"killed-{i}"
            results[key] = await ledger.execute(
                request(key), authority=AUTHORITY, adapter=act_then_kill
            )
        killer.join()
        assert killer.misses == []
        assert killer.hits == 20, "every completion write must have met a killed connection"
        assert_succeeded_once(ledger, results, effects)
    print(f"\nkilled during the completion: {killer.hits} calls, {killer.killed} sessions")


# -- a COMMIT whose answer is lost, and a line cut for longer than the lease ----------


@dataclasses.dataclass
class _Line:
    client: socket.socket
    server: socket.socket
    lose_commit_answer: bool = False

    def cut(self) -> None:
        for sock in (self.client, self.server):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


# The statements that commit: an explicit COMMIT, or the ledger's write function run in
# an implicit transaction (a one-message transaction commits when the server finishes it).
COMMITTING = (b"COMMIT", b"ledger_write(")
# The server's ReadyForQuery, idle: whatever transaction the message ran has committed.
COMMIT_DONE = b"Z\x00\x00\x00\x05I"


class _Frontend:
    """The client's side of one line, framed into protocol messages, to see which sends
    run a statement that commits (by its SQL, or by the name it was prepared under)."""

    def __init__(self) -> None:
        self.buffer = b""
        self.started = False  # the startup message, which has no type byte, is past
        self.committing: set[bytes] = set()  # prepared statements that commit

    def commits(self, data: bytes) -> bool:
        self.buffer += data
        found = False
        while True:
            if not self.started:
                if len(self.buffer) < 4:
                    return found
                length = int.from_bytes(self.buffer[:4], "big")
                if len(self.buffer) < length:
                    return found
                self.buffer, self.started = self.buffer[length:], True
                continue
            if len(self.buffer) < 5:
                return found
            kind, length = self.buffer[:1], int.from_bytes(self.buffer[1:5], "big")
            if len(self.buffer) < 1 + length:
                return found
            body, self.buffer = self.buffer[5 : 1 + length], self.buffer[1 + length :]
            if kind == b"Q":  # a simple query
                found = found or any(c in body for c in COMMITTING)
            elif kind == b"P":  # Parse: a statement's name and its SQL
                name, _, rest = body.partition(b"\x00")
                if any(c in rest.partition(b"\x00")[0] for c in COMMITTING):
                    self.committing.add(name)
                else:
                    self.committing.discard(name)
            elif kind == b"B":  # Bind: runs a parsed statement, by name
                statement = body.partition(b"\x00")[2].partition(b"\x00")[0]
                found = found or statement in self.committing


class Relay:
    """A TCP relay between the ledger and PostgreSQL that can fail the network.

    ``lose_next_commit_answer()`` lets the next message that commits through and, once
    the server answered that it is done (idle again: committed), cuts the line instead of
    passing the answer on: the client cannot tell whether its transaction landed.
    ``cut()`` drops every line and refuses new ones until ``restore()``.
    """

    def __init__(self, url: str) -> None:
        target = urlsplit(url)
        self._target = (target.hostname or "127.0.0.1", target.port or 5432)
        self._listener = socket.create_server(("127.0.0.1", 0))
        port = self._listener.getsockname()[1]
        # Plain text, so the relay can see the COMMIT go by.
        self.url = urlunsplit(
            target._replace(
                netloc=f"{target.username}@127.0.0.1:{port}",
                query="sslmode=disable&gssencmode=disable",
            )
        )
        self.answers_lost = 0
        self._down = threading.Event()
        self._armed = threading.Event()
        self._lines: list[_Line] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def lose_next_commit_answer(self) -> None:
        self._armed.set()

    def cut(self) -> None:
        self._down.set()
        with self._lock:
            for line in self._lines:
                line.cut()
            self._lines.clear()

    def restore(self) -> None:
        self._down.clear()

    def close(self) -> None:
        self.cut()
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self._down.is_set():
                client.close()
                continue
            try:
                server = socket.create_connection(self._target)
            except OSError:
                client.close()
                continue
            line = _Line(client, server)
            with self._lock:
                self._lines.append(line)
            threading.Thread(target=self._upstream, args=(line,), daemon=True).start()
            threading.Thread(target=self._downstream, args=(line,), daemon=True).start()

    def _upstream(self, line: _Line) -> None:
        frontend = _Frontend()
        with contextlib.suppress(OSError):
            while data := line.client.recv(65536):
                if frontend.commits(data) and self._armed.is_set():
                    with self._lock:
                        if self._armed.is_set():
                            self._armed.clear()
                            line.lose_commit_answer = True
                line.server.sendall(data)
        line.cut()

    def _downstream(self, line: _Line) -> None:
        seen = b""
        with contextlib.suppress(OSError):
            while data := line.server.recv(65536):
                if line.lose_commit_answer:
                    seen += data
                    if COMMIT_DONE in seen:
                        self.answers_lost += 1
                        break
                    continue
                line.client.sendall(data)
        line.cut()


@pytest.fixture
def relay(postgres_url: str) -> Iterator[Relay]:
    relay = Relay(postgres_url)
    try:
        yield relay
    finally:
        relay.close()


async def test_a_completion_whose_commit_answer_was_lost_is_recorded_once(
    relay: Relay, postgres_url: str
) -> None:
    effects = Effects()

    def act_then_lose_the_answer(req: ActionRequest, ctx: ExecutionContext) -> dict[str, Any]:
        output = effects(req, ctx)
        relay.lose_next_commit_answer()  # the completion's COMMIT: nothing else commits now
        return output

    results = {}
    async with Ledger(PostgresRecorder(relay.url, timeout=5.0), url=relay.url) as ledger:
        for i in range(10):
            key = f"answer-lost-{i}"
            results[key] = await ledger.execute(
                request(key), authority=AUTHORITY, adapter=act_then_lose_the_answer
            )
        # The first try landed each time; the retry found it instead of adding another.
        assert relay.answers_lost == 10
        assert_succeeded_once(ledger, results, effects)
    with Ledger.open(postgres_url) as direct:
        assert direct.verify().ok


async def test_a_completion_that_lost_its_key_is_late_evidence_not_the_outcome(
    relay: Relay, postgres_url: str
) -> None:
    effects = Effects()
    cut = threading.Event()

    def act_then_cut(req: ActionRequest, ctx: ExecutionContext) -> dict[str, Any]:
        output = effects(req, ctx)
        relay.cut()
        cut.set()
        return output

    recorder = PostgresRecorder(relay.url, timeout=0.5)
    async with (
        Ledger(recorder, lease=1.0, url=relay.url) as cut_off,
        Ledger.open(postgres_url) as other,
    ):
        running = asyncio.create_task(
            cut_off.execute(request("lost"), authority=AUTHORITY, adapter=act_then_cut)
        )
        await asyncio.to_thread(cut.wait, 10)
        # Neither renewal nor completion gets through; once the lease has expired by the
        # database clock, another worker settles the key as an interruption.
        taken = await other.execute(request("lost"), authority=AUTHORITY, adapter=effects, wait=10)
        assert (taken.status, taken.effect) == ("failed", EffectState.UNKNOWN)
        assert not running.done(), "the completion must still be retrying"
        relay.restore()
        late = await asyncio.wait_for(running, 30)

        # The stale token's report is kept beside the outcome, never as it.
        assert late.replayed and late.effect is EffectState.UNKNOWN
        types = [e.type for e in other.events("lost")]
        assert types.count("action.late_completion") == 1
        evidence = next(e for e in other.events("lost") if e.type == "action.late_completion")
        assert evidence.payload["status"] == "succeeded"
        assert [s.key for s in other.open_effects()] == ["lost"]
        assert other.verify().ok
    assert effects.per_key() == {"lost": 1}


# -- a server restart -------------------------------------------------------------------


@pytest.fixture
def own_server(postgres_url: str) -> Iterator[tuple[str, Callable[[str], None]]]:
    # Takes postgres_url only to skip (or fail in CI) like every PostgreSQL test.
    with pg.private_server() as server:
        yield server


async def test_a_restart_while_the_completion_is_pending_parks_nothing(
    own_server: tuple[str, Callable[[str], None]],
) -> None:
    url, ctl = own_server
    effects = Effects()
    restarts: list[threading.Thread] = []
    hits: list[str] = []

    def restart_under_the_write(holder: psycopg.Connection[Any], key: str) -> None:
        with psycopg.connect(url, autocommit=True) as admin:
            waiting = wait_for_the_write(admin, "postgres", key)
        ctl("restart")  # a fast shutdown ends the waiting transaction, the lock's holder too
        if waiting:
            hits.append(key)
        with contextlib.suppress(psycopg.Error):
            holder.close()

    def down_longer_than_the_pool_waits(key: str) -> None:
        time.sleep(1.5)
        ctl("start")
        hits.append(key)

    def act_then_restart(req: ActionRequest, ctx: ExecutionContext) -> dict[str, Any]:
        output = effects(req, ctx)
        if len(effects.done) % 2:
            # Restarted while the completion's transaction is open on the server.
            holder = psycopg.connect(url)
            holder.execute(KEY_LOCK, (req.key,))
            thread = threading.Thread(target=restart_under_the_write, args=(holder, req.key))
        else:
            # Stopped before the completion is sent, and down for longer than the pool
            # waits for a connection (0.5 s): the write fails without reaching a server.
            ctl("stop")
            thread = threading.Thread(target=down_longer_than_the_pool_waits, args=(req.key,))
        thread.start()
        restarts.append(thread)
        return output

    results = {}
    async with Ledger(PostgresRecorder(url, timeout=0.5), url=url) as ledger:
        try:
            for i in range(5):
                key = f"restart-{i}"
                started = time.monotonic()
                results[key] = await ledger.execute(
                    request(key), authority=AUTHORITY, adapter=act_then_restart
                )
                print(f"\n{key}: {time.monotonic() - started:.1f} s", end="")
                # The next call starts on a server that is up: a completion can land
                # before the restart under it has finished, and the next admission,
                # which is not retried, would meet a server shutting down.
                await asyncio.to_thread(restarts[-1].join, 30)
        finally:
            # The server must be up (or down) for good before the fixture removes it.
            for thread in restarts:
                await asyncio.to_thread(thread.join, 30)
        assert sorted(hits) == sorted(results)
        assert_succeeded_once(ledger, results, effects)


# -- through Temporal ------------------------------------------------------------------


async def test_killed_ledger_connections_under_temporal_park_no_step(
    postgres_url: str, setup: Setup
) -> None:
    killer = CompletionKiller(postgres_url)

    # Registered under the name StepsWorkflow schedules: it acts, then arms the kill
    # of its own completion write.
    @tool(capability="files.append", name="hold_and_append")
    async def append_then_kill(arg: Hold) -> Lines:
        path = Path(arg.path)
        with path.open("a", encoding="utf-8") as handle:
            handle.write(arg.line + "\n")
        await asyncio.to_thread(killer.arm, tool_context().key)
        return Lines(lines=len(lines(path)))

    setup = dataclasses.replace(setup, ledger_url=postgres_url, lease=30.0)
    client = await setup.client()
    target = setup.folder / "target.txt"
    runs = {
        f"pg-kill-{n}-{uuid.uuid4().hex[:6]}": [
            Call(
                tool="hold_and_append",
                step=f"append-{i}",
                arg={"path": str(target), "line": f"{n}-{i}"},
            )
            for i in range(5)
        ]
        for n in range(4)
    }
    async with Worker(
        client,
        task_queue=setup.task_queue,
        workflows=[StepsWorkflow],
        activities=[append_then_kill],
    ):
        handles = [
            await client.start_workflow(
                StepsWorkflow.run, calls, id=workflow_id, task_queue=setup.task_queue
            )
            for workflow_id, calls in runs.items()
        ]
        results = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), 60)
        parked = [await open_effects(setup.address, workflow_id) for workflow_id in runs]
    killer.join()

    assert killer.misses == []
    assert killer.hits == 20
    assert all(len(result) == 5 for result in results)
    assert parked == [[]] * len(runs)
    written = lines(target)
    assert sorted(written) == sorted(f"{n}-{i}" for n in range(4) for i in range(5))
    with Ledger.open(postgres_url) as ledger:
        keys = {e.key for e in ledger.events() if e.type == "action.requested"}
        assert len(keys) == 20
        for key in keys:
            state = ledger.state(key)
            assert (state.status, state.effect) == ("succeeded", EffectState.OBSERVED)
        assert ledger.open_effects() == []
        assert ledger.verify().ok
    print(f"\nunder Temporal: {killer.hits} completions hit, {killer.killed} sessions killed")


# -- a caller that stops waiting mid-exchange ------------------------------------------


async def test_a_caller_cancelled_during_a_one_message_write_leaves_the_pool_whole(
    postgres_url: str,
) -> None:
    """A call cancelled while its one-message completion waits on the server (for the
    key's lock, held here) gives its connection back: on a pool of one, the next call
    still gets a connection, and the cancelled completion lands once the lock is free."""
    effects = Effects()
    holder = psycopg.connect(postgres_url)
    waiting = threading.Event()

    def act_then_hold_the_key(req: ActionRequest, ctx: ExecutionContext) -> dict[str, Any]:
        output = effects(req, ctx)
        if req.key == "cancelled":
            holder.execute(KEY_LOCK, (req.key,))
            waiting.set()
        return output

    async with Ledger(PostgresRecorder(postgres_url, pool_size=1, timeout=2.0)) as ledger:
        await ledger.execute(request("warm-up"), authority=AUTHORITY, adapter=effects)
        call = asyncio.create_task(
            ledger.execute(request("cancelled"), authority=AUTHORITY, adapter=act_then_hold_the_key)
        )
        await asyncio.to_thread(waiting.wait, 10)
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            assert await asyncio.to_thread(
                wait_for_the_write, admin, dbname_of(postgres_url), "cancelled"
            )
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        holder.rollback()  # the lock goes; the server finishes the message it was sent
        holder.close()

        after = await ledger.execute(request("after"), authority=AUTHORITY, adapter=effects)
        assert after.ok
        deadline = time.monotonic() + 10
        while completions(ledger, "cancelled") != ["action.completed"]:
            assert time.monotonic() < deadline, ledger.events("cancelled")
            await asyncio.sleep(0.05)
        assert effects.per_key() == {"warm-up": 1, "cancelled": 1, "after": 1}
        assert ledger.open_effects() == []
        assert ledger.verify().ok
