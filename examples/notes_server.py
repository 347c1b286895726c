"""The support desk's ticket notes, as an MCP server (the ``mcp`` package, over stdio).

Its ``add_note`` tool appends a line to ``notes.txt`` in the folder named by
``SUPPORT_DIR`` (default: ``temporal-ledger-examples`` in the system's temporary
directory, see ``examples.work_dir``): an effect the ledger must never repeat.
``count_notes`` only reads, and says so in its annotations; ``close_ticket`` may destroy
(it says nothing to the contrary).
``add_note`` dedupes by the ledger key that every ledgered MCP call carries in its
request's ``_meta`` (``temporal-ledger/key``, or the baggage entry of that name that Google
ADK's calls carry, see :func:`ledger_meta`): a call that comes
again under a key it has seen (a retry after a lost reply, which the ledger lets act again
after a ``no_effect_confirmed`` verdict or for a retry-safe tool) gets the first answer
back and adds no second note.
The agent examples (``openai_agents/``, ``pydantic_ai/``, ``google_adk/``) start it as
a subprocess: ``python -m examples.notes_server``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import unquote_plus

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

from examples import work_dir

server = MCPServer("notes")


def _notes() -> Path:
    return work_dir() / "notes.txt"


def _append(line: str) -> int:
    path = _notes()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        handle.write(line + "\n")
    return len(path.read_text(encoding="utf-8").splitlines())


#: The ``_meta`` fields of a ledgered MCP call (temporal-ledger's documented names).
KEY_FIELD = "temporal-ledger/key"
TRACEPARENT_FIELD = "traceparent"


def ledger_meta(ctx: Context[Any]) -> tuple[str | None, str | None]:
    """The ledger key (its wire form) and W3C ``traceparent`` a ledgered call sent, if any.

    A server needs no import from temporal-ledger: the two are plain strings in the
    request's ``_meta``, a dict in the MCP SDK 2.x (``ctx.request_context.meta``). Google
    ADK's MCP calls take no ``_meta`` from the ledger: theirs carries the key as the W3C
    ``baggage`` entry of the same name (``temporal-ledger%2Fkey=<key>``).

    Args:
        ctx: The tool's MCP request context.

    Returns:
        ``(key, traceparent)``, each None where the call did not send it.
    """
    meta = ctx.request_context.meta or {}
    key, parent = meta.get(KEY_FIELD), meta.get(TRACEPARENT_FIELD)
    if key is None and isinstance(meta.get("baggage"), str):
        key = _from_baggage(meta["baggage"])
    return (
        key if isinstance(key, str) and key else None,
        parent if isinstance(parent, str) and parent else None,
    )


def _from_baggage(header: str) -> str | None:
    """The value of ``temporal-ledger/key`` in a W3C baggage header, if it has one."""
    for member in header.split(","):
        name, _, value = member.split(";", 1)[0].partition("=")
        if unquote_plus(name.strip()) == KEY_FIELD:
            return unquote_plus(value.strip())
    return None


def _answered() -> Path:
    return work_dir() / "notes-by-key.jsonl"


def once_per_key(key: str | None, act: Any) -> str:
    """``act()``'s answer, or the answer it gave the first time ``key`` came (no act)."""
    path = _answered()
    if key is not None and path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            entry = json.loads(line)
            if entry["key"] == key:
                return str(entry["answer"])
    answer = str(act())
    if key is not None:
        with path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps({"key": key, "answer": answer}) + "\n")
    return answer


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False))
def add_note(ticket: str, text: str, ctx: Context[Any]) -> str:
    """Add a note to a ticket."""
    key, _ = ledger_meta(ctx)
    return once_per_key(key, lambda: f"note {_append(f'{ticket}: {text}')} on {ticket}")


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def count_notes(ticket: str) -> int:
    """How many notes a ticket has."""
    path = _notes()
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    return sum(line.startswith(f"{ticket}: ") for line in lines)


@server.tool()
def close_ticket(ticket: str, reason: str) -> str:
    """Close a ticket for good."""
    return f"closed {ticket} (note {_append(f'{ticket}: CLOSED {reason}')})"


if __name__ == "__main__":
    server.run("stdio")
