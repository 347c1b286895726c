"""What the contract suite (:mod:`.testing`) and the processes it starts share: the suite's
request and far side, and workers that crash, stall or race in child processes.

Effects are counted outside the ledger, as lines appended to a file, so a test can
compare what the world saw with what the ledger recorded.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from temporal_ledger.ledger import (
    ActionInProgressError,
    ActionRequest,
    ActionResult,
    Authority,
    Ledger,
)

from ._models import ApprovalState

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


class _CountingAdapter:
    """A far side that counts the effects it is asked to cause."""

    def __init__(self, output: Any = None, *, raise_after: BaseException | None = None) -> None:
        self.calls: list[Any] = []
        self.output = output if output is not None else {"written": True}
        self.raise_after = raise_after

    def __call__(self, req: ActionRequest, ctx: Any) -> Any:
        self.calls.append(ctx)
        if self.raise_after is not None:
            raise self.raise_after
        return self.output


async def _execute(
    ledger: Ledger, req: ActionRequest | dict[str, Any] | str, adapter: Any = None, **options: Any
) -> ActionResult:
    """``ledger.execute`` under :data:`AUTHORITY`: ``req`` a request, or a key to build the
    suite's request for; ``adapter`` a counting far side unless given."""
    return await ledger.execute(
        request(req) if isinstance(req, str) else req,
        authority=AUTHORITY,
        adapter=_CountingAdapter() if adapter is None else adapter,
        **options,
    )


def _types(ledger: Ledger, key: str) -> list[str]:
    return [e.type for e in ledger.events(key)]


def _approval_state(ledger: Ledger, key: str) -> ApprovalState | None:
    approval = ledger.state(key).approval
    return None if approval is None else approval.state


def _crash_after_acting(url: str, key: str, effects: Path, lease: float) -> None:
    """A worker in another process claims ``key``, acts, and is killed before it reports."""
    child = _spawn_hanging_child(url, key, effects, lease, forever=True)
    try:
        _wait_for_line(child, "ACTED")
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
    finally:
        _reap(child)


def _spawn_hanging_child(
    url: str, key: str, effects: Path, lease: float, *, forever: bool, hang_for: float = 0
) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env["HANG_FOREVER" if forever else "HANG_FOR"] = "1" if forever else str(hang_for)
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "temporal_ledger.ledger._testing_child",
            "act-then-hang",
            url,
            key,
            str(effects),
            str(lease),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _wait_for_line(child: subprocess.Popen[str], expected: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    assert child.stdout is not None
    lines = []
    while time.monotonic() < deadline:
        line = child.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line.strip() == expected:
            return
    raise AssertionError(f"child never printed {expected!r}: {''.join(lines)}")


def _reap(child: subprocess.Popen[str]) -> None:
    if child.poll() is None:
        child.send_signal(signal.SIGCONT)
        child.kill()
        child.wait(timeout=10)


def _run_hammer(
    url: str, keys: list[str], effects: Path, *, processes: int
) -> list[dict[str, int]]:
    """Start ``processes`` workers together on ``keys``; return their tallies."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(processes)
    results = ctx.Queue()
    workers = [
        ctx.Process(target=hammer_worker, args=(url, keys, str(effects), barrier, results, seed))
        for seed in range(processes)
    ]
    for worker in workers:
        worker.start()
    try:
        tallies = [results.get(timeout=300) for _ in workers]
    finally:
        for worker in workers:
            worker.join(timeout=30)
            if worker.is_alive():
                worker.kill()
    return tallies


if __name__ == "__main__":
    mode, url, key, effects, lease = sys.argv[1:6]
    if mode == "act-then-hang":
        asyncio.run(_act_then_hang(url, key, Path(effects), float(lease)))
    else:
        raise SystemExit(f"unknown mode {mode!r}")
