"""The crash matrix's tools, one per way of calling a tool, and its worker process.

Every tool appends its cell's line (``tests.crash_points.act``): a ``@tool`` for
``run_tool``, a retry-safe ``@tool`` whose far side dedupes by the key, a plain activity
ledgered by pattern, an OpenAI Agents ``activity_as_tool`` activity, the MCP server
``tests.crash_mcp`` for the three agent frameworks, a pydantic-ai function tool, a
Google ADK ``activity_as_tool`` activity and a LangGraph tool call in a ``ToolNode``
(``tests.crash_graph``). ``CrashPoints`` (``tests.crash_worker``) is a Temporal activity
interceptor put on the worker outside the ledger's, so it sees a tool call before the
ledger claims its key (or a retry-safe tool acts) and its result after the ledger
recorded it. Strands' ways run in a worker of their own (``tests.crash_tools_strands``),
in .venv-strands.

    python -m tests.crash_tools ADDRESS LEDGER_URL TASK_QUEUE_PREFIX

runs one worker per framework (task queues ``PREFIX-plain``, ``PREFIX-oai``,
``PREFIX-pai``, ``PREFIX-adk``, ``PREFIX-lg``), each with its plugin's own pool on the one ledger,
stopping calls where ``CRASH_ARM`` says.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from agents.mcp import MCPServerStdio
from fastmcp.client.transports import StdioTransport
from google.adk.models import BaseLlm, LLMRegistry, LlmRequest, LlmResponse
from google.adk.tools.mcp_tool import McpToolset, StdioConnectionParams
from google.genai import types
from mcp import StdioServerParameters
from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai.durable_exec.temporal import PydanticAIPlugin, TemporalDurability
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.models.function import FunctionModel
from temporal_ledger.activities import LedgerOptions, LedgerPlugin, tool, tool_context
from temporal_ledger.activities import google_adk as ledger_google_adk
from temporal_ledger.activities import langgraph as ledger_langgraph
from temporal_ledger.activities import openai_agents as ledger_openai
from temporal_ledger.activities import pydantic_ai as ledger_pydantic_ai
from temporalio import activity
from temporalio.client import Client
from temporalio.google_adk import GoogleAdkPlugin, TemporalMcpToolSetProvider
from temporalio.langgraph import LangGraphPlugin
from temporalio.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin
from temporalio.worker import Worker

from examples.openai_agents.model import ScriptedProvider
from examples.pydantic_ai.activities import scripted
from tests.crash_graph import CRASH_GRAPH, TOOL_NODE_ACTIVITY, builder
from tests.crash_points import act
from tests.crash_worker import (
    HEARTBEAT,
    HEARTBEAT_THROTTLE,
    LEASE,
    POLICY,
    START_TO_CLOSE,
    STICKY_TIMEOUT,
    CrashPoints,
)

ROOT = Path(__file__).resolve().parent.parent
AGENT_NAME = "crash_agent"


class Cell(BaseModel):
    cell: str


class Appended(BaseModel):
    text: str


# 1. run_tool: a @tool.
@tool(capability="files.append")
async def crash_append(arg: Cell) -> Appended:
    """Append the cell's line to its file."""
    return Appended(text=await act(arg.cell))


# 1b. run_tool: a retry-safe @tool, whose far side dedupes by the key: it acts first and
# the ledger records its request and outcome in one write (no claim, no started marker).
@tool(capability="files.append_once", retry_safe=True)
async def crash_safe_append(arg: Cell) -> Appended:
    """Append the cell's line to its file, once per key."""
    return Appended(text=await act(arg.cell, key=tool_context().key))


# 2. A plain activity, ledgered by pattern (LedgerPlugin(ledger_activities=[...])).
@activity.defn
async def crash_generic_append(arg: Cell) -> str:
    """Append the cell's line to its file."""
    return await act(arg.cell)


# 3. An OpenAI Agents tool: an activity the agent calls through activity_as_tool.
@activity.defn
async def crash_oai_append(cell: str) -> str:
    """Append the cell's line to its file."""
    return await act(cell)


def _mcp_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


# 4. The OpenAI Agents MCP server (its call-tool activity).
def notes_server() -> MCPServerStdio:
    return MCPServerStdio(
        params={
            "command": sys.executable,
            "args": ["-m", "tests.crash_mcp"],
            "env": _mcp_env(),
            "cwd": str(ROOT),
        },
        name="notes",
        cache_tools_list=True,
    )


# 5 and 6. A pydantic-ai agent with a function tool and the same MCP server.
notes = MCPToolset(
    StdioTransport(
        command=sys.executable, args=["-m", "tests.crash_mcp"], env=_mcp_env(), cwd=str(ROOT)
    ),
    id="notes",
    tool_error_behavior="error",  # a lost connection fails the call (and parks it)
)
agent = Agent(
    FunctionModel(scripted),
    name=AGENT_NAME,
    toolsets=[notes],
    capabilities=[
        TemporalDurability(
            activity_config={
                "start_to_close_timeout": START_TO_CLOSE,
                "heartbeat_timeout": HEARTBEAT,
            }
        )
    ],
)


@agent.tool_plain
async def append_line(cell: str) -> str:
    """Append the cell's line to its file."""
    return await act(cell)


# 7 and 8. A Google ADK agent: an activity_as_tool activity and the same MCP server as a
# TemporalMcpToolSet (its call-tool activity). The model is scripted like the others'.
ADK_MODEL = "crash-adk"
ADK_TOOLSET = "crash-notes"


class CrashLlm(BaseLlm):
    """Calls the tool the prompt names (``tool {"cell": ...}``), then answers
    ``done: <what it returned>``."""

    @classmethod
    def supported_models(cls) -> list[str]:
        return [ADK_MODEL]

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        parts = [part for content in llm_request.contents for part in content.parts or []]
        responses = [part.function_response for part in parts if part.function_response]
        if responses:
            answer: Any = responses[-1].response
            answer = answer.get("result", answer) if isinstance(answer, dict) else answer
            if isinstance(answer, dict) and isinstance(answer.get("content"), list):
                answer = answer["content"][0].get("text")
            reply = types.Part(text=f"done: {answer}")
        else:
            prompt = next(part.text for part in parts if part.text)
            tool, arguments = prompt.split(" ", 1)
            reply = types.Part(
                function_call=types.FunctionCall(name=tool, args=json.loads(arguments))
            )
        yield LlmResponse(content=types.Content(role="model", parts=[reply]))


LLMRegistry.register(CrashLlm)


@activity.defn
async def crash_adk_append(cell: str) -> str:
    """Append the cell's line to its file."""
    return await act(cell)


def adk_notes(_: Any = None) -> McpToolset:
    return McpToolset(
        connection_params=StdioConnectionParams(
            server_params=StdioServerParameters(
                command=sys.executable,
                args=["-m", "tests.crash_mcp"],
                env=_mcp_env(),
                cwd=str(ROOT),
            ),
            timeout=START_TO_CLOSE.total_seconds(),
        )
    )


#: The activities that call a tool, one per way (not the model calls, not tool lists).
TOOL_ACTIVITIES = (
    "crash_append",
    "crash_safe_append",
    "crash_generic_append",
    "crash_oai_append",
    "temporalio.mcp.notes.call-tool",
    f"agent__{AGENT_NAME}__*__call_tool",
    "crash_adk_append",
    f"{ADK_TOOLSET}-call-tool",
    TOOL_NODE_ACTIVITY,
)


async def main(address: str, ledger_url: str, prefix: str) -> None:
    from tests.crash_workflows import (
        CrashAdkWorkflow,
        CrashGenericWorkflow,
        CrashLangGraphWorkflow,
        CrashOpenAIWorkflow,
        CrashPydanticWorkflow,
        CrashRetrySafeWorkflow,
        CrashRunToolWorkflow,
    )

    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    plain = await Client.connect(
        address,
        plugins=[
            LedgerPlugin(
                ledger_url,
                policy=POLICY,
                options=LedgerOptions(lease=LEASE),
                ledger_activities=["crash_generic_append"],
            )
        ],
    )
    oai = await Client.connect(
        address,
        plugins=[
            OpenAIAgentsPlugin(
                model_provider=ScriptedProvider(),
                model_params=ModelActivityParameters(start_to_close_timeout=START_TO_CLOSE),
                mcp_servers={"notes": notes_server},
            ),
            LedgerPlugin(
                ledger_url,
                policy=POLICY,
                options=LedgerOptions(lease=LEASE),
                ledger_activities=ledger_openai.activity_rules(tools=[crash_oai_append]),
            ),
        ],
    )
    pai = await Client.connect(
        address,
        plugins=[
            PydanticAIPlugin(),
            LedgerPlugin(
                ledger_url,
                policy=POLICY,
                options=LedgerOptions(lease=LEASE),
                ledger_activities=ledger_pydantic_ai.activity_rules(AGENT_NAME),
            ),
        ],
    )
    adk = await Client.connect(
        address,
        plugins=[
            GoogleAdkPlugin(toolset_providers=[TemporalMcpToolSetProvider(ADK_TOOLSET, adk_notes)]),
            LedgerPlugin(
                ledger_url,
                policy=POLICY,
                options=LedgerOptions(lease=LEASE),
                ledger_activities=ledger_google_adk.activity_rules(tools=[crash_adk_append]),
            ),
        ],
    )
    lg = await Client.connect(
        address,
        plugins=[
            LangGraphPlugin(
                graphs={
                    CRASH_GRAPH: builder(
                        {"start_to_close_timeout": START_TO_CLOSE, "heartbeat_timeout": HEARTBEAT}
                    )
                }
            ),
            LedgerPlugin(
                ledger_url,
                policy=POLICY,
                options=LedgerOptions(lease=LEASE),
                ledger_activities=ledger_langgraph.activity_rules(
                    CRASH_GRAPH, model_nodes=["model"], tool_nodes=["tools"], per_call=True
                ),
            ),
        ],
    )
    # A dead worker's cached runs go to another worker after STICKY_TIMEOUT.
    common: dict[str, Any] = dict(
        interceptors=[CrashPoints(TOOL_ACTIVITIES)],
        sticky_queue_schedule_to_start_timeout=STICKY_TIMEOUT,
        max_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
    )
    async with (
        Worker(
            plain,
            task_queue=f"{prefix}-plain",
            workflows=[CrashRunToolWorkflow, CrashRetrySafeWorkflow, CrashGenericWorkflow],
            activities=[crash_append, crash_safe_append, crash_generic_append],
            **common,
        ),
        Worker(
            oai,
            task_queue=f"{prefix}-oai",
            workflows=[CrashOpenAIWorkflow],
            activities=[crash_oai_append],
            **common,
        ),
        Worker(pai, task_queue=f"{prefix}-pai", workflows=[CrashPydanticWorkflow], **common),
        Worker(
            adk,
            task_queue=f"{prefix}-adk",
            workflows=[CrashAdkWorkflow],
            activities=[crash_adk_append],
            **common,
        ),
        Worker(lg, task_queue=f"{prefix}-lg", workflows=[CrashLangGraphWorkflow], **common),
    ):
        print("WORKER READY", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
