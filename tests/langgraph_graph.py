"""A LangGraph graph with a scripted chat model and a file-appending tool, for tests.

Its own module so the workflow sandbox imports little. The model node and the tool node
run as activities on the host, where the counters below are the truth about what
happened. The scripted model gives every tool call a fresh id, as a real model does:
asked again, it asks for a call with another id.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any, TypedDict

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from temporalio import workflow
from temporalio.common import RetryPolicy

GRAPH_NAME = "ledger_test_graph"

#: Model calls, by prompt (each test uses its own prompt).
MODEL_CALLS: dict[str, int] = {}
#: The tool call ids the tool node ran, by prompt.
TOOL_CALL_IDS: dict[str, list[str]] = {}


class State(TypedDict, total=False):
    prompt: str
    path: str
    tool_calls: list[dict[str, Any]]
    results: list[str]
    answer: str


@tool
def append_line(path: str, line: str) -> str:
    """Append a line to the file at ``path`` (the effect the ledger protects)."""
    target = Path(path)
    with target.open("a") as handle:
        handle.write(line + "\n")
    if "explode" in line:
        # Acted, then failed: the effect happened but the attempt reports an error.
        raise RuntimeError("connection reset after the write")
    return f"appended {line!r} (line {len(target.read_text().splitlines())})"


def _reply(state: State) -> AIMessage:
    prompt = state["prompt"]
    if not state.get("results"):
        call = {
            "name": "append_line",
            "args": {"path": state["path"], "line": f"line for {prompt}"},
            "id": f"call_{uuid.uuid4().hex[:12]}",
            "type": "tool_call",
        }
        return AIMessage(content="", tool_calls=[call])  # type: ignore[list-item]
    return AIMessage(content=f"done: {state['results'][-1]}")


async def model(state: State) -> State:
    """Ask the scripted chat model; its tool calls (with their ids) go into the state."""
    prompt = state["prompt"]
    MODEL_CALLS[prompt] = MODEL_CALLS.get(prompt, 0) + 1
    chat = GenericFakeChatModel(messages=iter([_reply(state)]))
    reply = await chat.ainvoke(prompt)
    assert isinstance(reply, AIMessage)
    if reply.tool_calls:
        return {"tool_calls": [dict(call) for call in reply.tool_calls]}
    return {"tool_calls": [], "answer": str(reply.content)}


async def tools(state: State) -> State:
    """Run the tool calls the model asked for, by their ids."""
    results = list(state.get("results") or [])
    for call in state.get("tool_calls") or []:
        TOOL_CALL_IDS.setdefault(state["prompt"], []).append(call["id"])
        message = await append_line.ainvoke({**call, "type": "tool_call"})
        results.append(str(message.content))
    return {"tool_calls": [], "results": results}


async def route(state: State) -> str:
    return "tools" if state.get("tool_calls") else END


_OPTIONS: dict[str, Any] = {
    "execute_in": "activity",
    "start_to_close_timeout": timedelta(seconds=20),
    "retry_policy": RetryPolicy(
        initial_interval=timedelta(milliseconds=100), maximum_interval=timedelta(seconds=1)
    ),
}


def builder() -> StateGraph[Any, Any, Any, Any]:
    """The graph, new each time: the plugin wraps the nodes of the builder it is given."""
    graph: StateGraph[Any, Any, Any, Any] = StateGraph(State)
    graph.add_node("model", model, metadata=dict(_OPTIONS))
    graph.add_node("tools", tools, metadata=dict(_OPTIONS))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", route, ["tools", END])
    graph.add_edge("tools", "model")
    return graph


@workflow.defn
class LedgeredGraphWorkflow:
    @workflow.run
    async def run(self, prompt: str, path: str) -> str:
        from temporalio.langgraph import graph

        app = graph(GRAPH_NAME).compile()
        final = await app.ainvoke({"prompt": prompt, "path": path, "results": []})
        return str(final["answer"])
