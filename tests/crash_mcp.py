"""The crash matrix's MCP server: one tool that appends its cell's line, stopping where
its worker's ``CRASH_ARM`` says (see ``tests.crash_points``).

    python -m tests.crash_mcp        # over stdio, as the MCP clients start it

The server runs in a session of its own, which a kill of its worker's process group
does not reach: a call held here ends, without acting, when its worker dies. It runs on
the MCP SDK 2.x and, for Strands' rows in .venv-strands, on 1.x (``FastMCP``).
"""

from __future__ import annotations

import os

from mcp.types import ToolAnnotations

try:
    from mcp.server.mcpserver import MCPServer
except ImportError:  # the MCP SDK 1.x, which Strands needs (.venv-strands)
    from mcp.server.fastmcp import FastMCP as MCPServer  # type: ignore[assignment]

from tests.crash_points import act, world

server = MCPServer("notes")
WORKER = os.getppid()


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False))
async def append_note(cell: str) -> str:
    """Append the cell's line to its file."""
    return await act(cell, parent=WORKER)


if __name__ == "__main__":
    # Listed, so that the test can see every server its workers started end.
    servers = world() / "servers"
    servers.mkdir(exist_ok=True)
    (servers / str(os.getpid())).touch()
    server.run("stdio")
