"""Pages written per commit by the SQLite ledger, per kind of call.

In WAL mode every page a transaction changes is appended to the log as one frame (24
bytes of header and the page) when it commits, and a frame whose header holds the
database size ends a commit. With auto-checkpoint off, the frames a run appends are
exactly the pages its commits wrote; each frame names its page, and ``dbstat`` names
the b-tree (table or index) that page belongs to.

The file is first filled with ``--fill``
keys (so each b-tree has more than its root page), then, for each kind of call,
``--calls`` calls are made one after another (each commit holds one transition):

- fresh: a call that may not repeat (the claim with its started marker, then the outcome)
- retry-safe: ``retry_safe=True``, one commit of request and outcome
- replay: the same request again (its record is committed without a sync)

    python bench/sqlite_pages.py
    python bench/sqlite_pages.py --calls 500 --fill 5000

To compare layouts, run it at two revisions: the schema is the one of the code.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import sqlite3
import struct
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from _requests import AUTHORITY, bench_request  # bench/ is sys.path[0] when run as a script
from temporal_ledger.ledger import Ledger
from temporal_ledger.ledger._sqlite import SQLiteRecorder

KINDS = ("fresh", "retry-safe", "replay")
#: The rows of the tables: each kind, and a fresh call's two commits apart.
ROWS = ("fresh", "fresh: claim", "fresh: outcome", "retry-safe", "replay")
WAL_HEADER = 32
FRAME_HEADER = 24


async def trivial(req: object, ctx: object) -> dict[str, bool]:
    return {"ok": True}


@dataclass
class Measured:
    """The commits of one kind of call: how many, and the pages each wrote, by b-tree."""

    calls: int
    commits: int = 0
    pages: int = 0
    by_tree: collections.Counter[str] = field(default_factory=collections.Counter)

    def per_commit(self) -> float:
        return self.pages / self.commits if self.commits else 0.0


def wal_frames(wal: Path, page_size: int, start: int) -> tuple[list[list[int]], int]:
    """The pages of each commit appended to ``wal`` from byte ``start`` on, and where
    the log ends."""
    data = wal.read_bytes()
    offset = max(start, WAL_HEADER)
    commits: list[list[int]] = []
    pages: list[int] = []
    while offset + FRAME_HEADER + page_size <= len(data):
        page, size_after = struct.unpack(">II", data[offset : offset + 8])
        pages.append(page)
        offset += FRAME_HEADER + page_size
        if size_after:
            commits.append(pages)
            pages = []
    return commits, offset


def page_owners(path: Path) -> dict[int, str]:
    """Which b-tree each page of the file belongs to (through the log: as committed)."""
    conn = sqlite3.connect(path)
    try:
        owners = {page: name for name, page in conn.execute("SELECT name, pageno FROM dbstat")}
        freelist = conn.execute("PRAGMA freelist_count").fetchone()[0]
    finally:
        conn.close()
    owners.setdefault(1, "sqlite_schema")
    if freelist:
        owners[0] = "freelist"
    return owners


async def measure(path: Path, calls: int, fill: int) -> dict[str, Measured]:
    recorder = SQLiteRecorder(path)
    ledger = Ledger(recorder, url=f"sqlite:///{path}")
    wal = path.with_name(path.name + "-wal")
    conn = recorder._conn  # the writer's connection: the only one that commits
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    results: dict[str, Measured] = {}
    commits_of: dict[str, list[list[int]]] = {}
    try:
        for i in range(fill):
            safe = i % 2 == 0
            await ledger.execute(
                bench_request(f"fill-{i}"), authority=AUTHORITY, adapter=trivial, retry_safe=safe
            )
        await asyncio.to_thread(_checkpoint, recorder)
        offset = wal.stat().st_size if wal.exists() else 0
        for kind in KINDS:
            for i in range(calls):
                key = f"fresh-{i}" if kind in ("fresh", "replay") else f"safe-{i}"
                result = await ledger.execute(
                    bench_request(key),
                    authority=AUTHORITY,
                    adapter=trivial,
                    retry_safe=kind == "retry-safe",
                )
                assert result.replayed == (kind == "replay"), (kind, result)
            await asyncio.to_thread(_settle, recorder)
            commits, offset = wal_frames(wal, page_size, offset)
            commits_of[kind] = commits
    finally:
        ledger.close()
    owners = page_owners(path)
    # A fresh call commits twice, one call after another: its claim (with the started
    # marker), then its outcome.
    commits_of["fresh: claim"] = commits_of["fresh"][0::2]
    commits_of["fresh: outcome"] = commits_of["fresh"][1::2]
    for kind, commits in commits_of.items():
        measured = Measured(calls=calls, commits=len(commits))
        for pages in commits:
            measured.pages += len(pages)
            measured.by_tree.update(owners.get(page, "freelist") for page in pages)
        results[kind] = measured
    return results


def _checkpoint(recorder: SQLiteRecorder) -> None:
    """Start the measured part with an empty log, and keep every later frame in it."""
    with recorder._lock:
        recorder._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        recorder._conn.execute("PRAGMA wal_autocheckpoint=0")


def _settle(recorder: SQLiteRecorder) -> None:
    """Wait until the writer has committed what was queued (a replay's record is
    answered after its commit, so this only waits for the writer's lock)."""
    with recorder._lock:
        pass


def table(results: dict[str, Measured]) -> str:
    lines = [
        "| per call kind | pages/commit | commits/call | pages/call |",
        "| --- | --- | --- | --- |",
    ]
    for kind in ROWS:
        m = results[kind]
        per_call = f"{m.commits / m.calls:.2f} | {m.pages / m.calls:.2f}"
        lines.append(f"| {kind} | {m.per_commit():.2f} | {per_call} |")
    lines += ["", "Pages per commit by b-tree:", ""]
    trees = sorted({t for m in results.values() for t in m.by_tree})
    lines.append("| commit | " + " | ".join(trees) + " | all |")
    lines.append("| --- |" + " --- |" * (len(trees) + 1))
    for kind in ROWS:
        m = results[kind]
        cells = [f"{m.by_tree[t] / m.commits:.2f}" if m.commits else "-" for t in trees]
        lines.append(f"| {kind} | " + " | ".join(cells) + f" | {m.per_commit():.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300, help="calls of each kind")
    parser.add_argument("--fill", type=int, default=3000, help="keys written before measuring")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ledger-pages-") as folder:
        results = asyncio.run(measure(Path(folder) / "ledger.db", args.calls, args.fill))
    print(f"SQLite {sqlite3.sqlite_version}, {args.fill} keys before, {args.calls} calls each")
    print()
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
