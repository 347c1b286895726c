"""A pydantic-ai support agent with the ``TemporalDurability`` capability: a scripted
model, function tools, and the MCP notes server (``tests.mcp_notes``) as a toolset.
Its workflow is in ``tests.pydantic_ai_workflows`` (this module is passed through).

The MCP server is started by pydantic-ai with the environment it is given here, once
per process, so its files live in one folder per process (``NOTES_DIR``; a test's worker
in another process is given the same one). Tests tell their lines apart by ticket.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from datetime import timedelta
from pathlib import Path

from fastmcp.client.transports import StdioTransport
from pydantic_ai import Agent, RunContext
from pydantic_ai.durable_exec.temporal import TemporalDurability
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import ModelMessage, ModelResponse, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from examples.pydantic_ai.activities import scripted

ROOT = Path(__file__).resolve().parent.parent
AGENT_NAME = "ledger_support"
NOTES_DIR = Path(os.environ.get("PYDANTIC_NOTES_DIR") or tempfile.mkdtemp(prefix="pai-notes-"))
#: Model calls, by the prompt's first line (each test uses its own).
MODEL_CALLS: dict[str, int] = {}


def _script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The example's scripted model (the prompt is its script), counting its calls."""
    prompt = next(
        str(part.content)
        for message in messages
        for part in getattr(message, "parts", [])
        if isinstance(part, UserPromptPart)
    )
    first = prompt.splitlines()[0]
    MODEL_CALLS[first] = MODEL_CALLS.get(first, 0) + 1
    return scripted(messages, info)


notes = MCPToolset(
    StdioTransport(
        command=sys.executable,
        args=["-m", "tests.mcp_notes"],
        env={**os.environ, "SUPPORT_DIR": str(NOTES_DIR), "PYTHONPATH": str(ROOT)},
        cwd=str(ROOT),
    ),
    id="notes",
    # By default MCPToolset hands a lost connection to the model as a retry, and the model
    # calls the tool again as a new call: a duplicate the ledger cannot tell from a real
    # retry. Raised, it fails the activity, and the ledger parks the call instead.
    tool_error_behavior="error",
)

agent = Agent(
    FunctionModel(_script),
    name=AGENT_NAME,
    deps_type=str,
    toolsets=[notes],
    capabilities=[
        TemporalDurability(
            # No heartbeat timeout, as pydantic-ai schedules its activities by default: the
            # ledger gives its ledgered ones LedgerOptions.heartbeat_timeout (5 s).
            activity_config={"start_to_close_timeout": timedelta(seconds=20)}
        )
    ],
)


@agent.tool
async def issue_refund(ctx: RunContext[str], order: str, cents: int) -> str:
    """Refund an order (appends to refunds.jsonl in the deps folder)."""
    with (Path(ctx.deps) / "refunds.jsonl").open("a") as handle:
        handle.write(json.dumps({"order": order, "cents": cents}) + "\n")
    return f"refunded {cents} cents on {order}"


@agent.tool
async def refund_and_lose_reply(ctx: RunContext[str], order: str, cents: int) -> str:
    """Refunds, then the connection to the caller drops: the effect happened."""
    await issue_refund(ctx, order, cents)
    raise ConnectionResetError("the payment service hung up after taking the refund")
