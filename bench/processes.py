"""Several worker processes on one ledger: fresh calls per second beside the raw commit rate.

Issue 30, item 5: a worker process is CPU-bound long before the database is, so a
deployment runs several. This script starts P processes, each with C concurrent callers
(asyncio tasks, distinct keys) making fresh calls through ``Ledger.open``, released
together, and divides the calls all of them made by the time from the first start to
the last end. Beside it, measured in the same run between the rounds, the raw commit
rate of the same storage: on PostgreSQL, ``--raw-connections`` threads each committing a
one-row INSERT on its own connection (psycopg, durable); on SQLite, one connection
committing one-row transactions serially (WAL, ``synchronous=FULL``; a file has one
writer at a time). A fresh call makes two durable commits, so the ratio printed is the
ledger's rate over half the raw rate: 1.0 means the ledger commits as fast as the
storage does.

    python bench/processes.py                        # both backends, 1, 2 and 4 processes
    python bench/processes.py --backends postgresql --processes 1,4 --callers 10
    python bench/processes.py --retry-safe           # retry-safe calls: one commit each

It is a measurement: it exits 0 whatever the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import multiprocessing
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

DEFAULT_PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
RAW_TABLE = "bench_raw_commit"


def _worker(
    url: str, tag: str, callers: int, calls: int, retry_safe: bool, go: Any, out: Any
) -> None:
    from _requests import AUTHORITY as authority
    from _requests import bench_request as request
    from temporal_ledger.ledger import ActionRequest, Ledger

    async def trivial(request: ActionRequest, ctx: Any) -> dict[str, bool]:
        return {"ok": True}

    async def run() -> tuple[float, float, int]:
        async with Ledger.open(url) as ledger:
            # Warm: every caller slot, the pool, the writer thread.
            await asyncio.gather(
                *(ledger.execute(request(f"{tag}-warm-{i}"), authority=authority,
                                 adapter=trivial, retry_safe=retry_safe) for i in range(callers))
            )  # fmt: skip
            go.wait()
            keys = iter(f"{tag}-{i}" for i in range(calls))
            fresh = 0

            async def caller() -> None:
                nonlocal fresh
                for key in keys:
                    result = await ledger.execute(
                        request(key), authority=authority, adapter=trivial, retry_safe=retry_safe
                    )
                    fresh += not result.replayed

            started = time.time()
            await asyncio.gather(*(caller() for _ in range(callers)))
            return started, time.time(), fresh

    out.put(asyncio.run(run()))


def ledger_rate(url: str, processes: int, callers: int, calls: int, retry_safe: bool) -> float:
    """Fresh calls per second of ``processes`` processes of ``callers`` callers each."""
    ctx = multiprocessing.get_context("spawn")
    go, out = ctx.Event(), ctx.Queue()
    tag = uuid.uuid4().hex[:8]
    workers = [
        ctx.Process(
            target=_worker,
            args=(url, f"{tag}-p{p}", callers, calls // processes, retry_safe, go, out),
        )
        for p in range(processes)
    ]
    for worker in workers:
        worker.start()
    time.sleep(0.5)
    go.set()
    results = [out.get(timeout=600) for _ in workers]
    for worker in workers:
        worker.join(60)
    fresh = sum(r[2] for r in results)
    if fresh != calls // processes * processes:
        raise RuntimeError(f"{fresh} calls were fresh, not {calls // processes * processes}")
    return fresh / (max(r[1] for r in results) - min(r[0] for r in results))


def raw_postgres_rate(url: str, connections: int, commits: int) -> float:
    """Durable one-row commits per second of ``connections`` threads, one connection each."""
    import psycopg

    conns = [psycopg.connect(url) for _ in range(connections)]
    try:
        conns[0].execute(
            f"CREATE TABLE IF NOT EXISTS {RAW_TABLE} (id BIGSERIAL PRIMARY KEY, v TEXT)"
        )
        conns[0].commit()
        barrier = threading.Barrier(connections + 1)

        def commit_loop(conn: Any) -> None:
            barrier.wait()
            for _ in range(commits // connections):
                conn.execute(f"INSERT INTO {RAW_TABLE} (v) VALUES (%s)", ("x" * 64,))
                conn.commit()

        threads = [threading.Thread(target=commit_loop, args=(c,)) for c in conns]
        for thread in threads:
            thread.start()
        barrier.wait()
        started = time.perf_counter()
        for thread in threads:
            thread.join()
        return commits // connections * connections / (time.perf_counter() - started)
    finally:
        for conn in conns:
            conn.close()


def raw_sqlite_rate(path: Path, commits: int) -> float:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute(f"CREATE TABLE IF NOT EXISTS {RAW_TABLE} (id INTEGER PRIMARY KEY, v TEXT)")
        started = time.perf_counter()
        for _ in range(commits):
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(f"INSERT INTO {RAW_TABLE} (v) VALUES (?)", ("x" * 64,))
            conn.execute("COMMIT")
        return commits / (time.perf_counter() - started)
    finally:
        conn.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="postgresql,sqlite")
    parser.add_argument("--processes", default="1,2,4", help="process counts (default 1,2,4)")
    parser.add_argument(
        "--callers",
        type=int,
        default=0,
        help="callers per process (default: 10 on PostgreSQL, 64 on SQLite)",
    )
    parser.add_argument("--calls", type=int, default=4000, help="calls per measurement")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--raw-connections", type=int, default=10)
    parser.add_argument(
        "--retry-safe",
        action="store_true",
        help="retry-safe calls (one commit each: the ratio is over the raw rate)",
    )
    parser.add_argument("--pg-admin", default=DEFAULT_PG_ADMIN)
    args = parser.parse_args()  # fmt: skip
    counts = [int(n) for n in args.processes.split(",") if n]
    commits_per_call = 1 if args.retry_safe else 2
    print(
        f"fresh calls/s of P processes x C callers over the raw commit rate / {commits_per_call}"
        f" (median of {args.rounds} rounds; {os.cpu_count()} CPUs; "
        f"{'retry-safe' if args.retry_safe else 'not retry-safe'} calls)"
    )
    for backend in args.backends.split(","):
        callers = args.callers or (10 if backend == "postgresql" else 64)
        workdir = Path(tempfile.mkdtemp(prefix="ledger-processes-"))
        database = None
        try:
            if backend == "postgresql":
                import psycopg

                database = f"ledger_processes_{uuid.uuid4().hex[:8]}"
                with psycopg.connect(args.pg_admin, autocommit=True) as conn:
                    conn.execute(f'CREATE DATABASE "{database}"')
                url = args.pg_admin.rsplit("/", 1)[0] + "/" + database

                raw = functools.partial(raw_postgres_rate, url, args.raw_connections, 2000)

                raw_name = f"raw, {args.raw_connections} connections"
            else:
                url = f"sqlite:///{workdir / 'ledger.db'}"

                raw = functools.partial(raw_sqlite_rate, workdir / "raw.db", 1000)

                raw_name = "raw, serial"
            for processes in counts:
                ratios, rates, raws = [], [], []
                for _ in range(args.rounds):
                    raw_rate = raw()
                    rate = ledger_rate(url, processes, callers, args.calls, args.retry_safe)
                    rates.append(rate)
                    raws.append(raw_rate)
                    ratios.append(rate / (raw_rate / commits_per_call))
                print(
                    f"  {backend:<10} {processes} x {callers:>2} callers: "
                    f"{statistics.median(rates):7,.0f} calls/s; {raw_name} "
                    f"{statistics.median(raws):7,.0f} commits/s; ratio "
                    f"{statistics.median(ratios):.2f} (rounds "
                    f"{', '.join(f'{r:.2f}' for r in ratios)})",
                    flush=True,
                )
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
            if database is not None:
                import psycopg

                with psycopg.connect(args.pg_admin, autocommit=True) as conn:
                    conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    return 0


if __name__ == "__main__":
    sys.exit(main())
