"""The PostgreSQL backend's calls on the event loop: one statement each, through
psycopg's libpq binding (``psycopg.pq``), on connections of a pool of the loop's own.

The hot path of the PostgreSQL backend is one ``ledger_write`` call per transaction on
a pooled async connection: a fresh call makes two, a replay one. Through psycopg's
``AsyncRawCursor.execute`` and ``fetchone`` a statement costs ~195 k instructions in this
process (valgrind; ~62 k through the sync cursor, ~7 k for libpq's own blocking call; the
number of parameters hardly matters), more than any part of a replay that is the
ledger's own (bench/README.md, "Issue 30, item 1"). Every value of these calls is a
``str``, ``int``, ``float``, ``bool`` or ``None`` and the answer is one row of three
columns, so the statement goes out here with libpq's ``send_query_params`` (the extended
protocol, as psycopg sends it: one message exchange, the same round trip) and the loop
waits on the socket itself. Measured end to end (``bench/instructions.py``): a fresh
call 1,667 k -> 1,399 k instructions, a replay 1,064 k -> 942 k. Errors are psycopg's own
(``error_from_result`` for what the server says, with its SQLSTATE;
``OperationalError`` with none for a connection lost with nothing said, whether libpq
raises it or reports it as a result), so callers tell a refused statement from a lost
one as before.

What removing it costs a user (issue 42, bench/README.md): in turns on a loaded 2-core
machine, ``temporal_overhead.py --modes concurrent`` on PostgreSQL gave a concurrent
ratio of 0.836 and 1.168 with it, 0.948 and 1.047 without: within the noise. It stays
for the instruction count the project holds (a fresh call at most 1,389 k, a replay
926 k), which a figure of the load cannot show and which psycopg's cursor would exceed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from contextlib import suppress
from typing import Any

import psycopg
from psycopg import errors
from psycopg.pq import ConnStatus, ExecStatus, TransactionStatus
from psycopg.pq.abc import PGconn
from psycopg_pool import AsyncConnectionPool, PoolTimeout

#: A result that says the statement failed: the server's error, or libpq's own (it
#: could not read the answer: a broken connection, a reply it cannot parse).
_FAILED = (ExecStatus.FATAL_ERROR, ExecStatus.BAD_RESPONSE)


class Wire:
    """A connection lent to the event loop, its socket watched for as long as it is: one
    reader registered for the loan, not one per wait (most of a wait's work)."""

    __slots__ = ("conn", "fd", "loop", "pgconn", "waiter")

    def __init__(self, conn: psycopg.AsyncConnection[Any], loop: asyncio.AbstractEventLoop) -> None:
        self.conn, self.pgconn, self.loop, self.fd = conn, conn.pgconn, loop, conn.pgconn.socket
        self.waiter: asyncio.Future[None] | None = None
        loop.add_reader(self.fd, self._ready)

    def _ready(self) -> None:
        """Read what came; wake the waiting call once its results are all here, or the
        connection failed. Nobody waiting: what came is a notice or the server's goodbye
        (a closed socket is watched no more: usable refuses the connection)."""
        waiter = self.waiter
        try:
            self.pgconn.consume_input()
        except psycopg.OperationalError:
            # libpq closed the socket: stop watching its number now, before a connection
            # opened meanwhile is given it (the loop would keep our registration for it,
            # and never tell that connection's call its answer came).
            self.release()
            if waiter is None:
                return
        else:
            if waiter is None or self.pgconn.is_busy():
                return
        self._wake()

    def _wake(self) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def release(self) -> None:
        """Stop watching the socket (before the connection goes back to its pool), once:
        by a second time its number may be another connection's."""
        fd, self.fd = self.fd, -1
        if fd >= 0:
            with suppress(OSError):  # a large call's writer, on a socket libpq closed
                self.loop.remove_writer(fd)
            self.loop.remove_reader(fd)

    async def give_back(self, pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]]) -> None:
        """Release the connection to ``pool``."""
        self.release()
        await pool.putconn(self.conn)

    async def call(self, sql: bytes, params: Sequence[bytes | None]) -> list[bytes | None]:
        """Run ``sql`` with ``params`` (idle connection, autocommit or an implicit
        transaction) and answer its first row's first three columns as the server's text
        (``None`` for NULL).

        Raises:
            psycopg.OperationalError: The connection was lost with nothing said of the
                statement (no SQLSTATE): it may have committed.
            psycopg.Error: The server refused the statement (it has a SQLSTATE).
        """
        pgconn, loop = self.pgconn, self.loop
        pgconn.send_query_params(sql, params)
        while pgconn.flush():  # a large call: libpq sends the rest as the socket drains
            loop.add_writer(self.fd, self._wake)  # (while _ready reads what is said)
            self.waiter = loop.create_future()
            try:
                await self.waiter
            finally:
                if self.fd >= 0:  # (not released by a failed read meanwhile)
                    loop.remove_writer(self.fd)
        row: list[bytes | None] | None = None
        failure: psycopg.Error | None = None
        # Every result to the end, so the connection is idle again for the pool. (What
        # libpq read while sending is parsed by is_busy; the rest, by _ready.)
        while True:
            while pgconn.is_busy():
                self.waiter = loop.create_future()
                await self.waiter
                if pgconn.is_busy():  # _ready's read failed: raises if nothing was said
                    _consume(pgconn)
            result = pgconn.get_result()
            if result is None:
                break
            if result.status == ExecStatus.TUPLES_OK and row is None and result.ntuples:
                get = result.get_value
                row = [get(0, 0), get(0, 1), get(0, 2)]
            elif result.status in _FAILED and failure is None:
                failure = errors.error_from_result(result, encoding="utf-8")
        if failure is not None:
            if failure.sqlstate is None:
                # libpq's own report, not the server's: the connection broke (a reset, a
                # backend gone before it said why) with nothing said of the statement,
                # which may have committed. psycopg calls that an OperationalError.
                raise psycopg.OperationalError(str(failure))
            raise failure
        if row is None:
            raise psycopg.ProgrammingError(f"the statement answered no row: {sql[:80]!r}")
        return row


def _consume(pgconn: PGconn) -> None:
    """Read what arrived. A server that ends the connection says why first (e.g.
    "terminating connection due to administrator command", SQLSTATE 57P01) and then
    closes it: libpq fails the read at the close, but has the error's result ready, and
    that result (the statement did not commit) is the answer, as psycopg reports it.
    Only a connection lost with nothing said raises here."""
    try:
        pgconn.consume_input()
    except psycopg.OperationalError:
        if pgconn.is_busy():
            raise


def usable(pgconn: PGconn) -> bool:
    """Whether a pooled connection is still open: the server may have ended it while it
    sat idle (it closed the socket after saying so). No round trip: only what already
    arrived is read."""
    try:
        pgconn.consume_input()  # fails when the server closed the connection
    except psycopg.OperationalError:
        return False
    return pgconn.status == ConnStatus.OK and pgconn.transaction_status == TransactionStatus.IDLE


# Event loops psycopg cannot wait on (Windows' default): their calls take the usual way,
# on the recorder's threads.
_LOOPS_WITHOUT_READERS: Any = getattr(asyncio, "ProactorEventLoop", ())

# Pools being closed from their own loop's thread (see LoopPool.close).
_CLOSING: set[asyncio.Task[None]] = set()


class LoopPool:
    """The connections of one event loop's calls: a pool opened on the first loop that
    asks (a call from another loop takes the usual way, on the recorder's threads), and
    the connections that loop took from it and keeps, idle, for its next calls: the
    pool's checkout and return cost more instructions than the rest of a one-message
    transaction's psycopg work (bench/README.md). The pool still opens, sizes and
    replaces them; a broken one goes back to it."""

    def __init__(self, url: str, options: dict[str, Any]) -> None:
        """``options``: the pool's (``AsyncConnectionPool``'s keyword arguments)."""
        self._url, self._options, self._timeout = url, options, options["timeout"]
        self._pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._idle: list[Wire] = []
        self._waiting = 0  # calls of the loop waiting on its pool for a connection
        self._closed = False

    async def here(self) -> bool:
        """Whether the running loop has the pool (opened now if no loop has it yet)."""
        loop = asyncio.get_running_loop()
        if self._pool is not None and self.loop is loop:
            return True
        if self._closed or self.loop is not None or isinstance(loop, _LOOPS_WITHOUT_READERS):
            return False  # closed, another loop's, or one psycopg cannot wait on
        self._pool = AsyncConnectionPool(self._url, **self._options)
        self.loop = loop
        # Without waiting for connections: getconn waits for the first.
        await self._pool.open(wait=False)
        return True

    async def wait(self) -> None:
        """Until the pool has a connection (or its timeout: the calls will say why)."""
        if self._pool is not None:
            with suppress(PoolTimeout):
                await self._pool.wait(timeout=self._timeout)

    async def call(self, sql: bytes, params: Sequence[bytes | None]) -> list[bytes | None] | None:
        """:meth:`Wire.call` on a connection of the pool (the loop's, see :meth:`here`),
        or ``None`` if none came within the pool's timeout."""
        pool = self._pool
        if pool is None:
            return None  # closed meanwhile: the usual way says so
        wire = self._idle.pop() if self._idle else None
        if wire is None or not usable(wire.pgconn):
            if wire is not None:
                await wire.give_back(pool)
            wire = await self._take(pool)
            if wire is None:
                return None
        try:
            return await wire.call(sql, params)
        finally:
            pgconn = wire.pgconn
            if (
                self._pool is pool
                and not self._waiting  # a call waits on the pool: the pool gets it back
                and pgconn.status == ConnStatus.OK
                and pgconn.transaction_status == TransactionStatus.IDLE
            ):
                self._idle.append(wire)
            else:
                await wire.give_back(pool)  # it closes a broken one and opens another

    async def _take(self, pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]]) -> Wire | None:
        deadline = time.monotonic() + self._timeout
        while True:
            self._waiting += 1
            try:
                conn = await pool.getconn(timeout=max(0.0, deadline - time.monotonic()))
            except (PoolTimeout, psycopg.Error):
                return None
            finally:
                self._waiting -= 1
            if usable(conn.pgconn):
                return Wire(conn, asyncio.get_running_loop())
            await pool.putconn(conn)

    async def close_here(self) -> None:
        """Close the pool from its own loop."""
        pool = self._pool
        if pool is not None and self.loop is asyncio.get_running_loop():
            self._pool = None
            await self._close(pool)

    def close(self) -> None:
        """Close the pool from anywhere: on its loop, from another thread while it runs,
        or, from the loop's own thread, once that thread is free again."""
        self._closed = True
        pool, loop, self._pool = self._pool, self.loop, None
        if pool is None or loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        closing = self._close(pool)
        if running is loop:
            task = loop.create_task(closing)
            _CLOSING.add(task)
            task.add_done_callback(_CLOSING.discard)
        elif loop.is_running():
            with suppress(Exception):
                asyncio.run_coroutine_threadsafe(closing, loop).result(self._timeout)
        else:
            closing.close()

    async def _close(self, pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]]) -> None:
        while self._idle:
            await self._idle.pop().give_back(pool)
        await pool.close()
