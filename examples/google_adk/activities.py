"""The support agent's model, refund tool and MCP notes server, for Google ADK on Temporal
(``temporalio-google-adk``): ``TemporalModel`` asks the model in an activity,
``activity_as_tool`` runs the refund as one, and ``TemporalMcpToolSetProvider`` the notes
server's calls.

The model is scripted (no network, no API key): a ``BaseLlm`` registered with ADK under
``MODEL``, whose script is the prompt, one tool call per line (``tool_name {"json":
"arguments"}``), as in ``examples/openai_agents``. Put ``"gemini-2.5-flash"`` or any
model ADK knows in the workflow's ``TemporalModel`` for a real one. The tools write to
the folder named by ``SUPPORT_DIR`` (default: ``temporal-ledger-examples`` in the
system's temporary directory, never the repository: see ``examples.work_dir``).

ADK's MCP tool takes no caller's ``_meta``; it sends what OpenTelemetry's propagator
injects, so the ledger puts the key in the context's baggage while a ledgered call runs
and the notes server reads it there (``ledger_key``) and dedupes by it, as for the other
examples (docs/agents.md, Google ADK).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from google.adk.models import BaseLlm, LLMRegistry
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.tools.mcp_tool import McpToolset, StdioConnectionParams
from google.genai import types
from mcp import StdioServerParameters
from temporalio import activity

from examples import lose_the_reply_if_asked, work_dir

ROOT = Path(__file__).resolve().parent.parent.parent
#: The scripted model's name, as the workflow's ``TemporalModel`` asks for it.
MODEL = "scripted-support"
#: The MCP toolset's name: its activities are ``notes-list-tools`` and ``notes-call-tool``.
NOTES = "notes"


class ScriptedLlm(BaseLlm):
    """Asks for the prompt's tool calls in order, then answers ``done: <outputs>``.

    It decides from the conversation it is given (how many tool responses it already
    holds), never from its own state, so an activity retry or a ``temporal workflow
    reset`` gets the same answer for the same turn, as a recorded real model's would be.
    """

    @classmethod
    def supported_models(cls) -> list[str]:
        return [MODEL]

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        parts = [part for content in llm_request.contents for part in content.parts or []]
        prompt = next(part.text for part in parts if part.text)
        returned = [part.function_response for part in parts if part.function_response]
        calls = [line.strip().partition(" ") for line in prompt.splitlines() if line.strip()]
        if len(returned) < len(calls):
            name, _, arguments = calls[len(returned)]
            offered = _offered(llm_request)
            if name not in offered:
                raise ValueError(f"the script asks for {name!r}; the agent offers {offered}")
            call = types.FunctionCall(name=name, args=json.loads(arguments or "{}"))
            reply = types.Part(function_call=call)
        else:
            answer = " | ".join(_text(each.response) for each in returned)
            reply = types.Part(text=f"done: {answer}")
        # No tokens counted: ADK's telemetry would warn of a response without usage.
        usage = types.GenerateContentResponseUsageMetadata(
            prompt_token_count=0, candidates_token_count=0, total_token_count=0
        )
        yield LlmResponse(content=types.Content(role="model", parts=[reply]), usage_metadata=usage)


LLMRegistry.register(ScriptedLlm)


def _offered(llm_request: LlmRequest) -> list[str]:
    """The tools' names the request declares (its ``tools_dict`` stays in the workflow)."""
    tools = llm_request.config.tools if llm_request.config else None
    return sorted(
        declaration.name or ""
        for tool in tools or []
        for declaration in getattr(tool, "function_declarations", None) or []
    )


def _text(response: Any) -> str:
    """A tool's response as the model sees it: ADK wraps a function tool's return value
    as ``{"result": ...}``; an MCP tool's is its result, ``{"content": [blocks]}``."""
    if isinstance(response, dict):
        if "result" in response:
            return str(response["result"])
        if isinstance(response.get("content"), list):
            return " ".join(str(block.get("text")) for block in response["content"])
    return str(response)


@activity.defn
async def issue_refund(order: str, cents: int) -> str:
    """Refund an order: appends the refund to ``refunds.jsonl`` in ``examples.work_dir()``
    (``$SUPPORT_DIR``, or a folder in the system's temporary directory)."""
    path = work_dir() / "refunds.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps({"order": order, "cents": cents}) + "\n")
    lose_the_reply_if_asked()
    return f"refunded {cents} cents on {order}"


def notes_toolset(_: Any = None) -> McpToolset:
    """The MCP notes server over stdio: the integration starts one for each list-tools
    or call-tool activity and closes it after (the stateless provider)."""
    return McpToolset(
        connection_params=StdioConnectionParams(
            server_params=StdioServerParameters(
                command=sys.executable,
                args=["-m", "examples.notes_server"],
                env={**os.environ, "SUPPORT_DIR": str(work_dir())},
                cwd=str(ROOT),
            ),
            timeout=10,
        ),
    )
