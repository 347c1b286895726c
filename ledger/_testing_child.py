"""Code run in child processes by the ledger tests: workers that crash, stall or race.

Effects are counted outside the ledger, as lines appended to a file, so a test can
compare what the world saw with what the ledger recorded.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

from temporal_ledger.ledger import ActionInProgressError, ActionRequest, Authority, Ledger

AUTHORITY = Authority("tester", ["files.*"])


def request(key: str, /, **changes: Any) -> ActionRequest:
    fields: dict[str, Any] = {
        "key": key,
        "capability": "files.append",
        "instruction": "append one line",
        "payload": {"line": key},
        "performer": "agent-1",
    }
    fields.update(changes)
    return ActionRequest(**fields)


def append_effect(path: Path, key: str) -> None:
    # O_APPEND writes of one short line are atomic across processes.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{key}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def count_effects(path: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            counts[line] = counts.get(line, 0) + 1
    return counts


async def _act_then_hang(url: str, key: str, effects: Path, lease: float) -> None:
    """Cause the effect, say so on stdout, then hang until killed (or continued)."""

    def adapter(req: ActionRequest, ctx: Any) -> dict[str, Any]:
        append_effect(effects, req.key)
        print("ACTED", flush=True)
        time.sleep(3600 if os.environ.get("HANG_FOREVER") else float(os.environ["HANG_FOR"]))
        return {"late": True}

    async with Ledger.open(url, lease=lease) as ledger:
        result = await ledger.execute(request(key), authority=AUTHORITY, adapter=adapter)
        print("RESULT", result.model_dump_json(), flush=True)


def hammer_worker(
    url: str, keys: list[str], effects: str, barrier: Any, results: Any, seed: int
) -> None:
    """One of several processes racing on shared keys, started together by a barrier."""
    tally = {"fresh": 0, "replayed": 0, "deferred": 0, "errors": 0}
    order = list(keys)
    random.Random(seed).shuffle(order)

    def adapter(req: ActionRequest, ctx: Any) -> dict[str, Any]:
        append_effect(Path(effects), req.key)
        return {"by": os.getpid()}

    async def run() -> None:
        async with Ledger.open(url) as ledger:
            barrier.wait()
            for key in order:
                try:
                    result = await ledger.execute(
                        request(key), authority=AUTHORITY, adapter=adapter
                    )
                except ActionInProgressError:
                    tally["deferred"] += 1
                    continue
                except Exception as exc:  # reported, so the test fails with the reason
                    tally["errors"] += 1
                    print(f"hammer error: {exc!r}", file=sys.stderr, flush=True)
                    continue
                tally["replayed" if result.replayed else "fresh"] += 1

    asyncio.run(run())
    results.put(tally)


if __name__ == "__main__":
    mode, url, key, effects, lease = sys.argv[1:6]
    if mode == "act-then-hang":
        asyncio.run(_act_then_hang(url, key, Path(effects), float(lease)))
    else:
        raise SystemExit(f"unknown mode {mode!r}")
