"""The OpenAI Agents example's support agent, with tools that misbehave on purpose.

The MCP server is the example's, plus tools that act and then lose their reply (the
server process dies before answering), that hang after acting (for a test to kill the
worker there), and a read-only one that dies mid-call once. The function tools are
the example's refund and one that acts and then fails to report.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path

from mcp.types import ToolAnnotations
from temporalio import activity, workflow

from examples.openai_agents.notes_server import _append, count_notes, server

with workflow.unsafe.imports_passed_through():
    from agents import Agent, Runner
    from temporalio.contrib.openai_agents.workflow import activity_as_tool, temporal_mcp_server

    from examples.openai_agents.activities import issue_refund


def _marker(name: str) -> Path:
    return Path(os.environ["SUPPORT_DIR"]) / name


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False))
def add_note_and_crash(ticket: str, text: str) -> str:
    """Adds the note, then the server dies before it answers: the reply is lost."""
    _append(f"{ticket}: {text}")
    os._exit(1)


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False))
def add_note_and_hang(ticket: str, text: str) -> str:
    """Adds the note, says so in a marker file, and never answers (while its worker lives:
    the MCP client starts the server in a session of its own, which a kill of the
    worker's process group does not reach)."""
    worker = os.getppid()
    _append(f"{ticket}: {text}")
    _marker("acted").write_text("yes")
    while os.getppid() == worker:
        time.sleep(0.2)
    os._exit(0)


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def count_notes_crashing_once(ticket: str) -> int:
    """Reads, but the first call (while the marker exists) dies mid-call."""
    marker = _marker("crash-once")
    if marker.exists():
        marker.unlink()
        os._exit(1)
    return count_notes(ticket)


@activity.defn
async def refund_and_lose_reply(order: str, cents: int) -> str:
    """Refunds, then the connection to the caller drops: the effect happened."""
    await issue_refund(order, cents)
    raise ConnectionResetError("the payment service hung up after taking the refund")


TOOLS = [issue_refund, refund_and_lose_reply]


@workflow.defn
class LedgeredSupportWorkflow:
    @workflow.run
    async def run(self, prompt: str) -> str:
        timeout = timedelta(seconds=20)
        agent = Agent(
            name="Support",
            instructions="Use the tools, then answer.",
            tools=[activity_as_tool(tool, start_to_close_timeout=timeout) for tool in TOOLS],
            mcp_servers=[
                temporal_mcp_server(
                    "notes",
                    activity_config=workflow.ActivityConfig(
                        start_to_close_timeout=timeout, heartbeat_timeout=timedelta(seconds=2)
                    ),
                )
            ],
        )
        result = await Runner.run(agent, prompt)
        return str(result.final_output)


if __name__ == "__main__":
    server.run("stdio")
