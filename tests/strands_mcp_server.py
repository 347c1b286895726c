"""A stdio MCP server with one tool that appends a line to a file, for tests/test_strands.py
(run as ``python -m tests.strands_mcp_server`` in .venv-strands, where mcp is 1.x).

Like the notes example, ``append_note`` dedupes by the ledger key the call carries
(``ledger_key``), and it notes each call's key and ``traceparent`` beside the file
(``<path>.meta.jsonl``); while the marker ``<path>.lose-reply`` exists, a call appends and
then the server dies before it answers (the marker is removed), as a lost reply.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from mcp.server.fastmcp import Context, FastMCP
from temporal_ledger.activities.mcp import ledger_key

server = FastMCP("notes")


def _beside(path: str, suffix: str) -> Path:
    return Path(path + suffix)


@server.tool()
def append_note(path: str, line: str, ctx: Context) -> str:  # type: ignore[type-arg]  # generic in the session types
    """Append a line to the file ``path`` (the effect the ledger protects).

    Args:
        path: The file.
        line: The line.
        ctx: The request's context (its ``_meta`` holds the ledger key).
    """
    key = ledger_key(ctx)
    meta = ctx.request_context.meta
    parent = (meta.model_extra or {}).get("traceparent") if meta is not None else None
    with _beside(path, ".meta.jsonl").open("a") as handle:
        handle.write(json.dumps({"key": key, "traceparent": parent}) + "\n")
    answered = _beside(path, ".answers.jsonl")
    for seen in answered.read_text().splitlines() if answered.exists() else []:
        if key is not None and json.loads(seen)["key"] == key:
            return str(json.loads(seen)["answer"])
    with Path(path).open("a") as handle:
        handle.write(line + "\n")
    answer = f"noted (line {len(Path(path).read_text().splitlines())})"
    if key is not None:
        with answered.open("a") as handle:
            handle.write(json.dumps({"key": key, "answer": answer}) + "\n")
    marker = _beside(path, ".lose-reply")
    if marker.exists():
        marker.unlink()
        os._exit(1)
    return answer


if __name__ == "__main__":
    server.run()
