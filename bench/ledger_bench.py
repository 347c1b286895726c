"""How much a ledger costs, measured in durable commits of the disk or server it lives on.

One run on one (empty) ledger measures, in this order:

1. the median fresh ``execute`` with a trivial adapter, and how much of it is spent
   inside the recorder's transactions;
2. the median replay after 1,000 and after ``--actions`` recorded actions (the
   ledger is filled through the real API by spawned processes in between);
3. alongside each of those, the median durable commit: a one-row INSERT + COMMIT
   into a scratch table of the same SQLite file (same pragmas: WAL,
   synchronous=FULL) or PostgreSQL database;
4. barrier-synchronised hammers: N processes racing on 200 shared keys, counting
   the effects each key caused outside the ledger; then ``verify`` of it all.

Ratios are to the commit, because a ledger cannot be cheaper than the commits it
must make durable; the commit is what the disk or server costs, the rest is ours.

    python bench/ledger_bench.py                      # SQLite file in a temp dir
    python bench/ledger_bench.py --actions 10000 --samples 200
    python bench/ledger_bench.py --db postgresql://postgres@127.0.0.1:5432/bench

Exits 0 when every target passes, 1 when one fails, 2 on bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import multiprocessing
import os
import platform
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from temporal_ledger.ledger import (
    ActionInProgressError,
    ActionRequest,
    ActionResult,
    Authority,
    ExecutionContext,
    Ledger,
)

AUTHORITY = Authority("bench", ["bench.*"])
SMALL = 1_000  # the ledger size the large replay is compared with
HAMMER_KEYS = 200

# Targets: a ratio at or under its limit passes.
FRESH_LIMIT = 3.0  # commits per fresh execute
REPLAY_LIMIT = 2.0  # commits per replay
GROWTH_LIMIT = 1.3  # replay at --actions / replay at 1,000


def make_request(key: str) -> ActionRequest:
    return ActionRequest(
        key=key,
        capability="bench.append",
        instruction="append one line",
        payload={"line": key},
        performer="bench",
    )


async def trivial(req: ActionRequest, ctx: ExecutionContext) -> dict[str, bool]:
    # Async so that no thread hop is measured: what remains is the ledger's own cost.
    return {"ok": True}


def median_ms(seconds: Sequence[float]) -> float:
    return statistics.median(seconds) * 1000.0


# -- the reference commit ------------------------------------------------------------


class CommitProbe:
    """Times one durable one-row commit next to the ledger's own tables."""

    TABLE = "bench_commit_probe"

    def commit_once(self) -> float:
        raise NotImplementedError

    def settings(self) -> str:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def settle(self) -> None:
        """Let the storage finish what a fast fill deferred (checkpoints, vacuum).

        Otherwise the measurement after a fill pays for background work that has
        nothing to do with the ledger's size, and says so as "growth".
        """
        raise NotImplementedError


class SQLiteCommitProbe(CommitProbe):
    def __init__(self, path: Path, ledger_file: Path) -> None:
        self._path = path
        self._ledger_file = ledger_file
        self._conn = sqlite3.connect(path, isolation_level=None, timeout=60)
        # The pragmas the ledger's connection uses; synchronous is per connection.
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.execute(f"CREATE TABLE IF NOT EXISTS {self.TABLE} (id INTEGER PRIMARY KEY, v)")
        # A new WAL file grows with its first ~1,000 frames, and a commit that extends a
        # file costs more than one that overwrites it; the ledger's own WAL is past
        # that after its warm-up, so the probe must be too, or the ratios flatter it.
        for _ in range(1200):
            self.commit_once()

    def commit_once(self) -> float:
        started = time.perf_counter()
        self._conn.execute("BEGIN IMMEDIATE")  # as the ledger's writes do
        self._conn.execute(f"INSERT INTO {self.TABLE} (v) VALUES (?)", ("x" * 64,))
        self._conn.execute("COMMIT")
        return time.perf_counter() - started

    def settle(self) -> None:
        conn = sqlite3.connect(self._ledger_file, isolation_level=None, timeout=60)
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()

    def settings(self) -> str:
        mode = self._conn.execute("PRAGMA journal_mode").fetchone()[0]
        sync = self._conn.execute("PRAGMA synchronous").fetchone()[0]
        return f"journal_mode={mode} synchronous={ {2: 'FULL', 3: 'EXTRA'}.get(sync, sync) }"

    def close(self) -> None:
        self._conn.execute(f"DROP TABLE IF EXISTS {self.TABLE}")
        self._conn.close()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{self._path}{suffix}").unlink(missing_ok=True)


class PostgresCommitProbe(CommitProbe):
    def __init__(self, url: str) -> None:
        import psycopg

        self._conn = psycopg.connect(url, autocommit=False)
        self._conn.execute(
            f"CREATE TABLE IF NOT EXISTS {self.TABLE} (id BIGSERIAL PRIMARY KEY, v TEXT)"
        )
        self._conn.commit()

    def commit_once(self) -> float:
        started = time.perf_counter()
        self._conn.execute(f"INSERT INTO {self.TABLE} (v) VALUES (%s)", ("x" * 64,))
        self._conn.commit()
        return time.perf_counter() - started

    def settle(self) -> None:
        import psycopg

        self._conn.autocommit = True  # VACUUM cannot run inside a transaction
        try:
            self._conn.execute("VACUUM (ANALYZE) ledger_events, ledger_keys")
            with contextlib.suppress(psycopg.errors.InsufficientPrivilege):
                self._conn.execute("CHECKPOINT")
        finally:
            self._conn.autocommit = False

    def settings(self) -> str:
        values = [
            f"{name}={self._conn.execute(f'SHOW {name}').fetchone()[0]}"  # type: ignore[index]
            for name in ("synchronous_commit", "fsync", "wal_sync_method")
        ]
        self._conn.commit()
        return " ".join(values)

    def close(self) -> None:
        self._conn.execute(f"DROP TABLE IF EXISTS {self.TABLE}")
        self._conn.commit()
        self._conn.close()


def commit_probe(url: str) -> CommitProbe:
    if url.startswith("sqlite:///"):
        # A sibling file on the same disk: a write to the ledger's own file from another
        # connection would make the ledger's connection drop its page cache, charging
        # the ledger (more, the larger it is) for the probe.
        ledger_file = Path(url.removeprefix("sqlite:///"))
        return SQLiteCommitProbe(ledger_file.with_name(ledger_file.name + ".probe"), ledger_file)
    return PostgresCommitProbe(url)


# -- timing the ledger ---------------------------------------------------------------


class TransactTimer:
    """Wraps the recorder's transactions to
    split an execute into storage and the rest."""

    def __init__(self, ledger: Ledger) -> None:
        recorder = ledger._recorder  # the bench looks inside on purpose: where does time go
        self.spent = 0.0
        self.calls = 0
        recorder.transact = self._timed(recorder.transact)

    def _timed(self, inner: Callable[..., Any]) -> Callable[..., Any]:
        def timed(key: str, fn: Callable[..., Any]) -> Any:
            started = time.perf_counter()
            try:
                return inner(key, fn)
            finally:
                self.spent += time.perf_counter() - started
                self.calls += 1

        return timed


@dataclass
class Timing:
    median_ms: float
    commit_ms: float  # median durable commit, sampled alongside
    in_recorder_ms: float  # median time inside the recorder's transactions
    outside_ms: float  # median of the rest: validation, fingerprint, hops, adapter
    transactions: float  # recorder transactions per call

    @property
    def commits(self) -> float:
        return self.median_ms / self.commit_ms


# Commits and executes alternate in blocks, so both medians see the same background
# load (other processes, checkpoints) on a shared machine. Blocks, not single calls:
# a write by the probe's connection makes the ledger's SQLite connection drop its page
# cache, which would charge the ledger for the probe.
BLOCK = 25


async def time_executes(
    ledger: Ledger, timer: TransactTimer, probe: CommitProbe, keys: Sequence[str]
) -> Timing:
    totals: list[float] = []
    inside: list[float] = []
    commits: list[float] = []
    calls_before = timer.calls
    for start in range(0, len(keys), BLOCK):
        block = keys[start : start + BLOCK]
        commits += [probe.commit_once() for _ in block]
        for key in block:
            spent_before = timer.spent
            started = time.perf_counter()
            await ledger.execute(make_request(key), authority=AUTHORITY, adapter=trivial)
            totals.append(time.perf_counter() - started)
            inside.append(timer.spent - spent_before)
    return Timing(
        median_ms=median_ms(totals),
        commit_ms=median_ms(commits),
        in_recorder_ms=median_ms(inside),
        outside_ms=median_ms([t - i for t, i in zip(totals, inside, strict=True)]),
        transactions=(timer.calls - calls_before) / len(keys),
    )


# -- filling the ledger through the API -----------------------------------------------


def fill_key(i: int) -> str:
    return f"fill-{i:07d}"


def _fill_worker(url: str, indices: list[int], concurrency: int, results: Any) -> None:
    async def run() -> int:
        done = 0
        async with Ledger.open(url) as ledger:

            async def one(i: int) -> None:
                nonlocal done
                result = await ledger.execute(
                    make_request(fill_key(i)), authority=AUTHORITY, adapter=trivial
                )
                assert not result.replayed, result
                done += 1

            # Several requests in flight keep the recorder busy while the event loop
            # validates and fingerprints the next ones.
            for start in range(0, len(indices), concurrency):
                await asyncio.gather(*(one(i) for i in indices[start : start + concurrency]))
        return done

    try:
        results.put(("ok", asyncio.run(run())))
    except BaseException as exc:
        results.put(("error", repr(exc)))
        raise


def fill(url: str, start: int, stop: int, processes: int, concurrency: int) -> float:
    """Record fresh actions for fill keys ``start..stop-1``; return the seconds it took."""
    if stop <= start:
        return 0.0
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    indices = list(range(start, stop))
    shares = [indices[p::processes] for p in range(processes)]
    started = time.perf_counter()
    workers = [
        ctx.Process(target=_fill_worker, args=(url, share, concurrency, results))
        for share in shares
        if share
    ]
    for worker in workers:
        worker.start()
    try:
        outcomes = [results.get(timeout=3600) for _ in workers]
    finally:
        _join(workers)
    failed = [detail for status, detail in outcomes if status != "ok"]
    if failed:
        raise RuntimeError(f"filling the ledger failed: {failed[0]}")
    if sum(detail for _, detail in outcomes) != stop - start:
        raise RuntimeError("filling the ledger recorded fewer actions than asked")
    return time.perf_counter() - started


def _join(workers: list[Any]) -> None:
    for worker in workers:
        worker.join(timeout=60)
        if worker.is_alive():
            worker.kill()
            worker.join()


# -- the hammer ----------------------------------------------------------------------


def _append_effect(path: str, key: str) -> None:
    # One O_APPEND write of a short line is atomic across processes. No fsync: the
    # file only counts effects of processes that do not crash, and its cost would be
    # charged to the ledger.
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
                    result: ActionResult = await ledger.execute(
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
    processes: int
    keys: int
    requests: int
    effects: int
    duplicates: int  # effects beyond the first, over all keys
    missing: int  # keys that never acted
    errors: int
    fresh: int
    replayed: int
    deferred: int
    seconds: float
    requests_per_s: float
    effects_per_s: float
    first_error: str | None = None

    @property
    def ok(self) -> bool:
        return self.duplicates == 0 and self.missing == 0 and self.errors == 0


def hammer(url: str, processes: int, workdir: Path) -> HammerResult:
    keys = [f"hammer-{processes}-{i:03d}" for i in range(HAMMER_KEYS)]
    effects = workdir / f"effects-{processes}.txt"
    effects.unlink(missing_ok=True)
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
    seconds = max(t["finished"] for t in tallies) - min(t["started"] for t in tallies)
    total = sum(counts.values())
    requests = processes * len(keys)
    return HammerResult(
        processes=processes,
        keys=len(keys),
        requests=requests,
        effects=total,
        duplicates=sum(c - 1 for c in counts.values() if c > 1),
        missing=sum(1 for c in counts.values() if c == 0),
        errors=sum(t["errors"] for t in tallies),
        fresh=sum(t["fresh"] for t in tallies),
        replayed=sum(t["replayed"] for t in tallies),
        deferred=sum(t["deferred"] for t in tallies),
        seconds=seconds,
        requests_per_s=requests / seconds,
        effects_per_s=total / seconds,
        first_error=next((t["first_error"] for t in tallies if "first_error" in t), None),
    )


# -- the run -------------------------------------------------------------------------


@dataclass
class Report:
    url: str
    backend: str
    machine: str
    actions: int
    samples: int
    storage_settings: str = ""
    fresh: Timing | None = None
    fresh_at_actions: Timing | None = None
    replay_small: Timing | None = None
    replay_large: Timing | None = None
    small: int = SMALL
    fill_seconds: float = 0.0
    fill_actions: int = 0
    verify_seconds: float = 0.0
    verify_ok: bool = False
    verify_problems: list[str] = field(default_factory=list)
    hammers: list[HammerResult] = field(default_factory=list)
    total_seconds: float = 0.0
    # A shared machine's other work shows in every figure; say how busy it was.
    load_before: float = 0.0
    load_after: float = 0.0

    def checks(self) -> list[tuple[str, str, str, bool]]:
        """(what, measured, target, passed) for every target."""
        assert self.fresh and self.replay_small and self.replay_large
        fresh = self.fresh.commits
        replay = self.replay_small.commits
        # In commits of the moment: the two replays are measured minutes apart, so each
        # is divided by the durable commit timed alongside it, which cancels the load
        # the machine had then (the time ratio is printed above the targets too).
        growth = self.replay_large.commits / self.replay_small.commits
        rows = [
            ("fresh execute / commit", f"{fresh:.2f}", f"<= {FRESH_LIMIT:g}", fresh <= FRESH_LIMIT),
            ("replay / commit", f"{replay:.2f}", f"<= {REPLAY_LIMIT:g}", replay <= REPLAY_LIMIT),
            (
                f"replay @{self.actions:,} / @{self.small:,} (in commits)",
                f"{growth:.2f}",
                f"<= {GROWTH_LIMIT:g}",
                growth <= GROWTH_LIMIT,
            ),
        ]
        for h in self.hammers:
            rows.append(
                (
                    f"hammer x{h.processes}: duplicates, missing, errors",
                    f"{h.duplicates}, {h.missing}, {h.errors}",
                    "0, 0, 0",
                    h.ok,
                )
            )
        rows.append(
            ("verify after the run", "ok" if self.verify_ok else "problems", "ok", self.verify_ok)
        )
        return rows

    def to_json(self) -> dict[str, Any]:
        def plain(value: Any) -> Any:
            if isinstance(value, (Timing, HammerResult)):
                return {k: plain(v) for k, v in vars(value).items()}
            if isinstance(value, float):
                return round(value, 4)
            if isinstance(value, list):
                return [plain(v) for v in value]
            return value

        out = {k: plain(v) for k, v in vars(self).items()}
        out["checks"] = [
            {"what": w, "measured": m, "target": t, "pass": p} for w, m, t, p in self.checks()
        ]
        out["pass"] = all(p for *_, p in self.checks())
        return out

    def table(self) -> str:
        assert self.fresh and self.replay_small and self.replay_large and self.fresh_at_actions
        fill_rate = self.fill_actions / max(self.fill_seconds, 1e-9)
        lines = [
            f"ledger benchmark: {self.backend}  {self.url}",
            f"  {self.machine}; {self.storage_settings}",
            f"  {self.samples} samples per median; total run {self.total_seconds:.0f} s; "
            f"1-min load average {self.load_before:.1f} before, {self.load_after:.1f} after",
            "",
            "commit = median 1-row INSERT+COMMIT, sampled alongside each row; "
            "commits = median / commit;",
            "in recorder = median time inside the recorder's transactions (tx per call)",
            "",
            f"{'measurement':<40} {'median':>9} {'commit':>9} {'commits':>8} "
            f"{'in recorder':>12} {'tx':>4}",
            "-" * 87,
        ]

        def row(name: str, t: Timing) -> str:
            return (
                f"{name:<40} {t.median_ms:>6.3f} ms {t.commit_ms:>6.3f} ms {t.commits:>8.2f}"
                f" {t.in_recorder_ms:>9.3f} ms {t.transactions:>4.1f}"
            )

        growth_in_commits = self.replay_large.commits / self.replay_small.commits
        lines += [
            row("fresh execute (trivial adapter), empty", self.fresh),
            row(f"replay @{self.small:,} actions", self.replay_small),
            row(f"replay @{self.actions:,} actions", self.replay_large),
            row(f"fresh execute @{self.actions:,} actions", self.fresh_at_actions),
            f"replay growth {self.small:,} -> {self.actions:,}: "
            f"{self.replay_large.median_ms / self.replay_small.median_ms:.2f}x in time, "
            f"{growth_in_commits:.2f}x in commits of the moment",
            "",
            f"fill: {self.fill_actions:,} fresh actions through the API in "
            f"{self.fill_seconds:.1f} s ({fill_rate:,.0f}/s)",
            f"verify of the whole ledger: {'ok' if self.verify_ok else 'PROBLEMS'} in "
            f"{self.verify_seconds:.1f} s",
            "",
            f"{'hammer (barrier start, 200 shared keys)':<40} {'effects':>7} {'dup':>4} "
            f"{'miss':>4} {'err':>4} {'fresh/replay/deferred':>22} {'req/s':>8} {'eff/s':>7}",
            "-" * 102,
        ]
        for h in self.hammers:
            lines.append(
                f"{f'{h.processes} process(es) x {h.keys} keys':<40} {h.effects:>7} "
                f"{h.duplicates:>4} {h.missing:>4} {h.errors:>4} "
                f"{f'{h.fresh}/{h.replayed}/{h.deferred}':>22} {h.requests_per_s:>8.0f} "
                f"{h.effects_per_s:>7.0f}"
            )
            if h.first_error:
                lines.append(f"  first error: {h.first_error}")
        lines += ["", f"{'target':<46} {'measured':>12} {'target':>10}  result", "-" * 78]
        for what, measured, target, passed in self.checks():
            lines.append(f"{what:<46} {measured:>12} {target:>10}  {'PASS' if passed else 'FAIL'}")
        for problem in self.verify_problems[:10]:
            lines.append(f"  verify: {problem}")
        return "\n".join(lines)


async def measure(url: str, args: argparse.Namespace, report: Report, workdir: Path) -> None:
    samples: int = args.samples
    rng = random.Random(0)
    recorded: list[str] = []  # keys that acted fresh: the ledger's size in actions

    async def fresh(keys: list[str]) -> Timing:
        timing = await time_executes(ledger, timer, probe, keys)
        recorded.extend(keys)
        return timing

    async def fill_to(target: int) -> None:
        start = report.fill_actions
        count = max(0, target - len(recorded))
        if count:
            _progress(args, f"filling {count:,} actions to reach {target:,} ...")
        report.fill_seconds += fill(
            url, start, start + count, args.fill_processes, args.fill_concurrency
        )
        recorded.extend(fill_key(i) for i in range(start, start + count))
        report.fill_actions += count
        probe.settle()

    async def replays() -> Timing:
        # Random recorded keys, so the lookup is not always the same hot page.
        keys = [rng.choice(recorded) for _ in range(samples)]
        return await time_executes(ledger, timer, probe, keys)

    with Ledger.open(url) as ledger:
        # Checked before the probe adds its table: a used ledger is left as it was.
        if ledger.events(limit=1):
            raise SystemExit(f"error: {url} already holds a ledger; the bench needs an empty one")
    probe = commit_probe(url)
    try:
        report.storage_settings = probe.settings()
        async with Ledger.open(url) as ledger:
            timer = TransactTimer(ledger)

            # Warm up imports, thread pools, connection pools and the file's pages.
            await fresh([f"warm-{i}" for i in range(30)])
            await replays()

            report.fresh = await fresh([f"fresh-{i}" for i in range(samples)])

            await fill_to(min(SMALL, args.actions))
            report.small = len(recorded)
            report.replay_small = await replays()
            _progress(args, f"replay @{report.small:,}: {report.replay_small.median_ms:.3f} ms")

            await fill_to(args.actions)
            report.actions = len(recorded)
            _progress(args, f"filled {report.fill_actions:,} in {report.fill_seconds:.1f} s")
            report.replay_large = await replays()
            report.fresh_at_actions = await fresh([f"late-{i}" for i in range(samples)])
    finally:
        probe.close()

    for processes in args.hammer_processes:
        _progress(args, f"hammer with {processes} process(es) ...")
        report.hammers.append(hammer(url, processes, workdir))

    _progress(args, "verifying ...")
    with Ledger.open(url) as ledger:
        started = time.perf_counter()
        verified = ledger.verify()
        report.verify_seconds = time.perf_counter() - started
    report.verify_ok, report.verify_problems = verified.ok, verified.problems


def _progress(args: argparse.Namespace, message: str) -> None:
    if not args.quiet:
        print(f"[bench] {message}", file=sys.stderr, flush=True)


def _process_counts(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"want a list like 1,2,4,8, got {text!r}") from None
    if not counts or any(n < 1 for n in counts):
        raise argparse.ArgumentTypeError(f"want positive process counts, got {text!r}")
    return counts


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text!r}")
    return value


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python bench/ledger_bench.py",
        description="Measure the ledger in durable commits of its own storage.",
    )
    parser.add_argument(
        "--db",
        help="an EMPTY ledger: sqlite:///path or postgresql://... "
        "(default: a SQLite file in a new temporary directory)",
    )
    parser.add_argument(
        "--actions", type=_positive, default=100_000, help="ledger size of the large replay"
    )
    parser.add_argument("--samples", type=_positive, default=500, help="timed calls per median")
    parser.add_argument(
        "--hammer-processes",
        type=_process_counts,
        help="process counts to hammer with (default: 8 on SQLite, 1,2,4,8 on PostgreSQL)",
    )
    parser.add_argument(
        "--fill-processes",
        type=_positive,
        help="processes that fill the ledger (default: 1 on SQLite, whose writers serialise "
        "on one lock anyway; one per CPU on PostgreSQL)",
    )
    parser.add_argument(
        "--fill-concurrency", type=_positive, default=8, help="requests in flight per filler"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object, no table")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    args = parser.parse_args(argv)
    if args.db and not args.db.startswith(("sqlite:///", "postgresql://", "postgres://")):
        parser.error(f"--db must be sqlite:///path or postgresql://..., got {args.db!r}")
    if args.db and args.db.startswith("postgres") and not _has_postgres_backend():
        parser.error(
            "--db names PostgreSQL but this checkout has no ledger/postgres.py backend "
            "(or psycopg is not installed); nothing was run"
        )
    postgres = bool(args.db) and args.db.startswith("postgres")
    if args.hammer_processes is None:
        args.hammer_processes = [1, 2, 4, 8] if postgres else [8]
    if args.fill_processes is None:
        args.fill_processes = max(2, os.cpu_count() or 2) if postgres else 1
    return args


def _has_postgres_backend() -> bool:
    return (
        importlib.util.find_spec("ledger.postgres") is not None
        and importlib.util.find_spec("psycopg") is not None
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="ledger-bench-"))
    url = args.db or f"sqlite:///{workdir / 'ledger.db'}"
    report = Report(
        url=url,
        backend="sqlite" if url.startswith("sqlite") else "postgresql",
        machine=f"{os.cpu_count()} CPUs, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}",
        actions=args.actions,
        samples=args.samples,
    )
    started = time.perf_counter()
    report.load_before = os.getloadavg()[0]
    try:
        asyncio.run(measure(url, args, report, workdir))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    report.total_seconds = time.perf_counter() - started
    report.load_after = os.getloadavg()[0]
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(report.table())
    return 0 if all(passed for *_, passed in report.checks()) else 1


if __name__ == "__main__":
    sys.exit(main())
