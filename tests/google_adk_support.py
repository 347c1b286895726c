"""A Google ADK agent on Temporal for the ledger's tests: a scripted model (a ``BaseLlm``
registered with ADK, so ``TemporalModel``'s activity finds it; no API key), two tools
run with ``activity_as_tool``, and the MCP notes server (``tests.mcp_notes``) as a
``TemporalMcpToolSet``. The workflows are in ``tests.google_adk_workflows``.

The prompt is the model's script: its first line names the test run, the second the
tool to call, the third the call's arguments as JSON. Asked again with the tool's
response in the conversation, the model answers ``done: <response>``.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import AsyncGenerator
from datetime import timedelta
from pathlib import Path
from typing import Any

from google.adk.models import BaseLlm, LLMRegistry, LlmRequest, LlmResponse
from google.adk.tools.mcp_tool import McpToolset, StdioConnectionParams
from google.genai import types
from mcp import StdioServerParameters
from temporalio import activity
from temporalio.google_adk.workflow import ToolContextSnapshot

ROOT = Path(__file__).resolve().parent.parent
AGENT_NAME = "ledger_adk"
MODEL = "scripted-adk"
TOOLSET = "adk-notes"
#: The MCP notes server's folder: one per process, tests tell their lines apart by ticket.
NOTES_DIR = Path(os.environ.get("ADK_NOTES_DIR") or tempfile.mkdtemp(prefix="adk-notes-"))
#: Model calls, by the prompt's first line (each test uses its own).
MODEL_CALLS: dict[str, int] = {}
#: How long a tool may run: a lost attempt of an unledgered ADK activity (ADK sets no
#: heartbeat timeout, and only the ledgered ones get the ledger's) is noticed when this
#: runs out.
TOOL_TIMEOUT = timedelta(seconds=10)


def script(prompt: str, tool: str, **arguments: Any) -> str:
    """The prompt that makes the scripted model call ``tool`` with ``arguments``."""
    return f"{prompt}\n{tool}\n{json.dumps(arguments)}"


class ScriptedLlm(BaseLlm):
    """Calls the tool its prompt names, then answers with the tool's response."""

    @classmethod
    def supported_models(cls) -> list[str]:
        return [MODEL]

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        parts = [part for content in llm_request.contents for part in content.parts or []]
        prompt = next(part.text for part in parts if part.text)
        first, tool, arguments = prompt.splitlines()[:3]
        MODEL_CALLS[first] = MODEL_CALLS.get(first, 0) + 1
        responses = [part.function_response for part in parts if part.function_response]
        if responses:
            answer = responses[-1].response
            text = answer.get("result", answer) if isinstance(answer, dict) else answer
            if isinstance(text, dict) and isinstance(text.get("content"), list):
                text = text["content"][0].get("text")
            reply = types.Part(text=f"done: {text}")
        else:
            call = types.FunctionCall(name=tool, args=json.loads(arguments))
            reply = types.Part(function_call=call)
        yield LlmResponse(content=types.Content(role="model", parts=[reply]))


LLMRegistry.register(ScriptedLlm)


def _refunds(tool_context: ToolContextSnapshot) -> Path:
    return Path(tool_context.state["folder"]) / "refunds.jsonl"


@activity.defn
async def issue_refund(order: str, cents: int, tool_context: ToolContextSnapshot) -> str:
    """Refund an order (appends a line to refunds.jsonl in the session's folder)."""
    with _refunds(tool_context).open("a") as handle:
        handle.write(json.dumps({"order": order, "cents": cents}) + "\n")
    return f"refunded {cents} cents on {order}"


@activity.defn
async def refund_and_lose_reply(order: str, cents: int, tool_context: ToolContextSnapshot) -> str:
    """Refunds, then the connection to the caller drops: the effect happened."""
    await issue_refund(order, cents, tool_context)
    raise ConnectionResetError("the payment service hung up after taking the refund")


TOOLS = [issue_refund, refund_and_lose_reply]


def notes_toolset(_: Any = None) -> McpToolset:
    """The MCP notes server over stdio, started by ADK for each call (stateless)."""
    return McpToolset(
        connection_params=StdioConnectionParams(
            server_params=StdioServerParameters(
                command=sys.executable,
                args=["-m", "tests.mcp_notes"],
                env={**os.environ, "SUPPORT_DIR": str(NOTES_DIR), "PYTHONPATH": str(ROOT)},
                cwd=str(ROOT),
            ),
            timeout=10,
        ),
    )


def notes(ticket: str) -> list[str]:
    """The ticket's notes in the MCP server's file."""
    path = NOTES_DIR / "notes.txt"
    lines = path.read_text().splitlines() if path.exists() else []
    return [line for line in lines if line.startswith(f"{ticket}: ")]
