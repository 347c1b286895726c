"""The support agent and its tools (which pydantic-ai runs as activities): a scripted
model, a refund tool, and the MCP notes server.
The model is scripted (no network, no API key): the prompt is its script, one tool call
per line (``tool_name {"json": "arguments"}``), as in ``examples/openai_agents``. Put
``'openai:gpt-5'`` or any model in its place for a real one. The tools write to the
folder named by ``SUPPORT_DIR`` (default: ``temporal-ledger-examples`` in the system's
temporary directory, never the repository: see ``examples.work_dir``).
"""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from fastmcp.client.transports import StdioTransport
from pydantic_ai import Agent
from pydantic_ai.durable_exec.temporal import TemporalDurability
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from examples import lose_the_reply_if_asked, work_dir

ROOT = Path(__file__).resolve().parent.parent.parent
SUPPORT_DIR = work_dir()


def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Asks for the prompt's tool calls in order, then answers with what they returned."""
    parts = [part for message in messages for part in getattr(message, "parts", [])]
    prompt = next(str(p.content) for p in parts if isinstance(p, UserPromptPart))
    returned = [p for p in parts if isinstance(p, ToolReturnPart)]
    calls = [line.strip().partition(" ") for line in prompt.splitlines() if line.strip()]
    if len(returned) < len(calls):
        name, _, arguments = calls[len(returned)]
        call = ToolCallPart(name, json.loads(arguments or "{}"), tool_call_id=f"c{len(returned)}")
        return ModelResponse(parts=[call])
    return ModelResponse(
        parts=[TextPart("done: " + " | ".join(_text(p.content) for p in returned))]
    )


def _text(content: Any) -> str:
    return " ".join(map(str, content)) if isinstance(content, list) else str(content)


notes = MCPToolset(
    StdioTransport(
        command=sys.executable,
        args=["-m", "examples.notes_server"],
        env={**os.environ, "SUPPORT_DIR": str(SUPPORT_DIR)},
        cwd=str(ROOT),
    ),
    id="notes",
    # MCPToolset hands a lost connection to the model as a retry by default, and the
    # model then calls the tool again as a new call. Raised, it fails the activity, and
    # the ledger parks the call for an operator instead.
    tool_error_behavior="error",
)

agent = Agent(
    FunctionModel(scripted),
    name="support",
    toolsets=[notes],
    capabilities=[
        TemporalDurability(activity_config={"start_to_close_timeout": timedelta(seconds=30)})
    ],
)


@agent.tool_plain
async def issue_refund(order: str, cents: int) -> str:
    """Refund an order (appends the refund to refunds.jsonl)."""
    SUPPORT_DIR.mkdir(parents=True, exist_ok=True)
    with (SUPPORT_DIR / "refunds.jsonl").open("a", encoding="utf-8") as handle:
        handle.write(json.dumps({"order": order, "cents": cents}) + "\n")
    lose_the_reply_if_asked()
    return f"refunded {cents} cents on {order}"
