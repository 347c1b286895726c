"""The Strands example's far side: the support desk's ticket notes as an MCP server on the
``mcp`` 1.x SDK (``FastMCP``, over stdio), which is what temporalio-strands-agents runs
on. ``examples.notes_server`` is the same server on the MCP SDK 2.x, which the other
agent examples use and which cannot install beside Strands.

Its ``add_note`` tool appends ``<ticket>: <text>`` to ``notes.txt`` in the folder named by
``SUPPORT_DIR`` (default: ``temporal-ledger-examples`` in the system's temporary
directory, see ``examples.work_dir``), in the same form as ``examples.notes_server``: an
effect the ledger must never repeat. Strands' MCP activity sends no request ``_meta``, so
this server cannot see the ledger's key and does not dedupe: the ledger's record is what
keeps a retried or reset call from adding a second note.

    python -m examples.strands.notes_server    # over stdio, as the worker starts it
"""

from __future__ import annotations

from mcp.server.fastmcp import FastMCP

from examples import work_dir

server = FastMCP("notes")


@server.tool()
def add_note(ticket: str, text: str) -> str:
    """Add a note to a ticket.

    Args:
        ticket: The ticket, e.g. ``T-7``.
        text: The note.
    """
    path = work_dir() / "notes.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        handle.write(f"{ticket}: {text}\n")
    return f"note {len(path.read_text(encoding='utf-8').splitlines())} on {ticket}"


if __name__ == "__main__":
    server.run("stdio")
