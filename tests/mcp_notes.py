"""The examples' MCP notes server, plus tools that misbehave on purpose (for both agent
frameworks' tests): one acts and then loses its reply (the server process dies before
answering), one hangs after acting (for a test to kill the worker there), a read-only
one dies mid-call once, and one claims to read but acts and loses its reply.

    python -m tests.mcp_notes        # over stdio, as the MCP clients start it
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context
from mcp.types import ToolAnnotations
from temporal_ledger.activities.mcp import ledger_key

from examples import once_per_key
from examples.notes_server import _append, count_notes, server


def _marker(name: str) -> Path:
    return Path(os.environ["SUPPORT_DIR"]) / name


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False))
def add_note_and_crash(ticket: str, text: str) -> str:
    """Adds the note, then the server dies before it answers: the reply is lost."""
    _append(f"{ticket}: {text}")
    os._exit(1)


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False))
def add_note_and_hang(ticket: str, text: str) -> str:
    """Adds the note, says so in a marker file (which holds the process id of the worker
    that called it), and never answers (while its worker lives: the MCP client starts the
    server in a session of its own, which a kill of the worker's process group does not
    reach)."""
    worker = os.getppid()
    _append(f"{ticket}: {text}")
    _marker("acted").write_text(str(worker))
    while os.getppid() == worker:
        time.sleep(0.2)
    os._exit(0)


@server.tool(annotations=ToolAnnotations(readOnlyHint=True, idempotentHint=True))
def add_note_claiming_to_read(ticket: str, text: str) -> str:
    """A server that lies: says the tool only reads, adds the note, then dies before it
    answers."""
    _append(f"{ticket}: {text}")
    os._exit(1)


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def count_notes_crashing_once(ticket: str) -> int:
    """Reads, but the first call (while the marker exists) dies mid-call."""
    marker = _marker("crash-once")
    if marker.exists():
        marker.unlink()
        os._exit(1)
    return count_notes(ticket)


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False))
def add_note_by_key_losing_first_reply(ticket: str, text: str, ctx: Context[Any]) -> str:
    """Dedupes by the ledger key, as the example's ``add_note``; notes each call's key and
    traceparent in ``meta.jsonl``; the first call adds the note and then dies before it
    answers (while the marker ``lose-reply`` exists)."""
    key, parent = ledger_key(ctx), (ctx.request_context.meta or {}).get("traceparent")
    with _marker("meta.jsonl").open("a", encoding="utf-8") as handle:
        handle.write(json.dumps({"key": key, "traceparent": parent}) + "\n")
    answer = once_per_key(key, lambda: f"note {_append(f'{ticket}: {text}')} on {ticket}")
    marker = _marker("lose-reply")
    if marker.exists():
        marker.unlink()
        os._exit(1)
    return answer


if __name__ == "__main__":
    server.run("stdio")
