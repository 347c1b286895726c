"""A stdio MCP server with one tool that appends a line to a file, for tests/test_strands.py
(run as ``python -m tests.strands_mcp_server`` in .venv-strands, where mcp is 1.x)."""

from __future__ import annotations

from pathlib import Path

from mcp.server.fastmcp import FastMCP

server = FastMCP("notes")


@server.tool()
def append_note(path: str, line: str) -> str:
    """Append a line to the file ``path`` (the effect the ledger protects).

    Args:
        path: The file.
        line: The line.
    """
    with Path(path).open("a") as handle:
        handle.write(line + "\n")
    return f"noted (line {len(Path(path).read_text().splitlines())})"


if __name__ == "__main__":
    server.run()
