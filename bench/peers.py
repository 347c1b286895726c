"""Our ledger beside two peers, on the same fresh/replay loop, in one run.

The loop: ``--calls`` (500) fresh calls on new keys, then as many replays of those
keys, each with a trivial effect (append to a Python list), timed per call; the
figure is the median wall time per call. The systems take turns in rounds (``--rounds``
of ``calls / rounds`` fresh calls, then their replays), so each sees the same
machine load.

- ours, SQLite: ``Ledger.open("sqlite:///...")`` and ``execute`` with an async adapter
  (WAL, synchronous=FULL);
- ours, SQLite with ``replay_audit="batched"`` where ``Ledger.open`` accepts it (since
  commit 04c690b; before it the row says "not available");
- justonce 0.2.0 (SQLite): its ``@idempotent`` decorator on a ``SqliteStore`` file
  (WAL, SQLite's default synchronous, printed);
- ours, PostgreSQL: ``Ledger.open("postgresql://...")`` on a scratch database;
- idemkit 1.0.2 (PostgreSQL, asyncpg): its ``@idempotent`` decorator on a
  ``PostgresBackend`` (``key_fields``, a fixed ``scope``) on another scratch database.

The peers come with the ``bench`` extra: ``pip install -e '.[test,bench]'``; a missing
one is skipped with a message. Scratch databases are created from ``--pg-admin`` and
dropped afterwards; the SQLite files live in a temporary directory that is removed.

    python bench/peers.py
    python bench/peers.py --calls 200 --rounds 2

It is a measurement: it exits 0 whatever the ratios, 1 if the script itself failed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.metadata
import os
import platform
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from _requests import bench_request  # bench/ is sys.path[0] when run as a script
from temporal_ledger.ledger import ActionRequest, Authority, InvalidRequest, Ledger
from temporal_ledger.ledger._models import ExecutionContext

AUTHORITY = Authority("bench", ["bench.*"])
DEFAULT_PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
PEERS = {"justonce": "0.2.0", "idemkit": "1.0.2"}

# (what, ours, peer, limit): ours / peer must be at or under the limit (issue 30's).
TARGETS = [
    ("fresh, SQLite: ours / justonce", "ours sqlite", "justonce", "fresh", 1.5),
    ("replay, SQLite (default audit): ours / justonce", "ours sqlite", "justonce", "replay", 3.0),
    ("fresh, PostgreSQL: ours / idemkit", "ours postgresql", "idemkit", "fresh", 0.7),
    ("replay, PostgreSQL: ours / idemkit", "ours postgresql", "idemkit", "replay", 0.7),
    (
        "replay, SQLite (batched audit): ours / justonce",
        "ours sqlite batched",
        "justonce",
        "replay",
        3.0,
    ),
]


@dataclass
class System:
    """One system under test: a fresh call and a replay, each timed by the loop."""

    name: str
    detail: str
    fresh: Callable[[str], Awaitable[bool]]  # -> ran the effect
    replay: Callable[[str], Awaitable[bool]]  # -> ran the effect (it must not)
    close: Callable[[], Awaitable[None]]
    effects: list[str]
    times: dict[str, list[float]] = field(default_factory=lambda: {"fresh": [], "replay": []})

    def median_ms(self, kind: str) -> float:
        return statistics.median(self.times[kind]) * 1e3


# -- our ledger ----------------------------------------------------------------------


make_request = bench_request


async def ours(name: str, url: str, detail: str, **options: Any) -> System:
    ledger = Ledger.open(url, **options)
    effects: list[str] = []

    async def adapter(req: ActionRequest, ctx: ExecutionContext) -> dict[str, bool]:
        effects.append(req.key)  # the trivial effect; async: no thread hop
        return {"ok": True}

    async def run(key: str) -> bool:
        result = await ledger.execute(make_request(key), authority=AUTHORITY, adapter=adapter)
        return not result.replayed

    async def close() -> None:
        await ledger.aclose()

    return System(name, detail, run, run, close, effects)


# -- justonce (SQLite) ---------------------------------------------------------------


def justonce_system(path: Path) -> System:
    import justonce
    from justonce.stores import SqliteStore

    store = SqliteStore(str(path))
    sync = store._conn.execute("PRAGMA synchronous").fetchone()[0]  # for the record only
    mode = store._conn.execute("PRAGMA journal_mode").fetchone()[0]
    engine = justonce.Idempotent(store)
    effects: list[str] = []

    @justonce.idempotent(
        key=lambda key: justonce.operation_key("bench", key), engine=engine, return_result=True
    )
    def append(key: str) -> dict[str, bool]:
        effects.append(key)
        return {"ok": True}

    async def run(key: str) -> bool:
        return bool(append(key).executed)  # its sync API, called inline

    async def close() -> None:
        store.close()

    names = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
    detail = (
        f"@justonce.idempotent, SqliteStore file, journal_mode={mode} "
        f"synchronous={names.get(sync, sync)}"
    )
    return System("justonce", detail, run, run, close, effects)


# -- idemkit (PostgreSQL, asyncpg) ---------------------------------------------------


async def idemkit_system(url: str) -> System:
    from idemkit import MethodConfig, idempotent
    from idemkit.backends.postgres import PostgresBackend, init_pg

    await init_pg(url)  # its schema: `idemkit init-pg URL`
    backend = PostgresBackend.from_url(url)
    effects: list[str] = []

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a fixed scope is this bench's single tenant

        @idempotent(backend=backend, config=MethodConfig(key_fields=["key"], scope=lambda: "bench"))
        async def append(key: str) -> dict[str, bool]:
            effects.append(key)
            return {"ok": True}

    async def run(key: str) -> bool:
        before = len(effects)
        await append(key=key)
        return len(effects) > before

    async def close() -> None:
        await backend.aclose()

    detail = "@idemkit.idempotent(key_fields=['key']), PostgresBackend (asyncpg pool)"
    return System("idemkit", detail, run, run, close, effects)


# -- PostgreSQL scratch databases -----------------------------------------------------


class PgServer:
    def __init__(self, admin_url: str) -> None:
        self.admin_url = admin_url
        self.created: list[str] = []

    def url(self, dbname: str) -> str:
        parts = urlsplit(self.admin_url)
        return urlunsplit((parts.scheme, parts.netloc, f"/{dbname}", parts.query, ""))

    def _admin(self) -> Any:
        import psycopg

        return psycopg.connect(self.admin_url, autocommit=True, connect_timeout=5)

    def check(self) -> str:
        with self._admin() as conn:
            version = conn.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
            sync = conn.execute("SHOW synchronous_commit").fetchone()[0]  # type: ignore[index]
        return f"PostgreSQL {version.split()[0]}, synchronous_commit={sync}"

    def create(self, label: str) -> str:
        name = f"peers_bench_{label}_{os.getpid()}_{uuid.uuid4().hex[:6]}"
        with self._admin() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        self.created.append(name)
        return name

    def drop_all(self) -> None:
        for name in list(self.created):
            with contextlib.suppress(Exception), self._admin() as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                self.created.remove(name)


# -- the loop ------------------------------------------------------------------------


async def run_loop(systems: Sequence[System], calls: int, rounds: int) -> None:
    """Rounds of fresh calls then their replays, the systems taking turns."""
    per_round = max(1, calls // rounds)
    for system in systems:  # warm: imports, pools, the files' pages
        for i in range(20):
            if not await system.fresh(f"warm-{i}"):
                raise RuntimeError(f"{system.name}: a warm-up call did not run its effect")
            await system.replay(f"warm-{i}")
    for r in range(rounds):
        order = list(systems) if r % 2 == 0 else list(reversed(systems))
        for system in order:
            keys = [f"k-{r}-{i}" for i in range(per_round)]
            for kind, step, expect in (
                ("fresh", system.fresh, True),
                ("replay", system.replay, False),
            ):
                for key in keys:
                    started = time.perf_counter()
                    ran = await step(key)
                    system.times[kind].append(time.perf_counter() - started)
                    if ran != expect:
                        raise RuntimeError(f"{system.name}: {kind} of {key!r} ran={ran}")
    for system in systems:
        if len(system.effects) != 20 + per_round * rounds:
            raise RuntimeError(f"{system.name}: {len(system.effects)} effects ran")


def installed(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


@contextlib.contextmanager
def scratch_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="peers-bench-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


async def measure(args: argparse.Namespace, workdir: Path, notes: list[str]) -> list[System]:
    systems: list[System] = []
    pg: PgServer | None = None
    if not args.no_postgres:
        pg = PgServer(args.pg_admin)
        try:
            notes.append(pg.check())
        except Exception as exc:
            notes.append(f"skipped PostgreSQL: cannot reach {args.pg_admin}: {exc}")
            pg = None
    try:
        systems.append(
            await ours(
                "ours sqlite",
                f"sqlite:///{workdir / 'ours.db'}",
                "Ledger.execute, async adapter, WAL synchronous=FULL",
            )
        )
        try:
            systems.append(
                await ours(
                    "ours sqlite batched",
                    f"sqlite:///{workdir / 'ours-batched.db'}",
                    'Ledger.open(url, replay_audit="batched")',
                    replay_audit="batched",
                )
            )
        except (TypeError, InvalidRequest, ValueError) as exc:
            notes.append(f"ours sqlite batched: not available (Ledger.open refused it: {exc})")
        version = installed("justonce")
        if version is None:
            notes.append("skipped justonce: not installed (pip install -e '.[bench]')")
        else:
            if version != PEERS["justonce"]:
                notes.append(f"note: justonce {version} installed, the bench pins 0.2.0")
            systems.append(justonce_system(workdir / "justonce.db"))
        if pg is not None:
            systems.append(
                await ours(
                    "ours postgresql",
                    pg.url(pg.create("ours")),
                    "Ledger.execute, async adapter, psycopg pool",
                )
            )
            version = installed("idemkit")
            if version is None:
                notes.append("skipped idemkit: not installed (pip install -e '.[bench]')")
            elif installed("asyncpg") is None:
                notes.append("skipped idemkit: asyncpg is missing (its 'postgres' extra)")
            else:
                if version != PEERS["idemkit"]:
                    notes.append(f"note: idemkit {version} installed, the bench pins 1.0.2")
                systems.append(await idemkit_system(pg.url(pg.create("idemkit"))))
        await run_loop(systems, args.calls, args.rounds)
    finally:
        for system in systems:
            with contextlib.suppress(Exception):
                await system.close()
        if pg is not None:
            pg.drop_all()
    return systems


def report(systems: Sequence[System], args: argparse.Namespace, notes: list[str]) -> str:
    by_name = {s.name: s for s in systems}
    lines = [
        "peers benchmark: the same fresh/replay loop, trivial effect (append to a list)",
        f"  {os.cpu_count()} CPUs, {platform.system()} {platform.release()}, Python "
        f"{platform.python_version()}, SQLite {sqlite3.sqlite_version}",
        f"  {args.calls} fresh calls then their replays per system, in {args.rounds} rounds "
        "taken in turn; median wall time per call",
    ]
    lines += [f"  {note}" for note in notes]
    lines += [
        "",
        f"{'system':<22} {'fresh ms':>9} {'replay ms':>10}  how",
        "-" * 100,
    ]
    for s in systems:
        lines.append(
            f"{s.name:<22} {s.median_ms('fresh'):>9.3f} {s.median_ms('replay'):>10.3f}  {s.detail}"
        )
    lines += ["", f"{'ratio (median per call)':<50} {'measured':>9} {'limit':>7}  result", "-" * 78]
    for what, ours_name, peer_name, kind, limit in TARGETS:
        o, p = by_name.get(ours_name), by_name.get(peer_name)
        if o is None or p is None:
            missing = ours_name if o is None else peer_name
            lines.append(f"{what:<50} {'n/a':>9} {f'<= {limit:g}':>7}  not available ({missing})")
            continue
        value = o.median_ms(kind) / p.median_ms(kind)
        verdict = "PASS" if value <= limit else "FAIL"
        lines.append(f"{what:<50} {value:>9.2f} {f'<= {limit:g}':>7}  {verdict}")
    return "\n".join(lines)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text!r}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python bench/peers.py",
        description="Our ledger beside justonce (SQLite) and idemkit (PostgreSQL).",
    )
    parser.add_argument("--calls", type=_positive, default=500, help="fresh calls per system")
    parser.add_argument("--rounds", type=_positive, default=5, help="turns the calls are cut in")
    parser.add_argument("--pg-admin", default=DEFAULT_PG_ADMIN, help="creates scratch databases")
    parser.add_argument("--no-postgres", action="store_true", help="SQLite systems only")
    args = parser.parse_args(argv)
    if args.calls % args.rounds:
        parser.error("--calls must be a multiple of --rounds")
    notes: list[str] = []
    started = time.perf_counter()
    load_before = os.getloadavg()
    with scratch_dir() as workdir:
        systems = asyncio.run(measure(args, workdir, notes))
    load_after = os.getloadavg()
    notes.append(
        f"run {time.perf_counter() - started:.0f} s; load average (1/5/15 min) "
        f"{'/'.join(f'{x:.1f}' for x in load_before)} before, "
        f"{'/'.join(f'{x:.1f}' for x in load_after)} after"
    )
    print(report(systems, args, notes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
