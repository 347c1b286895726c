"""Instructions per PostgreSQL call, counted by valgrind: a CPU figure the load does not move.

On a shared 2-core VM the CPU time of a call swings by a fifth between runs of the same
code. The instructions this process executes do not: valgrind's cachegrind counts them
(the server's are not counted, nor are the waits). A fresh call is measured as the count
of a run making N2 fresh calls less that of a run making N1, over N2 - N1; a replay as
the same with each key replayed too, less the fresh calls.

    python bench/instructions.py --against 853ac5b      # REV's code, then this tree's

Valgrind slows the process ~50x, so both versions are told to keep trusting their clock
readings and idle connections (constants the run sets; at full speed they hold anyway):
each takes the path it takes at full speed. Needs ``valgrind`` (apt-get install valgrind).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

CHILD = r"""
import asyncio, sys, uuid
from temporal_ledger.ledger import ActionRequest, Authority, Ledger
from temporal_ledger.ledger import postgres

for name, value in (("_CLOCK_LAG_BOUND", 1e9), ("_CLOCK_TRUSTED_FOR", 1e9), ("_IDLE_ONLY", 30.0)):
    if hasattr(postgres, name):
        setattr(postgres, name, value)
url, mode, calls = sys.argv[1], sys.argv[2], int(sys.argv[3])
authority = Authority("bench", ["bench.*"])


def request(key):
    return ActionRequest(key=key, capability="bench.append", instruction="append one line",
                         payload={"line": key}, performer="bench")


async def trivial(request, ctx):
    return {"ok": True}


async def main():
    tag = uuid.uuid4().hex[:6]
    async with Ledger.open(url) as ledger:
        for i in range(20):  # warm: the pools, the statements, the clock
            for _ in range(2):
                await ledger.execute(request(f"w{tag}{i}"), authority=authority, adapter=trivial)
        keys = [f"k{tag}-{i}" for i in range(calls)]
        for key in keys:
            await ledger.execute(request(key), authority=authority, adapter=trivial)
        if mode == "replay":
            for key in keys:
                assert (await ledger.execute(request(key), authority=authority,
                                             adapter=trivial)).replayed


asyncio.run(main())
"""


def instructions(pythonpath: str | None, url: str, mode: str, calls: int) -> int:
    """What one run of ``calls`` calls executes, from start to exit."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    done = subprocess.run(
        ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
         sys.executable, "-c", CHILD, url, mode, str(calls)],
        env=env, capture_output=True, text=True, cwd=tempfile.gettempdir(),
    )  # fmt: skip
    found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    if done.returncode or found is None:
        raise SystemExit(f"valgrind run failed:\n{done.stderr[-3000:]}")
    return int(found.group(1).replace(",", ""))


def per_call(pythonpath: str | None, admin: str, low: int, high: int) -> tuple[float, float]:
    """(instructions per fresh call, per replay) of the code on ``pythonpath``."""
    import psycopg

    figures = []
    for mode in ("fresh", "replay"):
        name = f"ledger_instructions_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        url = admin.rsplit("/", 1)[0] + "/" + name
        try:
            # A run that creates the schema first: the measured runs both find it there.
            instructions(pythonpath, url, mode, 0)
            many = instructions(pythonpath, url, mode, high)
            few = instructions(pythonpath, url, mode, low)
            figures.append((many - few) / (high - low))
        finally:
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    fresh, both = figures
    return fresh, both - fresh


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", metavar="REV", required=True, help="the code to compare with")
    parser.add_argument("--pg-admin", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--calls", default="20,120", help="N1,N2 (default 20,120)")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        parser.error("valgrind is needed (apt-get install valgrind)")
    low, high = (int(n) for n in args.calls.split(","))
    root = Path(__file__).resolve().parent.parent
    before = Path(tempfile.mkdtemp(prefix="ledger-instructions-"))
    try:
        package = before / "temporal_ledger"
        package.mkdir()
        (package / "__init__.py").write_text("")
        archive = subprocess.run(
            ["git", "-C", str(root), "archive", args.against, "ledger", "activities", "workflows"],
            capture_output=True, check=True,
        )  # fmt: skip
        subprocess.run(["tar", "-x", "-C", str(package)], input=archive.stdout, check=True)
        old = per_call(str(before), args.pg_admin, low, high)
        new = per_call(None, args.pg_admin, low, high)
    finally:
        shutil.rmtree(before, ignore_errors=True)
    print(f"instructions per call (valgrind, this process), {args.against} and this tree")
    for i, what in enumerate(("fresh call", "replay")):
        print(f"  {what:<11} {old[i] / 1000:9.1f} k {new[i] / 1000:9.1f} k   "
              f"after/before {new[i] / old[i]:.3f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
