"""What the contract suite (:mod:`.testing`) and the processes it starts share: the suite's
request and far side, and workers that act, stall or race in child processes.

Effects are counted outside the ledger, as lines appended to a file, so a test can
compare what the world saw with what the ledger recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from ._errors import ActionInProgressError
from ._ledger import Ledger
from ._models import ActionRequest, ActionResult, ApprovalState, Authority

AUTHORITY = Authority("tester", ["files.*"])
Opener = Callable[..., Ledger]  # the ``open_ledger`` fixture's type
_REQUEST = {"capability": "files.append", "instruction": "append one line", "performer": "agent-1"}
# Children start afresh (no fork of a process running an event loop and threads).
_SPAWN = multiprocessing.get_context("spawn")


def request(key: str, /, **changes: Any) -> ActionRequest:
    return ActionRequest(**{"key": key, "payload": {"line": key}, **_REQUEST, **changes})


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


def append_effect(path: str | Path, key: str) -> None:
    # Opened to append (O_APPEND), one short line is one write: atomic across processes.
    with open(path, "a") as effects:
        effects.write(f"{key}\n")


def count_effects(path: Path) -> Counter[str]:
    return Counter(path.read_text().splitlines() if path.exists() else [])


def _act_then_hang(
    url: str, key: str, effects: str, lease: float, hang_for: float, acted: Any
) -> None:
    """In a child process: claim ``key``, cause the effect, set ``acted``, then hang for
    ``hang_for`` seconds (unless killed first) before the outcome is reported."""

    def adapter(req: ActionRequest, ctx: Any) -> dict[str, Any]:
        append_effect(effects, req.key)
        acted.set()
        time.sleep(hang_for)
        return {"late": True}

    async def run() -> None:
        async with Ledger.open(url, lease=lease) as ledger:
            await _execute(ledger, key, adapter)

    asyncio.run(run())


@contextlib.contextmanager
def acting_child(
    url: str, key: str, effects: Path, *, lease: float, hang_for: float = 3600
) -> Iterator[BaseProcess]:
    """A worker in another process that claims ``key`` and acts (see :func:`_act_then_hang`):
    yielded once it acted, killed after the block (SIGKILL, which ends a stopped one too).
    The world then saw its one effect, and no other on ``key``."""
    acted = _SPAWN.Event()
    args = (url, key, str(effects), lease, hang_for, acted)
    child = _SPAWN.Process(target=_act_then_hang, args=args)
    child.start()
    try:
        assert acted.wait(30), "the child never acted"
        yield child
    finally:
        child.kill()
        child.join(10)
    assert count_effects(effects) == {key: 1}


def _hammer(url: str, keys: list[str], effects: str, start: Any, tallies: Any, seed: int) -> None:
    """One of several processes racing on shared keys, started together by ``start``."""
    tally = dict.fromkeys(["fresh", "replayed", "deferred", "errors"], 0)
    random.Random(seed).shuffle(keys)

    def adapter(req: ActionRequest, ctx: Any) -> dict[str, Any]:
        append_effect(effects, req.key)
        return {"by": os.getpid()}

    async def run() -> None:
        async with Ledger.open(url) as ledger:
            start.wait()
            for key in keys:
                try:
                    result = await _execute(ledger, key, adapter)
                except ActionInProgressError:
                    tally["deferred"] += 1
                except Exception as exc:  # reported, so the test fails with the reason
                    tally["errors"] += 1
                    print(f"hammer error: {exc!r}", file=sys.stderr, flush=True)
                else:
                    tally["replayed" if result.replayed else "fresh"] += 1

    asyncio.run(run())
    tallies.put(tally)


def _run_hammer(
    url: str, keys: list[str], effects: Path, *, processes: int
) -> tuple[list[dict[str, int]], Counter[str]]:
    """Start ``processes`` workers together on ``keys``; return their tallies and the
    effects the world saw."""
    start, tallies = _SPAWN.Barrier(processes), _SPAWN.Queue()
    workers = [
        _SPAWN.Process(target=_hammer, args=(url, keys, str(effects), start, tallies, seed))
        for seed in range(processes)
    ]
    for worker in workers:
        worker.start()
    try:
        return [tallies.get(timeout=300) for _ in workers], count_effects(effects)
    finally:
        for worker in workers:
            worker.join(timeout=30)
            worker.kill()
