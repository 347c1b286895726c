"""The ledger's fast path in structural figures, each measured beside its own baseline.

One run measures, side by side and on both backends (issue "The ledger's fast path",
items 6 and 7):

1. durable syncs per call (SQLite): a child process makes fresh calls and replays
   under ``strace -f -C -y -e trace=fsync,fdatasync,mkdir``; the syncs between two
   marker ``mkdir`` calls are divided by the calls made between them. Baseline: a
   raw ``sqlite3`` one-row INSERT+COMMIT loop (WAL, synchronous=FULL) under the
   same strace.
2. client-server round trips per call (PostgreSQL): the calls go through a TCP
   proxy on 127.0.0.1 that counts protocol turns (a client send after the server
   has sent). Baseline: a raw psycopg one-row INSERT+COMMIT through the same proxy.
3. CPU per call (``time.process_time`` of this process, every thread) over the CPU
   of a raw durable one-row transaction on the same driver, fresh and replay, both
   backends. An fsync wait is not CPU; a PostgreSQL server's CPU is not counted.
4. concurrent rate: 64 concurrent callers (asyncio tasks, distinct keys) on SQLite,
   10 and 16 on PostgreSQL, in fresh calls/s over half the serial raw durable
   commit rate measured between the rounds.
5. replay growth: the median replay on a ledger of ``--growth-actions`` actions
   over the median replay on one of 1,000, measured alternately in one process;
   both ledgers are filled through the public API by several processes.
6. the 8-process hammer: processes race through 200 shared keys; effects are
   counted outside the ledger, duplicates must be 0.

Only the public API is used (``Ledger.open``, ``execute``, ``verify``). PostgreSQL
figures use scratch databases created on the server of ``--pg-admin`` and dropped
afterwards; SQLite files live in a temporary directory that is removed.

    python bench/ledger_bench.py --quick        # a smoke run, about a minute
    python bench/ledger_bench.py                # the full run, under ~10 minutes
    python bench/ledger_bench.py --growth-actions 1000000   # the 10^6 growth figure
    python bench/ledger_bench.py --no-postgres  # SQLite only
    python bench/ledger_bench.py --only rt,cpu --against main --rounds 5
                                                # main's code and this tree's, in turns

It is a measurement: it exits 0 whatever the figures, 1 if the script itself failed,
2 on bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import platform
import random
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from _requests import bench_request  # bench/ is sys.path[0] when run as a script
from temporal_ledger.ledger import (
    ActionInProgressError,
    ActionRequest,
    ActionResult,
    Authority,
    Ledger,
)
from temporal_ledger.ledger._models import ExecutionContext

AUTHORITY = Authority("bench", ["bench.*"])
STRACE = "/usr/bin/strace"
SMALL = 1_000  # the ledger size the large replay is compared with
HAMMER_KEYS = 200
RAW_TABLE = "bench_raw_commit"
DEFAULT_PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"

# Targets (issue "The ledger's fast path").
RT_FRESH_LIMIT = 3.0  # PostgreSQL round trips per fresh call
RT_REPLAY_LIMIT = 1.0  # ... per replay (issue 30)
SYNC_FRESH_TARGET = 2.0  # SQLite durable syncs per fresh call
SYNC_SAFE_TARGET = 1.0  # ... per retry-safe fresh call (issue 30: one write)
SYNC_REPLAY_LIMIT = 0.0  # ... per replay (issue 30: a replay's record needs no sync)
RT_SAFE_LIMIT = 1.0  # PostgreSQL round trips per retry-safe fresh call (issue 30)
CPU_LIMITS = {  # CPU per call over the CPU of a raw durable one-row transaction (issue 30)
    ("sqlite", "fresh"): 4.0,
    ("sqlite", "replay"): 2.0,
    ("postgresql", "fresh"): 4.0,
    ("postgresql", "replay"): 2.0,
}
RATE_LIMITS = {("sqlite", 64): 1.0, ("postgresql", 10): 0.5, ("postgresql", 16): 0.5}
GROWTH_LIMIT = 1.3


make_request = bench_request


async def trivial(req: ActionRequest, ctx: ExecutionContext) -> dict[str, bool]:
    # Async, so that no thread hop of the adapter is measured: the rest is the ledger.
    return {"ok": True}


async def call(ledger: Ledger, key: str, *, retry_safe: bool = False) -> ActionResult:
    return await ledger.execute(
        make_request(key), authority=AUTHORITY, adapter=trivial, retry_safe=retry_safe
    )


def progress(message: str) -> None:
    if not QUIET:
        print(f"[bench] {message}", file=sys.stderr, flush=True)


QUIET = False


# -- storage: scratch databases and raw one-row commits ------------------------------


class PgServer:
    """Scratch databases on the server named by an admin URL (created, then dropped)."""

    def __init__(self, admin_url: str) -> None:
        self.admin_url = admin_url
        parts = urlsplit(admin_url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 5432
        self.created: list[str] = []

    def url(self, dbname: str, *, port: int | None = None) -> str:
        parts = urlsplit(self.admin_url)
        netloc = parts.netloc
        if port is not None:
            userinfo = netloc.rpartition("@")[0]
            netloc = f"{userinfo + '@' if userinfo else ''}127.0.0.1:{port}"
        return urlunsplit((parts.scheme, netloc, f"/{dbname}", parts.query, ""))

    def _admin(self) -> Any:
        import psycopg

        return psycopg.connect(self.admin_url, autocommit=True)

    def create(self, label: str) -> str:
        name = f"ledger_bench_{label}_{os.getpid()}_{uuid.uuid4().hex[:6]}"
        with self._admin() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        self.created.append(name)
        return name

    def drop(self, name: str) -> None:
        with self._admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if name in self.created:
            self.created.remove(name)

    @contextlib.contextmanager
    def database(self, label: str) -> Iterator[str]:
        name = self.create(label)
        try:
            yield name
        finally:
            self.drop(name)

    def drop_all(self) -> None:
        for name in list(self.created):
            with contextlib.suppress(Exception):
                self.drop(name)

    def settings(self) -> str:
        with self._admin() as conn:
            values = [
                f"{n}={conn.execute(f'SHOW {n}').fetchone()[0]}"  # type: ignore[index]
                for n in ("synchronous_commit", "fsync", "wal_sync_method")
            ]
            version = conn.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
        return f"PostgreSQL {version.split()[0]}: " + " ".join(values)


class RawSQLite:
    """A raw durable one-row commit: WAL, synchronous=FULL, BEGIN IMMEDIATE (as the ledger)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.conn = sqlite3.connect(path, isolation_level=None, timeout=60)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        self.conn.execute(f"CREATE TABLE IF NOT EXISTS {RAW_TABLE} (id INTEGER PRIMARY KEY, v)")
        # Past the new WAL file's growth: a commit that extends a file costs more.
        for _ in range(1200):
            self.commit()

    def commit(self) -> None:
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.execute(f"INSERT INTO {RAW_TABLE} (v) VALUES (?)", ("x" * 64,))
        self.conn.execute("COMMIT")

    def close(self) -> None:
        self.conn.close()


class RawPostgres:
    """A raw durable one-row commit through psycopg: autocommit off, INSERT, commit().

    psycopg sends the implicit BEGIN as its own statement: 3 round trips. With
    ``pipeline``, autocommit on and BEGIN, INSERT, COMMIT sent in one pipeline: 1.
    """

    def __init__(self, url: str, *, pipeline: bool = False) -> None:
        import psycopg

        self.conn = psycopg.connect(url, autocommit=pipeline)
        self.pipeline = pipeline
        self.conn.execute(
            f"CREATE TABLE IF NOT EXISTS {RAW_TABLE} (id BIGSERIAL PRIMARY KEY, v TEXT)"
        )
        self.conn.commit()
        for _ in range(50):
            self.commit()

    def commit(self) -> None:
        if self.pipeline:
            with self.conn.pipeline():
                self.conn.execute("BEGIN")
                self.conn.execute(f"INSERT INTO {RAW_TABLE} (v) VALUES (%s)", ("x" * 64,))
                self.conn.execute("COMMIT")
        else:
            self.conn.execute(f"INSERT INTO {RAW_TABLE} (v) VALUES (%s)", ("x" * 64,))
            self.conn.commit()

    def close(self) -> None:
        self.conn.close()


def settle_sqlite(path: Path) -> None:
    """Checkpoint a WAL left long by a fill, so no figure pays for it."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=60)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


def settle_postgres(url: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE)")
        with contextlib.suppress(psycopg.errors.InsufficientPrivilege):
            conn.execute("CHECKPOINT")


# -- 1. durable syncs per call (SQLite, strace) ----------------------------------------

_SYNC_LINE = re.compile(r"^(?:(\d+)\s+)?(fsync|fdatasync)\((\d+)(?:<([^>]*)>)?")
_MARK_LINE = re.compile(r'^(?:\d+\s+)?mkdir\("([^"]*)"')
# The WAL header (32 bytes at offset 0), rewritten by the first commit after a checkpoint
# let the WAL restart; with synchronous=FULL it is synced on its own before the frames.
_WAL_HEADER_LINE = re.compile(r"^(?:(\d+)\s+)?pwrite64\(\d+<[^>]*-wal>, .*, 32, 0[) ]")
_SUMMARY_LINE = re.compile(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(fsync|fdatasync)\s*$")


@dataclass
class SyncCount:
    calls: int
    syncs: int = 0  # fsync + fdatasync between the phase's markers, every thread
    commit: int = 0  # of the WAL file, by a commit
    checkpoint: int = 0  # by a WAL checkpoint: the WAL, then the database file
    other: int = 0

    @property
    def per_call(self) -> float:
        return self.syncs / self.calls

    @property
    def commit_per_call(self) -> float:
        return self.commit / self.calls

    def split(self) -> str:
        n = self.calls
        return f"commits {self.commit / n:.3f} + WAL checkpoints {self.checkpoint / n:.3f}" + (
            f" + other {self.other / n:.3f}" if self.other else ""
        )


@dataclass
class SyncsResult:
    fresh: SyncCount
    safe: SyncCount  # retry-safe fresh calls
    replay: SyncCount
    raw: SyncCount
    child_totals: dict[str, int]  # strace -c totals of each child, for the record


def _run_traced(args: list[str], out: Path) -> dict[str, Any]:
    command = [
        STRACE, "-f", "-C", "-y", "-e", "trace=fsync,fdatasync,mkdir,pwrite64", "-o", str(out),
        sys.executable, str(Path(__file__).resolve()), *args,
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        raise RuntimeError(
            f"traced child failed ({done.returncode}): {done.stderr.strip()[-2000:]}"
        )
    return json.loads(done.stdout.strip().splitlines()[-1])


def _parse_trace(path: Path, calls: dict[str, int]) -> tuple[dict[str, SyncCount], int]:
    """Count the syncs of each marked phase; return them and strace -c's whole total.

    A sync of the database file (not its -wal) is a WAL checkpoint's second sync; the
    same thread's sync just before it, of the WAL, is the checkpoint's first; the sync
    of a rewritten WAL header (the WAL restarting after it) is its third.
    """
    phases = {phase: SyncCount(n) for phase, n in calls.items()}
    current: str | None = None
    last_wal: dict[str, SyncCount | None] = {}  # thread -> phase of its last WAL sync
    header_written: set[str] = set()  # threads that rewrote the WAL header, not synced yet
    total_lines = 0
    summary_total = 0
    for line in path.read_text().splitlines():
        if "resumed>" in line:
            continue
        mark = _MARK_LINE.match(line)
        if mark and "ledger-bench-mark-" in mark.group(1):
            name = Path(mark.group(1)).name.removeprefix("ledger-bench-mark-")
            phase, _, edge = name.rpartition("-")
            current = phase if edge == "start" else None
            continue
        summary = _SUMMARY_LINE.match(line)
        if summary:
            summary_total += int(summary.group(1))
            continue
        header = _WAL_HEADER_LINE.match(line)
        if header:
            header_written.add(header.group(1) or "")
            continue
        sync = _SYNC_LINE.match(line)
        if not sync:
            continue
        total_lines += 1
        thread, target = sync.group(1) or "", sync.group(4) or ""
        count = phases[current] if current is not None else None
        if target.endswith("-wal"):
            restart = thread in header_written
            header_written.discard(thread)
            last_wal[thread] = None if restart else count
            if count is not None:
                count.syncs += 1
                if restart:
                    count.checkpoint += 1
                else:
                    count.commit += 1
            continue
        before = last_wal.pop(thread, None)
        if count is None:
            continue
        count.syncs += 1
        if target.endswith(".db"):  # the database file itself: a checkpoint
            count.checkpoint += 1
            if before is count:
                count.commit -= 1
                count.checkpoint += 1
        else:
            count.other += 1
    if summary_total and summary_total != total_lines:
        progress(f"note: strace -c counted {summary_total} syncs, the trace lines {total_lines}")
    return phases, summary_total or total_lines


def measure_syncs(workdir: Path, calls: int) -> SyncsResult:
    marks = workdir / "marks"
    marks.mkdir(exist_ok=True)
    ledger_out = workdir / "strace-ledger.txt"
    raw_out = workdir / "strace-raw.txt"
    db = workdir / "syncs-ledger.db"
    raw_db = workdir / "syncs-raw.db"
    common = ["--child-calls", str(calls), "--child-marks", str(marks)]
    told = _run_traced(["--child", "syncs-ledger", "--child-path", str(db), *common], ledger_out)
    if told != {"fresh": 2 * calls, "replayed": calls}:
        raise RuntimeError(f"the traced ledger child did not make the calls asked: {told}")
    _run_traced(["--child", "syncs-raw", "--child-path", str(raw_db), *common], raw_out)
    phases, ledger_total = _parse_trace(
        ledger_out, {"fresh": calls, "safe": calls, "replay": calls}
    )
    raw_phases, raw_total = _parse_trace(raw_out, {"raw": calls})
    return SyncsResult(
        fresh=phases["fresh"],
        safe=phases["safe"],
        replay=phases["replay"],
        raw=raw_phases["raw"],
        child_totals={"ledger child": ledger_total, "raw child": raw_total},
    )


def _mark(marks: Path, name: str) -> None:
    os.mkdir(marks / f"ledger-bench-mark-{name}")  # a syscall strace sees between phases


def child_syncs_ledger(path: Path, calls: int, marks: Path) -> dict[str, int]:
    async def run() -> dict[str, int]:
        tally = {"fresh": 0, "replayed": 0}
        async with Ledger.open(f"sqlite:///{path}") as ledger:
            for i in range(20):  # warm up: imports, threads, the file's pages
                await call(ledger, f"warm-{i}")
                await call(ledger, f"warm-{i}")
            _mark(marks, "fresh-start")
            for i in range(calls):
                tally["replayed" if (await call(ledger, f"k-{i}")).replayed else "fresh"] += 1
            _mark(marks, "fresh-end")
            _mark(marks, "safe-start")
            for i in range(calls):
                result = await call(ledger, f"s-{i}", retry_safe=True)
                tally["replayed" if result.replayed else "fresh"] += 1
            _mark(marks, "safe-end")
            order = [f"k-{i}" for i in range(calls)]
            random.Random(1).shuffle(order)
            _mark(marks, "replay-start")
            for key in order:
                tally["replayed" if (await call(ledger, key)).replayed else "fresh"] += 1
            _mark(marks, "replay-end")
        # The warm-up is not counted: what the phases made, fresh and replayed.
        return tally

    return asyncio.run(run())


def child_syncs_raw(path: Path, calls: int, marks: Path) -> dict[str, int]:
    raw = RawSQLite(path)
    try:
        _mark(marks, "raw-start")
        for _ in range(calls):
            raw.commit()
        _mark(marks, "raw-end")
    finally:
        raw.close()
    return {"commits": calls}


# -- 2. round trips per call (PostgreSQL, a counting proxy) ---------------------------


_SSL_REQUEST = 80877103
_GSSENC_REQUEST = 80877104


class _Wire:
    """One proxied connection, read at the protocol level.

    The backend stream is framed (a type byte and a length per message) to see each
    ReadyForQuery ('Z'): a client send after one is a round trip, the client having
    waited for the server to answer everything it had sent. A send after other server
    data (a pipeline's early results) is not. The frontend stream is framed only after
    the startup, to name the statement that opens each turn.
    """

    def __init__(self) -> None:
        self.ready = True  # the first send of a connection is a round trip
        self.started = False  # the startup is over (the first ReadyForQuery)
        self.single_byte_replies = 0  # answers to SSL/GSS requests carry no header
        self.header = b""
        self.skip = 0
        self.statements: dict[bytes, str] = {}  # prepared statement name -> its SQL

    def from_server(self, data: bytes) -> None:
        i, n = 0, len(data)
        while i < n:
            if self.skip:
                step = min(self.skip, n - i)
                self.skip -= step
                i += step
            elif self.single_byte_replies and not self.header:
                self.single_byte_replies -= 1
                self.ready = True
                i += 1
            else:
                take = min(5 - len(self.header), n - i)
                self.header += data[i : i + take]
                i += take
                if len(self.header) == 5:
                    kind, length = self.header[0], int.from_bytes(self.header[1:5], "big")
                    self.header = b""
                    self.skip = max(0, length - 4)
                    if kind == ord("Z"):
                        self.ready = self.started = True

    def from_client(self, data: bytes) -> bool:
        """Note one client send; True if it opens a round trip."""
        turn, self.ready = self.ready, False
        if not self.started:
            if len(data) >= 8 and int.from_bytes(data[:4], "big") == 8:
                if int.from_bytes(data[4:8], "big") in (_SSL_REQUEST, _GSSENC_REQUEST):
                    self.single_byte_replies += 1
        else:
            self._learn(data)
        return turn

    def _messages(self, data: bytes) -> Iterator[tuple[str, bytes]]:
        offset = 0
        while offset + 5 <= len(data):
            length = int.from_bytes(data[offset + 1 : offset + 5], "big")
            if length < 4:
                return
            yield chr(data[offset]), data[offset + 5 : offset + 1 + length]
            offset += 1 + length

    def _learn(self, data: bytes) -> None:
        for kind, body in self._messages(data):
            if kind == "P":
                name, _, rest = body.partition(b"\0")
                if name:
                    self.statements[name] = rest.partition(b"\0")[0].decode(errors="replace")

    def describe(self, data: bytes) -> str:
        """The statements of one client send, short: 'BEGIN', 'SELECT pg_advisory...'."""
        parts: list[str] = []
        parsed = False
        for kind, body in self._messages(data):
            if kind == "Q":
                parts.append(body.rstrip(b"\0").decode(errors="replace") or "<empty query>")
            elif kind == "P":
                parsed = True
                sql = body.partition(b"\0")[2].partition(b"\0")[0]
                parts.append(sql.decode(errors="replace"))
            elif kind == "B" and not parsed:  # a prepared statement, bound again
                statement = body.partition(b"\0")[2].partition(b"\0")[0]
                parts.append(self.statements.get(statement, statement.decode(errors="replace")))
            elif kind == "X":
                parts.append("<terminate>")
        return " + ".join(" ".join(p.split())[:44] for p in parts) or "?"


class TurnProxy:
    """A TCP proxy on 127.0.0.1 that counts client-server round trips (see ``_Wire``).

    It runs its own event loop in a thread, so the measured code is unchanged; only
    the port in its URL differs.
    """

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self._upstream = (upstream_host, upstream_port)
        self._lock = threading.Lock()
        self.turns = 0
        self.log: list[str] | None = None  # the statements opening each turn, while set
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="turn-proxy")
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.port = 0

    def start(self) -> int:
        self._thread.start()
        self.port = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self.port

    async def _start(self) -> int:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    def count(self) -> int:
        with self._lock:
            return self.turns

    async def _handle(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        wire = _Wire()
        s_writer: asyncio.StreamWriter | None = None
        try:
            s_reader, s_writer = await asyncio.open_connection(*self._upstream)

            async def client_to_server() -> None:
                while data := await c_reader.read(1 << 16):
                    with self._lock:
                        if wire.from_client(data):
                            self.turns += 1
                            if self.log is not None:
                                self.log.append(wire.describe(data))
                    assert s_writer is not None
                    s_writer.write(data)
                    await s_writer.drain()

            async def server_to_client() -> None:
                while data := await s_reader.read(1 << 16):
                    with self._lock:
                        wire.from_server(data)  # before the client can see it and answer
                    c_writer.write(data)
                    await c_writer.drain()

            pumps = [
                asyncio.ensure_future(client_to_server()),
                asyncio.ensure_future(server_to_client()),
            ]
            try:
                await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for pump in pumps:
                    pump.cancel()
                await asyncio.gather(*pumps, return_exceptions=True)
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            for writer in (c_writer, s_writer):
                if writer is not None:
                    writer.close()
            self._tasks.discard(task)

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


@dataclass
class RoundTrips:
    fresh: float
    safe: float  # a retry-safe fresh call
    replay: float
    raw: float
    raw_pipeline: float
    fresh_turns: list[str]  # the statements that open each turn of one fresh call
    replay_turns: list[str]


async def measure_round_trips(pg: PgServer, dbname: str, calls: int) -> RoundTrips:
    proxy = TurnProxy(pg.host, pg.port)
    proxy.start()
    try:
        url = pg.url(dbname, port=proxy.port)

        def per_call(run: Callable[[], None]) -> float:
            before = proxy.count()
            run()
            return (proxy.count() - before) / calls

        raw = RawPostgres(url)
        raw_rt = per_call(lambda: [raw.commit() for _ in range(calls)] and None)
        raw.close()
        piped = RawPostgres(url, pipeline=True)
        piped_rt = per_call(lambda: [piped.commit() for _ in range(calls)] and None)
        piped.close()

        async with Ledger.open(url) as ledger:
            for i in range(30):
                await call(ledger, f"warm-{i}")
                await call(ledger, f"warm-{i}")
            before = proxy.count()
            for i in range(calls):
                await call(ledger, f"k-{i}")
            fresh = (proxy.count() - before) / calls
            before = proxy.count()
            for i in range(calls):
                await call(ledger, f"s-{i}", retry_safe=True)
            safe = (proxy.count() - before) / calls
            before = proxy.count()
            for i in range(calls):
                result = await call(ledger, f"k-{i}")
                assert result.replayed, result
            replay = (proxy.count() - before) / calls
            proxy.log = []
            await call(ledger, "traced")
            fresh_turns, proxy.log = proxy.log, []
            await call(ledger, "traced")
            replay_turns, proxy.log = proxy.log, None
    finally:
        proxy.stop()
    return RoundTrips(fresh, safe, replay, raw_rt, piped_rt, fresh_turns, replay_turns)


# -- 3. CPU per call over a raw durable one-row transaction ---------------------------


@dataclass
class CpuFigure:
    backend: str
    fresh_us: float  # CPU per call, microseconds
    replay_us: float
    raw_us: float  # CPU per raw one-row durable transaction
    fresh_wall_ms: float
    replay_wall_ms: float
    raw_wall_ms: float
    # Share of the ledger's CPU spent on the calling (event loop) thread, from
    # /proc/self/task; the rest ran on the ledger's own threads. None off Linux.
    fresh_loop_share: float | None = None
    replay_loop_share: float | None = None
    safe_us: float = 0.0  # a retry-safe fresh call (one write)
    safe_wall_ms: float = 0.0

    @property
    def fresh(self) -> float:
        return self.fresh_us / self.raw_us

    @property
    def safe(self) -> float:
        return self.safe_us / self.raw_us

    @property
    def replay(self) -> float:
        return self.replay_us / self.raw_us


def thread_ticks() -> dict[int, int]:
    """CPU clock ticks (user + system) of each thread of this process, by native id."""
    ticks: dict[int, int] = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc/self/task"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                fields = Path(entry.path, "stat").read_text().rpartition(")")[2].split()
                ticks[int(entry.name)] = int(fields[11]) + int(fields[12])  # utime, stime
    return ticks


def loop_share(before: dict[int, int], after: dict[int, int], loop: int) -> tuple[int, int]:
    """(ticks of the loop thread, ticks of all threads) between two thread_ticks()."""
    total = sum(t - before.get(tid, 0) for tid, t in after.items())
    return after.get(loop, 0) - before.get(loop, 0), total


async def measure_cpu(backend: str, url: str, raw: Any, calls: int, blocks: int) -> CpuFigure:
    """Blocks of ledger calls alternate with blocks of raw transactions (same load)."""
    size = max(1, calls // blocks)
    cpu = {"fresh": 0.0, "safe": 0.0, "replay": 0.0, "raw": 0.0}
    wall = {"fresh": 0.0, "safe": 0.0, "replay": 0.0, "raw": 0.0}
    counted = {"fresh": 0, "safe": 0, "replay": 0, "raw": 0}
    loop_thread = threading.get_native_id()
    ticks = {"fresh": [0, 0], "safe": [0, 0], "replay": [0, 0]}  # loop thread, all threads

    def raw_block() -> None:
        c0, w0 = time.process_time(), time.perf_counter()
        for _ in range(size):
            raw.commit()
        cpu["raw"] += time.process_time() - c0
        wall["raw"] += time.perf_counter() - w0
        counted["raw"] += size

    async with Ledger.open(url) as ledger:
        for i in range(50):
            await call(ledger, f"warm-{i}")
            await call(ledger, f"warm-{i}")
        recorded: list[str] = []
        for b in range(blocks):
            for kind in ("fresh", "safe", "replay"):
                raw_block()
                if kind == "fresh":
                    keys = [f"cpu-{b}-{i}" for i in range(size)]
                    recorded += keys
                elif kind == "safe":
                    keys = [f"cpu-safe-{b}-{i}" for i in range(size)]
                else:
                    keys = random.Random(b).sample(recorded, min(size, len(recorded)))
                t0 = thread_ticks()
                c0, w0 = time.process_time(), time.perf_counter()
                for key in keys:
                    result = await call(ledger, key, retry_safe=kind == "safe")
                    if result.replayed != (kind == "replay"):
                        raise RuntimeError(f"{kind} call of {key!r} replayed={result.replayed}")
                cpu[kind] += time.process_time() - c0
                wall[kind] += time.perf_counter() - w0
                counted[kind] += len(keys)
                on_loop, on_all = loop_share(t0, thread_ticks(), loop_thread)
                ticks[kind][0] += on_loop
                ticks[kind][1] += on_all
        raw_block()

    def us(kind: str) -> float:
        return cpu[kind] / counted[kind] * 1e6

    def ms(kind: str) -> float:
        return wall[kind] / counted[kind] * 1e3

    def share(kind: str) -> float | None:
        on_loop, on_all = ticks[kind]
        return on_loop / on_all if on_all else None

    return CpuFigure(backend, us("fresh"), us("replay"), us("raw"),
                     ms("fresh"), ms("replay"), ms("raw"),
                     share("fresh"), share("replay"), us("safe"), ms("safe"))  # fmt: skip


# -- 4. concurrent rate --------------------------------------------------------------


@dataclass
class RateFigure:
    backend: str
    callers: int
    calls_per_s: float  # median over rounds
    raw_commits_per_s: float  # median over rounds, serial
    ratios: list[float]  # per round: calls/s over (raw commits/s / 2) of the same round

    @property
    def ratio(self) -> float:
        return statistics.median(self.ratios)


async def measure_rate(
    backend: str, url: str, raw: Any, callers_list: Sequence[int], calls: int, rounds: int
) -> list[RateFigure]:
    figures = {n: RateFigure(backend, n, 0.0, 0.0, []) for n in callers_list}
    rates: dict[int, list[float]] = {n: [] for n in callers_list}
    raws: dict[int, list[float]] = {n: [] for n in callers_list}
    raw_count = max(200, calls)
    async with Ledger.open(url) as ledger:
        for i in range(64):  # warm: every caller slot, the pool, the writer
            await call(ledger, f"warm-{i}")
        await asyncio.gather(*(call(ledger, f"warm-c-{i}") for i in range(64)))
        for r in range(rounds):
            for n in callers_list:
                started = time.perf_counter()
                for _ in range(raw_count):
                    raw.commit()
                raw_rate = raw_count / (time.perf_counter() - started)
                per_caller = max(1, calls // n)
                keys = iter([f"rate-{n}-{r}-{i}" for i in range(per_caller * n)])
                fresh = 0

                async def caller(keys: Iterator[str] = keys) -> None:
                    nonlocal fresh
                    for key in keys:
                        result = await call(ledger, key)  # not in the +=: it reads first
                        fresh += not result.replayed

                started = time.perf_counter()
                await asyncio.gather(*(caller() for _ in range(n)))
                rate = per_caller * n / (time.perf_counter() - started)
                if fresh != per_caller * n:
                    raise RuntimeError(f"{fresh} of {per_caller * n} concurrent calls were fresh")
                rates[n].append(rate)
                raws[n].append(raw_rate)
                figures[n].ratios.append(rate / (raw_rate / 2))
    for n, figure in figures.items():
        figure.calls_per_s = statistics.median(rates[n])
        figure.raw_commits_per_s = statistics.median(raws[n])
    return list(figures.values())


# -- 5. replay growth ----------------------------------------------------------------


def fill_key(i: int) -> str:
    return f"fill-{i:07d}"


def _fill_worker(url: str, indices: list[int], concurrency: int, results: Any) -> None:
    async def run() -> int:
        done = 0
        async with Ledger.open(url) as ledger:
            pending = iter(indices)

            async def worker() -> None:
                nonlocal done
                for i in pending:
                    result = await call(ledger, fill_key(i))
                    if result.replayed:
                        raise RuntimeError(f"fill key {fill_key(i)} replayed")
                    done += 1

            await asyncio.gather(*(worker() for _ in range(concurrency)))
        return done

    try:
        results.put(("ok", asyncio.run(run())))
    except BaseException as exc:
        results.put(("error", repr(exc)))
        raise


def fill(url: str, count: int, processes: int, concurrency: int) -> float:
    """Record ``count`` fresh actions through the API in spawned processes; seconds taken."""
    if count <= 0:
        return 0.0
    with Ledger.open(url):  # the schema exists before the racing first opens
        pass
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    shares = [list(range(p, count, processes)) for p in range(processes)]
    workers = [
        ctx.Process(target=_fill_worker, args=(url, share, concurrency, results))
        for share in shares
        if share
    ]
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    try:
        outcomes = [results.get(timeout=7200) for _ in workers]
    finally:
        _join(workers)
    failed = [detail for status, detail in outcomes if status != "ok"]
    if failed:
        raise RuntimeError(f"filling the ledger failed: {failed[0]}")
    if sum(detail for _, detail in outcomes) != count:
        raise RuntimeError("filling the ledger recorded fewer actions than asked")
    return time.perf_counter() - started


def _join(workers: list[Any]) -> None:
    for worker in workers:
        worker.join(timeout=60)
        if worker.is_alive():
            worker.kill()
            worker.join()


@dataclass
class GrowthFigure:
    backend: str
    small: int
    large: int
    small_ms: float
    large_ms: float
    fill_seconds: float
    samples: int
    # Per replay, from process_time and /proc/self/io (this process, every thread):
    # CPU, read syscalls, bytes read from storage, bytes written (small, large).
    cpu_us: tuple[float, float] = (0.0, 0.0)
    read_calls: tuple[float, float] = (0.0, 0.0)
    disk_read_kb: tuple[float, float] = (0.0, 0.0)
    written_kb: tuple[float, float] = (0.0, 0.0)

    @property
    def ratio(self) -> float:
        return self.large_ms / self.small_ms


def process_io() -> dict[str, int]:
    """This process's I/O counters (Linux): syscr, read_bytes, wchar, ...; {} elsewhere."""
    counters: dict[str, int] = {}
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/io").read_text().splitlines():
            name, _, value = line.partition(":")
            counters[name.strip()] = int(value)
    return counters


async def measure_growth(
    backend: str,
    small_url: str,
    large_url: str,
    large: int,
    samples: int,
    processes: int,
    concurrency: int,
    settle: Callable[[], None],
) -> GrowthFigure:
    progress(f"{backend}: filling {SMALL:,} and {large:,} actions through the API ...")
    fill(small_url, SMALL, 1, concurrency)
    seconds = fill(large_url, large, processes, concurrency)
    progress(f"{backend}: filled {large:,} in {seconds:.0f} s ({large / seconds:,.0f}/s)")
    settle()
    rng = random.Random(5)
    times: dict[str, list[float]] = {"small": [], "large": []}
    spent = {name: {"cpu": 0.0, "syscr": 0, "read_bytes": 0, "wchar": 0} for name in times}
    block = 25
    async with Ledger.open(small_url) as small_ledger, Ledger.open(large_url) as large_ledger:
        ledgers = {"small": (small_ledger, SMALL), "large": (large_ledger, large)}
        for ledger, size in ledgers.values():  # warm: the upper index pages, the pool
            for _ in range(50):
                await call(ledger, fill_key(rng.randrange(size)))
        for b in range(0, samples, block):
            for name in ("small", "large") if b % 2 == 0 else ("large", "small"):
                ledger, size = ledgers[name]
                io0, cpu0 = process_io(), time.process_time()
                for _ in range(block):
                    started = time.perf_counter()
                    result = await call(ledger, fill_key(rng.randrange(size)))
                    times[name].append(time.perf_counter() - started)
                    if not result.replayed:
                        raise RuntimeError("a growth replay was not replayed")
                io1 = process_io()
                spent[name]["cpu"] += time.process_time() - cpu0
                for counter in ("syscr", "read_bytes", "wchar"):
                    spent[name][counter] += io1.get(counter, 0) - io0.get(counter, 0)

    def per(counter: str, scale: float) -> tuple[float, float]:
        small_n, large_n = len(times["small"]), len(times["large"])
        return (
            spent["small"][counter] / small_n * scale,
            spent["large"][counter] / large_n * scale,
        )

    return GrowthFigure(
        backend,
        SMALL,
        large,
        statistics.median(times["small"]) * 1e3,
        statistics.median(times["large"]) * 1e3,
        seconds,
        len(times["small"]),
        cpu_us=per("cpu", 1e6),
        read_calls=per("syscr", 1.0),
        disk_read_kb=per("read_bytes", 1 / 1024),
        written_kb=per("wchar", 1 / 1024),
    )


# -- 6. the hammer -------------------------------------------------------------------


def _append_effect(path: str, key: str) -> None:
    # One O_APPEND write of a short line is atomic across processes.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{key}\n".encode())
    finally:
        os.close(fd)


def _hammer_worker(
    url: str, keys: list[str], effects: str, barrier: Any, results: Any, seed: int
) -> None:
    tally: dict[str, Any] = {"fresh": 0, "replayed": 0, "deferred": 0, "errors": 0}
    order = list(keys)
    random.Random(seed).shuffle(order)

    async def adapter(req: ActionRequest, ctx: ExecutionContext) -> dict[str, int]:
        _append_effect(effects, req.key)
        return {"by": os.getpid()}

    async def run() -> None:
        async with Ledger.open(url) as ledger:
            barrier.wait()  # every process opened its ledger: start together
            tally["started"] = time.time()
            for key in order:
                try:
                    result = await ledger.execute(
                        make_request(key), authority=AUTHORITY, adapter=adapter
                    )
                except ActionInProgressError:
                    tally["deferred"] += 1
                    continue
                except Exception as exc:
                    tally["errors"] += 1
                    tally.setdefault("first_error", repr(exc))
                    continue
                tally["replayed" if result.replayed else "fresh"] += 1
            tally["finished"] = time.time()

    try:
        asyncio.run(run())
    finally:
        results.put(tally)


@dataclass
class HammerResult:
    backend: str
    processes: int
    keys: int
    effects: int
    duplicates: int  # effects beyond the first, over all keys
    missing: int  # keys that never acted
    errors: int
    fresh: int
    replayed: int
    deferred: int
    seconds: float
    verify_ok: bool = False
    first_error: str | None = None


def hammer(backend: str, url: str, processes: int, workdir: Path) -> HammerResult:
    keys = [f"hammer-{processes}-{i:03d}" for i in range(HAMMER_KEYS)]
    effects = workdir / f"effects-{backend}-{processes}.txt"
    effects.unlink(missing_ok=True)
    with Ledger.open(url):
        pass
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(processes)
    results = ctx.Queue()
    workers = [
        ctx.Process(target=_hammer_worker, args=(url, keys, str(effects), barrier, results, seed))
        for seed in range(processes)
    ]
    for worker in workers:
        worker.start()
    try:
        tallies = [results.get(timeout=900) for _ in workers]
    finally:
        _join(workers)
    counts = {key: 0 for key in keys}
    if effects.exists():
        for line in effects.read_text().splitlines():
            counts[line] = counts.get(line, 0) + 1
    if any("finished" not in t for t in tallies):
        raise RuntimeError(f"a hammer process died: {tallies}")
    with Ledger.open(url) as ledger:
        verified = ledger.verify().ok
    return HammerResult(
        backend=backend,
        processes=processes,
        keys=len(keys),
        effects=sum(counts.values()),
        duplicates=sum(c - 1 for c in counts.values() if c > 1),
        missing=sum(1 for c in counts.values() if c == 0),
        errors=sum(t["errors"] for t in tallies),
        fresh=sum(t["fresh"] for t in tallies),
        replayed=sum(t["replayed"] for t in tallies),
        deferred=sum(t["deferred"] for t in tallies),
        seconds=max(t["finished"] for t in tallies) - min(t["started"] for t in tallies),
        verify_ok=verified,
        first_error=next((t["first_error"] for t in tallies if "first_error" in t), None),
    )


# -- the run -------------------------------------------------------------------------


@dataclass
class Plan:
    quick: bool
    sync_calls: int
    rt_calls: int
    cpu_calls: int
    cpu_blocks: int
    rate_calls: int
    rate_rounds: int
    growth_actions: int
    growth_samples: int
    growth_backends: list[str]
    fill_processes: int
    fill_concurrency: int
    hammer_processes: int


@dataclass
class Report:
    machine: str
    plan: Plan
    sqlite_settings: str = "journal_mode=WAL synchronous=FULL (raw baseline and ledger)"
    pg_settings: str = ""
    syncs: SyncsResult | None = None
    round_trips: RoundTrips | None = None
    cpu: list[CpuFigure] = field(default_factory=list)
    rates: list[RateFigure] = field(default_factory=list)
    growth: list[GrowthFigure] = field(default_factory=list)
    hammers: list[HammerResult] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    seconds: float = 0.0
    load_before: tuple[float, float, float] = (0.0, 0.0, 0.0)
    load_after: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def rows(self) -> list[tuple[str, str, str, str, bool | None]]:
        """(figure, measured, target, limit, passed); passed None: not measured."""
        out: list[tuple[str, str, str, str, bool | None]] = []
        if self.syncs:
            s = self.syncs
            # Judged on the commits' syncs; the checkpoints' share is shown beside them.
            fresh, safe, replay = s.fresh, s.safe, s.replay
            out.append((
                "SQLite durable syncs / fresh call",
                f"{fresh.commit_per_call:.2f} +{fresh.checkpoint / fresh.calls:.2f}ck",
                "2", f"= {SYNC_FRESH_TARGET:.2f} commits",
                round(fresh.commit_per_call, 2) == SYNC_FRESH_TARGET,
            ))  # fmt: skip
            out.append((
                "SQLite durable syncs / retry-safe fresh",
                f"{safe.commit_per_call:.2f} +{safe.checkpoint / safe.calls:.2f}ck",
                "1", f"= {SYNC_SAFE_TARGET:.2f} commits",
                round(safe.commit_per_call, 2) == SYNC_SAFE_TARGET,
            ))  # fmt: skip
            out.append((
                "SQLite durable syncs / replay",
                f"{replay.commit_per_call:.2f} +{replay.checkpoint / replay.calls:.2f}ck",
                "0", f"<= {SYNC_REPLAY_LIMIT:.2f} commits",
                round(replay.commit_per_call, 2) <= SYNC_REPLAY_LIMIT,
            ))  # fmt: skip
        if self.round_trips:
            rt = self.round_trips
            out.append((
                "PostgreSQL round trips / fresh call", f"{rt.fresh:.2f}",
                "<= 3", f"<= {RT_FRESH_LIMIT:.2f}", rt.fresh <= RT_FRESH_LIMIT,
            ))  # fmt: skip
            out.append((
                "PostgreSQL round trips / retry-safe fresh", f"{rt.safe:.2f}",
                "1", f"<= {RT_SAFE_LIMIT:.2f}", rt.safe <= RT_SAFE_LIMIT,
            ))  # fmt: skip
            out.append((
                "PostgreSQL round trips / replay", f"{rt.replay:.2f}",
                "1", f"<= {RT_REPLAY_LIMIT:.2f}", rt.replay <= RT_REPLAY_LIMIT,
            ))  # fmt: skip
        for c in self.cpu:
            name = "SQLite" if c.backend == "sqlite" else "PostgreSQL"
            for kind, value in (("fresh", c.fresh), ("replay", c.replay)):
                limit = CPU_LIMITS[(c.backend, kind)]
                out.append((
                    f"{name} CPU / raw tx, {kind}", f"{value:.2f}x",
                    f"<= {limit:g}x", f"<= {limit:.2f}", value <= limit,
                ))  # fmt: skip
            out.append((
                f"{name} CPU / raw tx, retry-safe fresh", f"{c.safe:.2f}x",
                "(no target)", "", None,
            ))  # fmt: skip
        for r in self.rates:
            name = "SQLite" if r.backend == "sqlite" else "PostgreSQL"
            limit = RATE_LIMITS[(r.backend, r.callers)]
            out.append((
                f"{name} rate ({r.callers} callers) / (raw/2)", f"{r.ratio:.2f}",
                f">= {limit:g}", f">= {limit:.2f}", r.ratio >= limit,
            ))  # fmt: skip
        for g in self.growth:
            name = "SQLite" if g.backend == "sqlite" else "PostgreSQL"
            out.append((
                f"{name} replay @{g.large:,} / @{g.small:,}", f"{g.ratio:.2f}",
                "<= 1.3 (10^3 -> 10^6)", f"<= {GROWTH_LIMIT:.2f}", g.ratio <= GROWTH_LIMIT,
            ))  # fmt: skip
        for h in self.hammers:
            name = "SQLite" if h.backend == "sqlite" else "PostgreSQL"
            out.append((
                f"{name} hammer x{h.processes}: duplicates", str(h.duplicates),
                "0", "= 0", h.duplicates == 0,
            ))  # fmt: skip
        return out

    def text(self) -> str:
        p = self.plan
        lines = [
            "ledger fast-path benchmark" + (" (--quick)" if p.quick else ""),
            f"  {self.machine}",
            f"  SQLite: {self.sqlite_settings}",
        ]
        if self.pg_settings:
            lines.append(f"  {self.pg_settings}")
        lines += [
            f"  run {self.seconds:.0f} s; load average (1/5/15 min) "
            f"{'/'.join(f'{x:.1f}' for x in self.load_before)} before, "
            f"{'/'.join(f'{x:.1f}' for x in self.load_after)} after",
            "",
        ]
        if self.syncs:
            s = self.syncs
            lines += [
                f"1. durable syncs per call, SQLite (strace -f -C, {p.sync_calls} calls each)",
                f"   fresh   {s.fresh.per_call:5.3f} syncs/call   ({s.fresh.split()})",
                f"   safe    {s.safe.per_call:5.3f} syncs/call   ({s.safe.split()}; retry-safe)",
                f"   replay  {s.replay.per_call:5.3f} syncs/call   ({s.replay.split()})",
                f"   raw     {s.raw.per_call:5.3f} syncs/commit ({s.raw.split()})",
                "   (raw: one-row BEGIN IMMEDIATE + INSERT + COMMIT on a sibling file; a WAL "
                "checkpoint syncs",
                "    the WAL and the database file once each, every ~1,000 pages written, and "
                "the next commit syncs the restarted WAL's header once)",
                "   whole children under strace -c: "
                + ", ".join(f"{k} {v}" for k, v in s.child_totals.items())
                + " syncs (including open, warm-up and close)",
                "",
            ]
        if self.round_trips:
            rt = self.round_trips
            lines += [
                f"2. round trips per call, PostgreSQL (counting proxy, {p.rt_calls} calls each)",
                f"   fresh   {rt.fresh:5.2f}   retry-safe fresh {rt.safe:5.2f}"
                f"   replay {rt.replay:5.2f}",
                f"   raw     {rt.raw:5.2f}   psycopg autocommit=False: INSERT, commit()"
                " (BEGIN is its own round trip)",
                f"   raw     {rt.raw_pipeline:5.2f}   psycopg pipeline: BEGIN + INSERT + COMMIT",
                "   what opens each round trip of one fresh call and of one replay "
                "('<empty query>': the pool's connection check):",
            ]
            for i in range(max(len(rt.fresh_turns), len(rt.replay_turns))):
                fresh = rt.fresh_turns[i] if i < len(rt.fresh_turns) else ""
                replay = rt.replay_turns[i] if i < len(rt.replay_turns) else ""
                lines.append(f"   {i + 1:>3} {fresh:<46} {replay}")
            lines.append("")
        if self.cpu:
            lines += [
                "3. CPU per call (process_time of this process, all threads) "
                f"over a raw durable one-row tx ({p.cpu_calls} calls each)",
                f"   {'backend':<11} {'fresh':>16} {'retry-safe':>16} {'replay':>16}"
                f" {'raw tx':>9}   {'wall: fresh':>11} {'safe':>8} {'replay':>8} {'raw tx':>8}",
            ]
            for c in self.cpu:
                lines.append(
                    f"   {c.backend:<11} {c.fresh_us:>6.0f} us {c.fresh:>5.1f}x"
                    f" {c.safe_us:>6.0f} us {c.safe:>5.1f}x"
                    f" {c.replay_us:>6.0f} us {c.replay:>5.1f}x {c.raw_us:>6.0f} us"
                    f"   {c.fresh_wall_ms:>8.3f} ms {c.safe_wall_ms:>5.3f} ms"
                    f" {c.replay_wall_ms:>5.3f} ms {c.raw_wall_ms:>5.3f} ms"
                )
            for c in self.cpu:
                if c.fresh_loop_share is not None and c.replay_loop_share is not None:
                    lines.append(
                        f"   {c.backend}: {c.fresh_loop_share:.0%} of a fresh call's CPU and "
                        f"{c.replay_loop_share:.0%} of a replay's ran on the calling (event "
                        "loop) thread, the rest on the ledger's threads"
                    )
            lines.append("")
        if self.rates:
            lines += [
                f"4. concurrent fresh calls/s over half the serial raw commit rate "
                f"({p.rate_calls} calls x {p.rate_rounds} rounds, median)",
            ]
            for r in self.rates:
                lines.append(
                    f"   {r.backend:<11} {r.callers:>3} callers {r.calls_per_s:>7,.0f} calls/s;"
                    f" raw {r.raw_commits_per_s:>6,.0f} commits/s; ratio {r.ratio:.2f}"
                    f" (rounds {', '.join(f'{x:.2f}' for x in r.ratios)})"
                )
            lines.append("")
        if self.growth:
            for g in self.growth:
                lines += [
                    f"5. replay growth, {g.backend}: MEASURED AT {g.small:,} and {g.large:,} "
                    f"actions ({g.samples} replays each, alternating blocks)",
                    f"   median replay @{g.small:,}: {g.small_ms:.3f} ms; "
                    f"@{g.large:,}: {g.large_ms:.3f} ms; ratio {g.ratio:.2f}",
                    f"   per replay @{g.small:,} / @{g.large:,}: CPU {g.cpu_us[0]:.0f} / "
                    f"{g.cpu_us[1]:.0f} us, read syscalls {g.read_calls[0]:.1f} / "
                    f"{g.read_calls[1]:.1f}, read from storage {g.disk_read_kb[0]:.1f} / "
                    f"{g.disk_read_kb[1]:.1f} KB, written {g.written_kb[0]:.1f} / "
                    f"{g.written_kb[1]:.1f} KB",
                    f"   fill of {g.large:,} through the API by {p.fill_processes} processes x "
                    f"{p.fill_concurrency} in flight: {g.fill_seconds:.0f} s "
                    f"({g.large / g.fill_seconds:,.0f}/s)",
                ]
                if g.large < 1_000_000:
                    lines.append(
                        "   (the issue asks for 10^6; run with --growth-actions 1000000 for it)"
                    )
            lines.append("")
        if self.hammers:
            lines.append(
                f"6. hammer: N processes race through {HAMMER_KEYS} shared keys (barrier start)"
            )
            for h in self.hammers:
                lines.append(
                    f"   {h.backend:<11} x{h.processes}: effects {h.effects}, duplicates "
                    f"{h.duplicates}, missing {h.missing}, errors {h.errors}; fresh/replay/"
                    f"deferred {h.fresh}/{h.replayed}/{h.deferred}; {h.seconds:.1f} s; "
                    f"verify {'ok' if h.verify_ok else 'PROBLEMS'}"
                )
                if h.first_error:
                    lines.append(f"     first error: {h.first_error}")
            lines.append("")
        for note in self.skipped:
            lines.append(f"skipped: {note}")
        if self.skipped:
            lines.append("")
        rows = self.rows()
        lines += [
            f"{'figure':<44} {'measured':>13}  {'target':<22} {'limit':<20} result",
            "-" * 110,
        ]
        for figure, measured, target, limit, passed in rows:
            verdict = "n/a" if passed is None else ("PASS" if passed else "FAIL")
            lines.append(f"{figure:<44} {measured:>13}  {target:<22} {limit:<20} {verdict}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        def plain(value: Any) -> Any:
            if hasattr(value, "__dataclass_fields__"):
                return {k: plain(v) for k, v in vars(value).items()}
            if isinstance(value, float):
                return round(value, 4)
            if isinstance(value, (list, tuple)):
                return [plain(v) for v in value]
            if isinstance(value, dict):
                return {k: plain(v) for k, v in value.items()}
            return value

        out = {k: plain(v) for k, v in vars(self).items()}
        out["rows"] = [
            {"figure": f, "measured": m, "target": t, "limit": lim, "pass": p}
            for f, m, t, lim, p in self.rows()
        ]
        return out


async def run_sqlite(report: Report, workdir: Path, only: set[str]) -> None:
    plan = report.plan
    if "syncs" in only:
        progress("SQLite: durable syncs under strace ...")
        report.syncs = measure_syncs(workdir, plan.sync_calls)
    if not only & {"cpu", "rate"}:
        return
    raw = RawSQLite(workdir / "raw.db")
    try:
        if "cpu" in only:
            progress("SQLite: CPU per call ...")
            report.cpu.append(await measure_cpu(
                "sqlite", f"sqlite:///{workdir / 'cpu.db'}", raw, plan.cpu_calls, plan.cpu_blocks
            ))  # fmt: skip
        if "rate" in only:
            progress("SQLite: concurrent rate ...")
            report.rates += await measure_rate(
                "sqlite", f"sqlite:///{workdir / 'rate.db'}", raw, [64],
                plan.rate_calls, plan.rate_rounds,
            )  # fmt: skip
    finally:
        raw.close()


async def run_postgres(report: Report, pg: PgServer, only: set[str]) -> None:
    plan = report.plan
    if "rt" in only:
        progress("PostgreSQL: round trips through the counting proxy ...")
        with pg.database("rt") as db:
            report.round_trips = await measure_round_trips(pg, db, plan.rt_calls)
    if not only & {"cpu", "rate"}:
        return
    with pg.database("cpu") as db:
        raw = RawPostgres(pg.url(db))
        try:
            if "cpu" in only:
                progress("PostgreSQL: CPU per call ...")
                report.cpu.append(await measure_cpu(
                    "postgresql", pg.url(db), raw, plan.cpu_calls, plan.cpu_blocks
                ))  # fmt: skip
            if "rate" in only:
                progress("PostgreSQL: concurrent rate ...")
                report.rates += await measure_rate(
                    "postgresql", pg.url(db), raw, [10, 16], plan.rate_calls, plan.rate_rounds
                )
        finally:
            raw.close()


def run_growth(report: Report, workdir: Path, pg: PgServer | None) -> None:
    plan = report.plan
    for backend in plan.growth_backends:
        if backend == "sqlite":
            small, large = workdir / "growth-small.db", workdir / "growth-large.db"

            def settle(small: Path = small, large: Path = large) -> None:
                settle_sqlite(small)
                settle_sqlite(large)

            report.growth.append(asyncio.run(measure_growth(
                "sqlite", f"sqlite:///{small}", f"sqlite:///{large}", plan.growth_actions,
                plan.growth_samples, plan.fill_processes, plan.fill_concurrency, settle,
            )))  # fmt: skip
            for path in (small, large):
                for suffix in ("", "-wal", "-shm"):
                    Path(f"{path}{suffix}").unlink(missing_ok=True)
        elif pg is None:
            report.skipped.append("PostgreSQL replay growth (no PostgreSQL in this run)")
        else:
            with pg.database("growth_small") as s_db, pg.database("growth_large") as l_db:
                s_url, l_url = pg.url(s_db), pg.url(l_db)

                def settle_pg(s_url: str = s_url, l_url: str = l_url) -> None:
                    settle_postgres(s_url)
                    settle_postgres(l_url)

                report.growth.append(asyncio.run(measure_growth(
                    "postgresql", s_url, l_url, plan.growth_actions, plan.growth_samples,
                    max(plan.fill_processes, 4), min(plan.fill_concurrency, 10), settle_pg,
                )))  # fmt: skip


def make_plan(args: argparse.Namespace) -> Plan:
    quick = args.quick
    return Plan(
        quick=quick,
        sync_calls=100 if quick else 500,
        rt_calls=50 if quick else 200,
        cpu_calls=200 if quick else 1000,
        cpu_blocks=2 if quick else 10,
        rate_calls=256 if quick else 1280,
        rate_rounds=1 if quick else 5,
        growth_actions=args.growth_actions or (10_000 if quick else 100_000),
        growth_samples=100 if quick else 500,
        growth_backends=args.growth_backends,
        fill_processes=args.fill_processes,
        fill_concurrency=args.fill_concurrency,
        hammer_processes=args.hammer_processes,
    )


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text!r}")
    return value


SECTIONS = ("syncs", "rt", "cpu", "rate", "growth", "hammer")


def _sections(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names or any(n not in SECTIONS for n in names):
        raise argparse.ArgumentTypeError(f"want some of {','.join(SECTIONS)}, got {text!r}")
    return names


def _backends(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names or any(n not in ("sqlite", "postgresql") for n in names):
        raise argparse.ArgumentTypeError(f"want sqlite and/or postgresql, got {text!r}")
    return names


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python bench/ledger_bench.py",
        description="The ledger's fast path: structural figures against raw baselines.",
    )
    parser.add_argument("--quick", action="store_true", help="everything small (~1 minute)")
    parser.add_argument(
        "--growth-actions",
        type=_positive,
        help="size of the large ledger for the replay growth (default 100,000; --quick "
        "10,000; the issue's figure is 1,000,000, which takes ~15 min to fill on SQLite)",
    )
    parser.add_argument(
        "--growth-backends",
        type=_backends,
        default=["sqlite"],
        help="backends to measure the replay growth on (default sqlite; postgresql fills "
        "at ~300 actions/s here)",
    )
    parser.add_argument("--fill-processes", type=_positive, default=2)
    parser.add_argument("--fill-concurrency", type=_positive, default=64)
    parser.add_argument("--hammer-processes", type=_positive, default=8)
    parser.add_argument(
        "--pg-admin",
        default=DEFAULT_PG_ADMIN,
        help=f"a PostgreSQL URL to create and drop scratch databases from ({DEFAULT_PG_ADMIN})",
    )
    parser.add_argument("--no-postgres", action="store_true", help="SQLite figures only")
    parser.add_argument(
        "--only",
        type=_sections,
        default=list(SECTIONS),
        help=f"a comma-separated subset of {','.join(SECTIONS)} (default: all)",
    )
    parser.add_argument(
        "--against",
        metavar="REV",
        help="also run the chosen figures on git revision REV's ledger, activities and "
        "workflows (unpacked beside, first on PYTHONPATH), alternating with this tree's "
        "--rounds times, and print both side by side (medians)",
    )
    parser.add_argument("--rounds", type=_positive, default=3, help="rounds of --against")
    parser.add_argument("--json", action="store_true", help="print one JSON object, no table")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    # The traced child of figure 1 (internal).
    parser.add_argument("--child", choices=["syncs-ledger", "syncs-raw"], help=argparse.SUPPRESS)
    parser.add_argument("--child-path", help=argparse.SUPPRESS)
    parser.add_argument("--child-calls", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--child-marks", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not args.child and not os.access(STRACE, os.X_OK):
        parser.error(f"{STRACE} is needed for the sync count (apt-get install strace)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    global QUIET
    args = parse_args(argv)
    if args.child:
        path, marks = Path(args.child_path), Path(args.child_marks)
        if args.child == "syncs-ledger":
            told = child_syncs_ledger(path, args.child_calls, marks)
        else:
            told = child_syncs_raw(path, args.child_calls, marks)
        print(json.dumps(told))
        return 0

    QUIET = args.quiet
    if args.against:
        return compare(args)
    report = Report(
        machine=f"{os.cpu_count()} CPUs, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}",
        plan=make_plan(args),
    )
    pg: PgServer | None = None
    if args.no_postgres:
        report.skipped.append("PostgreSQL figures (--no-postgres)")
    else:
        pg = PgServer(args.pg_admin)
        try:
            pg.settings()
        except Exception as exc:
            print(f"error: cannot reach PostgreSQL at {args.pg_admin}: {exc}", file=sys.stderr)
            return 2
    workdir = Path(tempfile.mkdtemp(prefix="ledger-bench-"))
    started = time.perf_counter()
    report.load_before = os.getloadavg()
    try:
        only = set(args.only)
        asyncio.run(run_sqlite(report, workdir, only))
        if pg is not None:
            report.pg_settings = pg.settings()
            asyncio.run(run_postgres(report, pg, only))
        if "growth" in only:
            run_growth(report, workdir, pg)
        if "hammer" in only:
            progress(f"sqlite: hammer x{args.hammer_processes} ...")
            hammer_url = f"sqlite:///{workdir / 'hammer.db'}"
            report.hammers.append(hammer("sqlite", hammer_url, args.hammer_processes, workdir))
            if pg is not None:
                progress(f"postgresql: hammer x{args.hammer_processes} ...")
                with pg.database("hammer") as db:
                    report.hammers.append(
                        hammer("postgresql", pg.url(db), args.hammer_processes, workdir)
                    )
    finally:
        if pg is not None:
            pg.drop_all()
        shutil.rmtree(workdir, ignore_errors=True)
    report.seconds = time.perf_counter() - started
    report.load_after = os.getloadavg()
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(report.text())
    return 0


def compare(args: argparse.Namespace) -> int:
    """``--against REV``: this script's figures on REV's code and on this tree's, run in
    turns (before, after, before, ...) so that both meet the same load, side by side."""
    root = Path(__file__).resolve().parent.parent
    before = Path(tempfile.mkdtemp(prefix="ledger-bench-before-"))
    try:
        package = before / "temporal_ledger"
        package.mkdir()
        (package / "__init__.py").write_text("")
        archive = subprocess.run(
            ["git", "-C", str(root), "archive", args.against, "ledger", "activities", "workflows"],
            capture_output=True,
            check=True,
        )
        subprocess.run(["tar", "-x", "-C", str(package)], input=archive.stdout, check=True)
        child = [sys.executable, str(Path(__file__).resolve()), "--json", "--quiet"]
        child += ["--only", ",".join(args.only), "--pg-admin", args.pg_admin]
        child += ["--no-postgres"] * args.no_postgres + ["--quick"] * args.quick
        runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
        for round_ in range(args.rounds):
            for label in ("before", "after"):
                progress(f"round {round_ + 1}/{args.rounds}: {label} ...")
                env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
                if label == "before":
                    env["PYTHONPATH"] = str(before)
                done = subprocess.run(child, env=env, capture_output=True, text=True, check=True)
                runs[label].append(json.loads(done.stdout))
    finally:
        shutil.rmtree(before, ignore_errors=True)
    print(compared(args.against, runs))
    return 0


def compared(rev: str, runs: dict[str, list[dict[str, Any]]]) -> str:
    """The side-by-side table of :func:`compare` (medians of the rounds)."""

    def median(label: str, pick: Callable[[dict[str, Any]], float | None]) -> float | None:
        values = [v for v in (pick(run) for run in runs[label]) if v is not None]
        return statistics.median(values) if values else None

    def row(name: str, pick: Callable[[dict[str, Any]], float | None], unit: str) -> str:
        old, new = median("before", pick), median("after", pick)
        if old is None or new is None:
            return f"{name:<44} {'-':>12} {'-':>12}"
        ratio = f"{new / old:8.3f}" if old else ""
        return f"{name:<44} {old:>10.2f}{unit} {new:>10.2f}{unit} {ratio}"

    def cpu(backend: str, field: str) -> Callable[[dict[str, Any]], float | None]:
        def pick(run: dict[str, Any]) -> float | None:
            return next((c[field] for c in run.get("cpu", []) if c["backend"] == backend), None)

        return pick

    def trips(field: str) -> Callable[[dict[str, Any]], float | None]:
        return lambda run: (run.get("round_trips") or {}).get(field)

    first = runs["after"][0]
    loads = [run["load_before"][0] for label in runs for run in runs[label]]
    lines = [
        f"before ({rev}) and after (this tree), {len(runs['after'])} rounds each, in turns; "
        f"load average {min(loads):.1f}-{max(loads):.1f}",
        f"  {first['machine']}",
        "",
        f"{'figure (median of the rounds)':<44} {'before':>12} {'after':>12} after/before",
        "-" * 84,
        row("PostgreSQL round trips / fresh call", trips("fresh"), "  "),
        row("PostgreSQL round trips / replay", trips("replay"), "  "),
    ]
    for backend in ("postgresql", "sqlite"):
        lines += [
            row(f"{backend} CPU / fresh call", cpu(backend, "fresh_us"), "us"),
            row(f"{backend} CPU / replay", cpu(backend, "replay_us"), "us"),
            row(f"{backend} CPU / raw durable tx (baseline)", cpu(backend, "raw_us"), "us"),
        ]
    for backend, callers in (("sqlite", 64), ("postgresql", 10), ("postgresql", 16)):
        lines.append(row(f"{backend} {callers} callers, calls/s", rate(backend, callers), "  "))
    return "\n".join(line for line in lines if not line.endswith(" -"))


def rate(backend: str, callers: int) -> Callable[[dict[str, Any]], float | None]:
    """The concurrent rate of ``backend`` with ``callers`` in a ``--json`` report."""

    def pick(run: dict[str, Any]) -> float | None:
        return next(
            (
                r["calls_per_s"]
                for r in run.get("rates", [])
                if (r["backend"], r["callers"]) == (backend, callers)
            ),
            None,
        )

    return pick


if __name__ == "__main__":
    sys.exit(main())
