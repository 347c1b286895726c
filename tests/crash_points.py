"""The crash matrix's moments, shared by its worker, its MCP server and its test.

A cell of the matrix is one way of calling a tool at one crash point, named
``"{way}.{point}"`` (e.g. ``"pai_mcp.c"``). Its workflow id starts with
``crash-{way}.{point}-``, its tool's argument carries the cell, and its effect is a line
appended to ``{cell}.txt`` in the world folder (``CRASH_WORLD``); every time its tool
acts is a line in ``{cell}.acts`` (a retry-safe tool's far side dedupes by the key, so
it may act twice for one effect).

A process whose ``CRASH_ARM`` names a crash point stops its cells of that point there:
it writes ``{cell}.at`` (so the test knows the call is at that moment) and waits until
``{cell}.go`` exists. For a to d nobody writes it: the test kills the worker's process
group there. For e the test cuts the ledger's connections and then lets it go. Light on
purpose (the MCP server imports it): no Temporal, no agent framework.
"""

from __future__ import annotations

import asyncio
import fcntl
import functools
import os
import re
from collections.abc import Callable
from pathlib import Path

WORLD = "CRASH_WORLD"
ARM = "CRASH_ARM"

#: Where a call can stop, in the order a call passes them.
BEFORE_CLAIM = "before the claim"
AFTER_CLAIM = "after the claim"
AFTER_EFFECT = "after the effect"
AFTER_RECORD = "after the record"

#: The crash points, and where each stops its call.
STOPS = {
    "a": BEFORE_CLAIM,
    "b": AFTER_CLAIM,
    "c": AFTER_EFFECT,
    "d": AFTER_RECORD,
    "e": AFTER_EFFECT,  # held after its effect while the ledger's connections are cut
}
KILLED = ("a", "b", "c", "d")

_WORKFLOW_ID = re.compile(r"^crash-(\w+\.[a-e])-")


def world() -> Path:
    return Path(os.environ[WORLD])


def point_of(cell: str) -> str:
    return cell.rsplit(".", 1)[1]


def cell_of_workflow(workflow_id: str | None) -> str | None:
    found = _WORKFLOW_ID.match(workflow_id or "")
    return found.group(1) if found else None


def stops_here(cell: str, where: str) -> bool:
    """Whether this process stops ``cell`` at ``where``."""
    point = point_of(cell)
    return STOPS.get(point) == where and point in os.environ.get(ARM, "")


async def hold(
    cell: str,
    where: str,
    *,
    heartbeat: Callable[[], None] | None = None,
    parent: int | None = None,
) -> None:
    """Stop ``cell`` at ``where`` if this process is armed for it: say so, then wait to
    be let go (or killed). ``heartbeat`` keeps Temporal from giving the attempt up
    meanwhile (where the ledger is not heartbeating for it); ``parent``: the MCP server's
    worker, whose death ends the server here, before it does anything more."""
    if not stops_here(cell, where):
        return
    (world() / f"{cell}.at").write_text(where)
    go = world() / f"{cell}.go"
    while not go.exists():
        if parent is not None and os.getppid() != parent:
            os._exit(0)  # the worker died: its tool call dies here, acting on nothing
        if heartbeat is not None:
            heartbeat()
        await asyncio.sleep(0.1)


def append(cell: str, *, key: str | None = None) -> str:
    """The effect: one line in the cell's file; what the tool returns for it. With a
    ``key``, a far side that dedupes by it: the line carries the key, and a call whose
    key has its line already appends nothing and returns what the first one did. Every
    call that gets here is counted in ``{cell}.acts``, effect or not, with the pid of
    the process that acted."""
    path = world() / f"{cell}.txt"
    line = cell if key is None else f"{cell} {key}"
    with (world() / f"{cell}.acts").open("a", encoding="utf-8") as acts:
        acts.write(f"{line} pid {os.getpid()}\n")
    with path.open("a+", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        lines = handle.read().splitlines()
        if key is not None and line in lines:
            return output_for(cell, lines.index(line) + 1)
        handle.write(line + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    return output_for(cell, len(lines) + 1)


def output_for(cell: str, line: int) -> str:
    return f"{cell}: line {line}"


async def act(cell: str, *, parent: int | None = None, key: str | None = None) -> str:
    """A tool's body: stop after the claim (for a retry-safe call, which has no claim:
    before it acts), act, stop after the effect, return. ``key``: see :func:`append`."""
    await hold(cell, AFTER_CLAIM, parent=parent)
    output = await asyncio.to_thread(functools.partial(append, cell, key=key))
    await hold(cell, AFTER_EFFECT, parent=parent)
    return output
