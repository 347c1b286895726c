"""The Strands example's far side: the support desk's ticket notes as an MCP server on the
``mcp`` 1.x SDK (``FastMCP``, over stdio), which is what temporalio-strands-agents runs
on. ``examples.notes_server`` is the same server on the MCP SDK 2.x, which the other
agent examples use and which cannot install beside Strands.

Its ``add_note`` tool appends ``<ticket>: <text>`` to ``notes.txt`` in the folder named by
``SUPPORT_DIR`` (default: ``temporal-ledger-examples`` in the system's temporary
directory, see ``examples.work_dir``), in the same form as ``examples.notes_server``: an
effect the ledger must never repeat. Like ``examples.notes_server`` it dedupes by the
ledger key each ledgered call carries in its request's ``_meta`` (the worker's
``MCPClient`` is given ``ledger_transport``, which puts it there; read with ``ledger_key``
from ``temporal_ledger.activities.mcp``): a call that comes again under a key it has seen
(a retry after a lost reply that the operator answered ``no_effect_confirmed``) gets the
first answer back and adds no second note.

    python -m examples.strands.notes_server    # over stdio, as the worker starts it
"""

from __future__ import annotations

from mcp.server.fastmcp import Context, FastMCP
from temporal_ledger.activities.mcp import ledger_key

from examples import once_per_key, work_dir

server = FastMCP("notes")


@server.tool()
def add_note(ticket: str, text: str, ctx: Context) -> str:  # type: ignore[type-arg]  # generic in the session types
    """Add a note to a ticket.

    Args:
        ticket: The ticket, e.g. ``T-7``.
        text: The note.
        ctx: The request's context (its ``_meta`` holds the ledger key).
    """

    def append() -> str:
        path = work_dir() / "notes.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as handle:
            handle.write(f"{ticket}: {text}\n")
        return f"note {len(path.read_text(encoding='utf-8').splitlines())} on {ticket}"

    return once_per_key(ledger_key(ctx), append)


if __name__ == "__main__":
    server.run("stdio")
