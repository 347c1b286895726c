"""The support desk's ticket notes, as an MCP server (the ``mcp`` package, over stdio).

Its ``add_note`` tool appends a line to ``notes.txt`` in the folder named by
``SUPPORT_DIR`` (default: ``temporal-ledger-examples`` in the system's temporary
directory, see ``examples.work_dir``): an effect the ledger must never repeat.
``count_notes`` only reads, and says so in its annotations; ``close_ticket`` may destroy
(it says nothing to the contrary).
Both agent examples (``openai_agents/``, ``pydantic_ai/``) start it as a subprocess:
``python -m examples.notes_server``.
"""

from __future__ import annotations

from pathlib import Path

from mcp.server.mcpserver import MCPServer
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


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False))
def add_note(ticket: str, text: str) -> str:
    """Add a note to a ticket."""
    return f"note {_append(f'{ticket}: {text}')} on {ticket}"


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
