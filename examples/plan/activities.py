"""Example tools with real effects on local files: what the example workflows drive."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from temporal_ledger.activities import Tool, tool, tool_context


class AppendLine(BaseModel):
    path: str
    line: str


class Appended(BaseModel):
    path: str
    lines: int


class PostMessage(BaseModel):
    outbox: str
    channel: str
    text: str
    #: Simulates a network that drops the acknowledgement after the far side acted.
    lose_ack: bool = False


class Posted(BaseModel):
    message_id: str


def _append(path: Path, text: str) -> int:
    """Append a line durably; return how many lines the file has now."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        handle.write(text + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    return len(path.read_text(encoding="utf-8").splitlines())


@tool(capability="files.append")
async def append_line(arg: AppendLine) -> Appended:
    """Append one line to a file: the effect that must not happen twice."""
    lines = await asyncio.to_thread(_append, Path(arg.path), arg.line)
    return Appended(path=arg.path, lines=lines)


@tool(capability="messages.post")
async def post_message(arg: PostMessage) -> Posted:
    """Post a message into an outbox folder (one file per message, named by the key)."""
    ctx = tool_context()
    message_id = f"msg-{ctx.action_id[:12]}"
    await asyncio.to_thread(
        _append, Path(arg.outbox) / f"{arg.channel}.log", f"{message_id}\t{arg.text}"
    )
    if arg.lose_ack:
        raise ConnectionResetError("connection lost after the message was sent")
    return Posted(message_id=message_id)


EXAMPLE_TOOLS: dict[str, Tool[Any, Any]] = {
    "append_line": append_line,
    "post_message": post_message,
}
