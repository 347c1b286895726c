"""The scripted ten-turn agent of ``agent_overhead.py`` on each agent framework.

One agent per framework (the OpenAI Agents SDK's Temporal integration, pydantic-ai's
``TemporalDurability``, Google ADK's ``temporalio-google-adk``, and a LangGraph graph on
``temporalio-langgraph``), each with one
function tool, ``append_line(path, line)``, that
appends a line to a file with the same function as the ``run_tool`` arm's ``@tool``
(``examples.plan``'s write + flush + fsync, on a thread). Their models are the examples'
scripted ones: the prompt is the script, one ``append_line {json}`` line per tool call,
one call per turn, then an answer. Nothing here knows about the ledger: the benchmark
runs the same workflows with and without the ledger's plugin.

``agent_overhead.py`` passes this module through the workflow sandbox, so its
module-level work (imports, building the pydantic-ai agent) runs once, outside it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, TypedDict

from agents import Agent as OpenAIAgent
from agents import Runner
from google.adk.agents import Agent as AdkAgent
from google.adk.runners import Runner as AdkRunner
from google.adk.sessions import InMemorySessionService
from google.genai import types
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.tools import tool as langchain_tool
from langgraph.graph import END, START, StateGraph
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.durable_exec.temporal import PydanticAIWorkflow, TemporalDurability
from pydantic_ai.models.function import FunctionModel
from temporalio import activity, workflow
from temporalio.google_adk import TemporalModel
from temporalio.google_adk.workflow import activity_as_tool as adk_activity_as_tool
from temporalio.langgraph import graph
from temporalio.openai_agents.workflow import activity_as_tool

from examples.google_adk.activities import MODEL as ADK_MODEL
from examples.langgraph.activities import scripted as scripted_reply
from examples.plan.activities import _append
from examples.pydantic_ai.activities import scripted

TOOL = "append_line"
#: The tool activities' timeout, the same on both frameworks.
START_TO_CLOSE = timedelta(minutes=5)
#: The workflow types (the ledger's performers).
OPENAI_WORKFLOW = "BenchOpenAIAgent"
PYDANTIC_WORKFLOW = "BenchPydanticAgent"
LANGGRAPH_WORKFLOW = "BenchLangGraphAgent"
#: The graph's registered name and its model node: activities ``bench_graph.model`` and
#: ``bench_graph.append_line``.
GRAPH = "bench_graph"
MODEL_NODE = "model"
ADK_WORKFLOW = "BenchAdkAgent"


def prompt(path: str, turns: int) -> str:
    """The scripted models' script: ``turns`` calls of ``append_line``, one per line."""
    return "\n".join(
        f"{TOOL} {json.dumps({'path': path, 'line': f'line {n}'})}" for n in range(turns)
    )


async def _append_line(path: str, line: str) -> str:
    lines = await asyncio.to_thread(_append, Path(path), line)
    return f"{path} has {lines} lines"


# -- the OpenAI Agents SDK: the tool is an activity the agent calls through activity_as_tool


@activity.defn(name=TOOL)
async def append_line(path: str, line: str) -> str:
    """Append one line to a file."""
    return await _append_line(path, line)


@workflow.defn(name=OPENAI_WORKFLOW)
class OpenAIAgentWorkflow:
    """One ``Runner.run`` of an agent whose only tool is ``append_line``."""

    @workflow.run
    async def run(self, script: str, max_turns: int) -> str:
        agent = OpenAIAgent(
            name="Bench",
            instructions="Call the tools the prompt lists, one per turn, then answer.",
            tools=[activity_as_tool(append_line, start_to_close_timeout=START_TO_CLOSE)],
        )
        result = await Runner.run(agent, script, max_turns=max_turns)
        return str(result.final_output)


OPENAI_ACTIVITIES: Sequence[object] = (append_line,)


# -- pydantic-ai: the tool is the agent's own; TemporalDurability runs it as an activity

pydantic_agent = PydanticAgent(
    FunctionModel(scripted),
    name="bench",
    capabilities=[TemporalDurability(activity_config={"start_to_close_timeout": START_TO_CLOSE})],
)


@pydantic_agent.tool_plain(name=TOOL)
async def _pydantic_append_line(path: str, line: str) -> str:
    """Append one line to a file."""
    return await _append_line(path, line)


@workflow.defn(name=PYDANTIC_WORKFLOW)
class PydanticAgentWorkflow(PydanticAIWorkflow):
    """One ``agent.run`` of an agent whose only tool is ``append_line``."""

    __pydantic_ai_agents__ = [pydantic_agent]

    @workflow.run
    async def run(self, script: str, max_turns: int) -> str:
        del max_turns  # pydantic-ai's default request limit (50) is enough
        result = await pydantic_agent.run(script)
        return result.output


# -- LangGraph: a model node and a tool node, each an activity of temporalio-langgraph


class GraphState(TypedDict, total=False):
    prompt: str
    tool_calls: list[dict[str, Any]]
    results: list[str]
    answer: str


@langchain_tool(TOOL)
async def _graph_append_line(path: str, line: str) -> str:
    """Append one line to a file."""
    return await _append_line(path, line)


async def _graph_model(state: GraphState) -> GraphState:
    """The LangGraph example's scripted chat model: the prompt's next call, or the answer."""
    chat = GenericFakeChatModel(messages=iter([scripted_reply(state)]))  # type: ignore[arg-type]
    reply = await chat.ainvoke(state["prompt"])
    assert isinstance(reply, AIMessage)
    if reply.tool_calls:
        return {"tool_calls": [dict(call) for call in reply.tool_calls]}
    return {"tool_calls": [], "answer": str(reply.content)}


async def _graph_tools(state: GraphState) -> GraphState:
    results = list(state.get("results") or [])
    for call in state.get("tool_calls") or []:
        message = await _graph_append_line.ainvoke({**call, "type": "tool_call"})
        results.append(str(message.content))
    return {"tool_calls": [], "results": results}


async def _graph_route(state: GraphState) -> str:
    return TOOL if state.get("tool_calls") else END


def graph_builder() -> StateGraph[Any, Any, Any, Any]:
    """The graph, new for each plugin (``LangGraphPlugin`` wraps the builder's nodes)."""
    options: dict[str, Any] = {"execute_in": "activity", "start_to_close_timeout": START_TO_CLOSE}
    builder: StateGraph[Any, Any, Any, Any] = StateGraph(GraphState)
    builder.add_node(MODEL_NODE, _graph_model, metadata=dict(options))
    builder.add_node(TOOL, _graph_tools, metadata=dict(options))
    builder.add_edge(START, MODEL_NODE)
    builder.add_conditional_edges(MODEL_NODE, _graph_route, [TOOL, END])
    builder.add_edge(TOOL, MODEL_NODE)
    return builder


@workflow.defn(name=LANGGRAPH_WORKFLOW)
class LangGraphAgentWorkflow:
    """One ``ainvoke`` of the graph registered as ``bench_graph``."""

    @workflow.run
    async def run(self, script: str, max_turns: int) -> str:
        app = graph(GRAPH).compile()
        # Every node is a step: max_turns model steps and one tool step fewer.
        config: Any = {"recursion_limit": 2 * max_turns + 1}
        final = await app.ainvoke({"prompt": script, "results": []}, config=config)
        return str(final["answer"])


# -- Google ADK: the tool is an activity the agent calls through ADK's activity_as_tool,
# the model the example's scripted BaseLlm (registered with ADK on import), asked in
# TemporalModel's invoke_model activity


@workflow.defn(name=ADK_WORKFLOW)
class AdkAgentWorkflow:
    """One ``Runner.run_async`` of an agent whose only tool is ``append_line``."""

    @workflow.run
    async def run(self, script: str, max_turns: int) -> str:
        del max_turns  # ADK's default limit (500 model calls) is enough
        agent = AdkAgent(
            name="bench",
            model=TemporalModel(ADK_MODEL, {"start_to_close_timeout": START_TO_CLOSE}),
            instruction="Call the tools the prompt lists, one per turn, then answer.",
            tools=[adk_activity_as_tool(append_line, start_to_close_timeout=START_TO_CLOSE)],
        )
        runner = AdkRunner(agent=agent, app_name="bench", session_service=InMemorySessionService())
        session = await runner.session_service.create_session(app_name="bench", user_id="bench")
        answer = ""
        async for event in runner.run_async(
            user_id="bench",
            session_id=session.id,
            new_message=types.Content(role="user", parts=[types.Part(text=script)]),
        ):
            for part in (event.content.parts or []) if event.content else []:
                if part.text:
                    answer = part.text
        return answer


ADK_ACTIVITIES: Sequence[object] = (append_line,)
