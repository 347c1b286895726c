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

#: How a text parameter says NUL is refused: as psycopg's own dumper says it.
_NUL = "PostgreSQL text fields cannot contain NUL (0x00) bytes"


def _text(value: Any) -> bytes | None:
    """A parameter in PostgreSQL's text format; its type is the function's argument's
    (the parameters are sent untyped)."""
    if value is None:
        return None
    if value is True:
        return b"t"
    if value is False:
        return b"f"
    if isinstance(value, str):
        if "\x00" in value:
            raise psycopg.DataError(_NUL)
        return value.encode()
    if isinstance(value, int):
        return str(value).encode()
    if isinstance(value, float):
        return repr(value).encode()  # the shortest text that reads back exactly
    raise TypeError(f"a ledger_write parameter is a str, int, float, bool or None: {value!r}")


async def call_one_row(
    conn: psycopg.AsyncConnection[Any], sql: bytes, params: tuple[Any, ...]
) -> list[bytes | None]:
    """Run ``sql`` with ``params`` on ``conn`` (idle, in autocommit or an implicit
    transaction) and answer its one row's values as text.

    Args:
        conn: A connection the caller holds alone.
        sql: The statement, with ``$n`` placeholders.
        params: Its parameters.

    Returns:
        The first row's columns, as the server's text (``None`` for NULL).

    Raises:
        psycopg.OperationalError: The connection was lost with nothing said of the
            statement (no SQLSTATE): it may have committed.
        psycopg.Error: The server refused the statement (it has a SQLSTATE).
    """
    pgconn = conn.pgconn
    pgconn.send_query_params(sql, [_text(value) for value in params])
    loop = asyncio.get_running_loop()
    socket = pgconn.socket
    while pgconn.flush():  # a large call: wait until libpq has sent it all
        await _ready(loop, socket, write=True)
        _consume(pgconn)
    _consume(pgconn)
    while pgconn.is_busy():
        await _ready(loop, socket, write=False)
        _consume(pgconn)
    row: list[bytes | None] | None = None
    failure: psycopg.Error | None = None
    # Every result to the end, so the connection is idle again for the pool.
    while (result := pgconn.get_result()) is not None:
        if result.status == ExecStatus.TUPLES_OK and row is None and result.ntuples:
            row = [result.get_value(0, n) for n in range(result.nfields)]
        elif result.status in _FAILED and failure is None:
            failure = errors.error_from_result(result, encoding="utf-8")
        while pgconn.is_busy():
            await _ready(loop, socket, write=False)
            _consume(pgconn)
    if failure is not None:
        if failure.sqlstate is None:
            # libpq's own report, not the server's: the connection broke (a reset, a
            # backend gone before it said why) with nothing said of the statement, which
            # may have committed. psycopg calls that an OperationalError; so do we.
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


async def _ready(loop: asyncio.AbstractEventLoop, socket: int, *, write: bool) -> None:
    """Until ``socket`` is readable (or, with ``write``, writable or readable: libpq
    reads what the server sends while it is still sending)."""
    ready = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(socket, wake)
    if write:
        loop.add_writer(socket, wake)
    try:
        await ready
    finally:
        loop.remove_reader(socket)
        if write:
            loop.remove_writer(socket)


def check_pooled(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> None:
    """Refuse a pooled connection the server has ended while it sat idle (it closed the
    socket after saying so), without a round trip: only what already arrived is read."""
    pgconn = conn.pgconn
    pgconn.consume_input()  # raises when the server closed the connection
    if pgconn.status != ConnStatus.OK or pgconn.transaction_status != TransactionStatus.IDLE:
        raise psycopg.OperationalError("the server ended the connection while it was pooled")


# Event loops psycopg cannot wait on (Windows' default): their calls take the usual way,
# on the recorder's threads.
_LOOPS_WITHOUT_READERS: tuple[type, ...] = tuple(
    kind for kind in (getattr(asyncio, "ProactorEventLoop", None),) if kind is not None
)

# Pools being closed from their own loop's thread (see LoopPool.close).
_CLOSING: set[asyncio.Task[None]] = set()


class LoopPool:
    """The connections of one event loop's calls: a pool opened on the first loop that
    asks (a call from another loop takes the usual way, on the recorder's threads), and
    the connections that loop took from it and keeps, idle, for its next calls: the
    pool's checkout and return cost more instructions than the rest of a one-message
    transaction's psycopg work (bench/README.md). The pool still opens, sizes and
    replaces them; a broken one goes back to it."""

    def __init__(self, url: str, kwargs: dict[str, Any], *, size: int, timeout: float) -> None:
        self._url, self._kwargs, self._size, self._timeout = url, kwargs, size, timeout
        self._pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._idle: list[psycopg.AsyncConnection[Any]] = []
        self._waiting = 0  # calls of the loop waiting on its pool for a connection
        self._closed = False

    async def here(self, name: str) -> bool:
        """Whether the running loop has the pool (opened now if no loop has it yet)."""
        loop = asyncio.get_running_loop()
        if self._pool is not None and self._loop is loop:
            return True
        if self._closed or self._loop is not None or isinstance(loop, _LOOPS_WITHOUT_READERS):
            return False  # closed, another loop's, or one psycopg cannot wait on
        self._pool = AsyncConnectionPool(
            self._url,
            kwargs=self._kwargs,
            min_size=1,
            max_size=self._size,
            open=False,
            timeout=self._timeout,
            name=name,
        )
        self._loop = loop
        # Without waiting for connections: getconn waits for the first.
        await self._pool.open(wait=False)
        return True

    async def wait(self) -> None:
        """Until the pool has a connection (or its timeout: the calls will say why)."""
        if self._pool is not None:
            with suppress(PoolTimeout):
                await self._pool.wait(timeout=self._timeout)

    async def call(self, sql: bytes, params: tuple[Any, ...]) -> list[bytes | None] | None:
        """:func:`call_one_row` on a connection of the pool (the loop's, see :meth:`here`),
        or ``None`` if none came within the pool's timeout."""
        pool = self._pool
        assert pool is not None
        conn = await self._take(pool)
        if conn is None:
            return None
        try:
            return await call_one_row(conn, sql, params)
        finally:
            pgconn = conn.pgconn
            if (
                self._pool is pool
                and not self._waiting  # a call waits on the pool: the pool gets it back
                and pgconn.status == ConnStatus.OK
                and pgconn.transaction_status == TransactionStatus.IDLE
            ):
                self._idle.append(conn)
            else:
                await pool.putconn(conn)  # it closes a broken one and opens another

    async def _take(
        self, pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]]
    ) -> psycopg.AsyncConnection[Any] | None:
        deadline = time.monotonic() + self._timeout
        while True:
            if self._idle:
                conn = self._idle.pop()
            else:
                self._waiting += 1
                try:
                    conn = await pool.getconn(timeout=max(0.0, deadline - time.monotonic()))
                except (PoolTimeout, psycopg.Error):
                    return None
                finally:
                    self._waiting -= 1
            try:
                check_pooled(conn)
            except psycopg.Error:
                await pool.putconn(conn)
                continue
            return conn

    async def close_here(self) -> None:
        """Close the pool from its own loop."""
        pool = self._pool
        if pool is not None and self._loop is asyncio.get_running_loop():
            self._pool = None
            await self._close(pool)

    def close(self) -> None:
        """Close the pool from anywhere: on its loop, from another thread while it runs,
        or, from the loop's own thread, once that thread is free again."""
        self._closed = True
        pool, loop, self._pool = self._pool, self._loop, None
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
            await pool.putconn(self._idle.pop())
        await pool.close()
