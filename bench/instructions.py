"""Instructions per ledger call, counted by valgrind: a CPU figure the load does not move.

On a shared 2-core VM the CPU time of a call swings by a fifth between runs of the same
code. The instructions this process executes do not: valgrind's cachegrind counts them
(the server's are not counted, nor are the waits). A fresh call is measured as the count
of a run making N2 fresh calls less that of a run making N1, over N2 - N1; a retry-safe
fresh call (``retry_safe=True``: one write since issue 30) the same; a replay as the
same with each key replayed too, less the fresh calls. Each backend is measured:
PostgreSQL (a scratch database per mode) and SQLite (a file on disk in a temporary
folder per mode; its writer thread is in this process, so its instructions count).

    python bench/instructions.py --against 853ac5b      # REV's code, then this tree's
    python bench/instructions.py --against main --backends sqlite

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
import asyncio, importlib, sys, uuid
from temporal_ledger.ledger import ActionRequest, Authority, Ledger

# The module that reads the constants: the private one from 0.3 (setting a name on the
# deprecated public module would only shadow it there), the public one before.
try:
    postgres = importlib.import_module("temporal_ledger.ledger._postgres")
except ImportError:
    postgres = importlib.import_module("temporal_ledger.ledger.postgres")
for name, value in (("_CLOCK_LAG_BOUND", 1e9), ("_CLOCK_TRUSTED_FOR", 1e9), ("_IDLE_ONLY", 30.0)):
    if name in vars(postgres):
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
            await ledger.execute(request(key), authority=authority, adapter=trivial,
                                 retry_safe=mode == "safe")
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


MODES = ("fresh", "safe", "replay")


def per_call(
    pythonpath: str | None, backend: str, admin: str, low: int, high: int
) -> tuple[float, float, float]:
    """(instructions per fresh call, per retry-safe fresh call, per replay) of the code on
    ``pythonpath``."""
    if backend == "sqlite":
        return sqlite_per_call(pythonpath, low, high)
    import psycopg

    figures = []
    for mode in MODES:
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
    fresh, safe, both = figures
    return fresh, safe, both - fresh


def sqlite_per_call(pythonpath: str | None, low: int, high: int) -> tuple[float, float, float]:
    """The same on a SQLite file on disk, one fresh file per mode."""
    figures = []
    for mode in MODES:
        folder = Path(tempfile.mkdtemp(prefix="ledger-instructions-sqlite-"))
        url = f"sqlite:///{folder / 'ledger.db'}"  # an absolute path: four slashes
        try:
            instructions(pythonpath, url, mode, 0)  # creates the schema
            many = instructions(pythonpath, url, mode, high)
            few = instructions(pythonpath, url, mode, low)
            figures.append((many - few) / (high - low))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    fresh, safe, both = figures
    return fresh, safe, both - fresh


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", metavar="REV", required=True, help="the code to compare with")
    parser.add_argument("--pg-admin", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--calls", default="20,120", help="N1,N2 (default 20,120)")
    parser.add_argument(
        "--backends", default="postgresql,sqlite", help="postgresql,sqlite (default both)"
    )
    args = parser.parse_args()
    backends = [b for b in args.backends.split(",") if b]
    if not backends or set(backends) - {"postgresql", "sqlite"}:
        parser.error("--backends takes postgresql, sqlite or both")
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
        figures = {}
        for backend in backends:
            old = per_call(str(before), backend, args.pg_admin, low, high)
            new = per_call(None, backend, args.pg_admin, low, high)
            figures[backend] = (old, new)
    finally:
        shutil.rmtree(before, ignore_errors=True)
    print(f"instructions per call (valgrind, this process), {args.against} and this tree")
    print(f"  {'':<27} {args.against[:11]:>11} {'this tree':>11}")
    for backend, (old, new) in figures.items():
        for i, what in enumerate(("fresh call", "retry-safe fresh", "replay")):
            print(f"  {backend + ' ' + what:<27} {old[i] / 1000:9.1f} k {new[i] / 1000:9.1f} k"
                  f"   after/before {new[i] / old[i]:.3f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
