"""One statement on the event loop through psycopg's libpq binding (``psycopg.pq``).

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
from typing import Any

import psycopg
from psycopg import errors
from psycopg.pq import ExecStatus
from psycopg.pq.abc import PGconn

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
