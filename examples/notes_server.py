"""The support desk's ticket notes, as an MCP server (the ``mcp`` package, over stdio).

Its ``add_note`` tool appends a line to ``notes.txt`` in the folder named by
``SUPPORT_DIR`` (default: ``temporal-ledger-examples`` in the system's temporary
directory, see ``examples.work_dir``): an effect the ledger must never repeat.
``count_notes`` only reads, and says so in its annotations; ``close_ticket`` may destroy
(it says nothing to the contrary).
``add_note`` dedupes by the ledger key that every ledgered MCP call carries in its
request's ``_meta`` (``temporal-ledger/key``, or the baggage entry of that name that
Google ADK's calls carry; read with ``ledger_key`` from
``temporal_ledger.activities.mcp``): a call that comes again under a key it has seen (a
retry after a lost reply, which the ledger lets act again after a
``no_effect_confirmed`` verdict or for a retry-safe tool) gets the first answer back and
adds no second note.
The agent examples (``openai_agents/``, ``pydantic_ai/``, ``google_adk/``) start it as
a subprocess: ``python -m examples.notes_server``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations
from temporal_ledger.activities.mcp import ledger_key

from examples import once_per_key, work_dir

server = MCPServer("notes")


def _notes() -> Path:
    return work_dir() / "notes.txt"


def _append(line: str) -> int:
    path = _notes()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        handle.write(line + "\n")
    return len(path.read_text(encoding="utf-8").splitlines())


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False))
def add_note(ticket: str, text: str, ctx: Context[Any]) -> str:
    """Add a note to a ticket."""
    return once_per_key(ledger_key(ctx), lambda: f"note {_append(f'{ticket}: {text}')} on {ticket}")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
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
