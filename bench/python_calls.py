"""Python calls per ledgered call: cProfile over ``ledger_bench.py``'s call loop.

A fresh call and a replay of it, on SQLite and (with ``--postgres URL``) on PostgreSQL:
every call cProfile sees (Python functions and the built-ins they call) over the calls
made, the figure issue 42 bounds at 500 for a fresh call. ``--top N`` also prints the N
functions called most per fresh call, and the files they stand in.

    python bench/python_calls.py
    python bench/python_calls.py --postgres postgresql://postgres@127.0.0.1:5432/scratch --top 20

The PostgreSQL database should be a scratch one: the script writes its keys there.
It is a measurement: it exits 0 whatever the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import cProfile
import pstats
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ledger_bench import call
from temporal_ledger.ledger import Ledger


def _calls_per(stats: pstats.Stats, calls: int) -> dict[str, float]:
    per: dict[str, float] = {}
    for (file, line, name), (_, ncalls, *_rest) in stats.stats.items():  # type: ignore[attr-defined]
        per[f"{file}:{line}:{name}"] = ncalls / calls
    return per


async def measure(url: str, calls: int, top: int) -> None:
    ledger = Ledger.open(url)
    run = uuid.uuid4().hex[:8]
    try:
        for i in range(30):  # warm: connections, caches, the first statements
            await call(ledger, f"warm-{run}-{i}")
        figures = []
        for what in ("fresh", "replay"):
            profile = cProfile.Profile()
            profile.enable()
            for i in range(calls):
                await call(ledger, f"call-{run}-{i}")
            profile.disable()
            per = _calls_per(pstats.Stats(profile), calls)
            figures.append(f"{what} {sum(per.values()):.0f}")
            if what == "fresh" and top:
                by_file: collections.Counter[str] = collections.Counter()
                for where, n in per.items():
                    by_file[where.split(":")[0]] += n
                for where, n in sorted(per.items(), key=lambda item: -item[1])[:top]:
                    print(f"  {n:7.1f}  {where}")
                for file, n in by_file.most_common(top):
                    print(f"  {n:7.1f}  {file}")
        print(f"{url.split(':')[0]}: Python calls per {', per '.join(figures)}")
    finally:
        await ledger.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", metavar="URL", help="also measure this database")
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--top", type=int, default=0, metavar="N")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(measure(f"sqlite:///{folder}/ledger.db", args.calls, args.top))
    if args.postgres:
        asyncio.run(measure(args.postgres, args.calls, args.top))


if __name__ == "__main__":
    main()
