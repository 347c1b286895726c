"""The crash matrix's LangGraph graph: a scripted model node asks for one tool call, and a
tool node runs it through a ``ToolNode`` with ``ledger_tool_calls`` (a key per tool call).

Both nodes are activities (``crash_graph.model``, ``crash_graph.tools``); the tool call is
the cell's, ``crash_lg_append {"cell": ...}``, and its effect the cell's line.
"""

from __future__ import annotations

import uuid
from typing import Any, TypedDict

from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.prebuilt import ToolNode
from temporal_ledger.activities.langgraph import ledger_tool_calls

from tests.crash_points import act

CRASH_GRAPH = "crash_graph"
TOOL_NODE_ACTIVITY = f"{CRASH_GRAPH}.tools"


class CrashState(TypedDict, total=False):
    cell: str
    tool_calls: list[dict[str, Any]]
    results: list[str]
    answer: str


@tool
async def crash_lg_append(cell: str) -> str:
    """Append the cell's line to its file."""
    return await act(cell)


_TOOL_NODE = ToolNode(
    [crash_lg_append], awrap_tool_call=ledger_tool_calls, wrap_tool_call=ledger_tool_calls
)


async def model(state: CrashState) -> CrashState:
    """The scripted model: the cell's tool call (with a fresh id, as a model gives), then
    ``done: <what it returned>``."""
    if state.get("results"):
        return {"tool_calls": [], "answer": f"done: {state['results'][-1]}"}
    call = {
        "name": crash_lg_append.name,
        "args": {"cell": state["cell"]},
        "id": f"call_{uuid.uuid4().hex[:12]}",
        "type": "tool_call",
    }
    return {"tool_calls": [call]}


async def tools(state: CrashState) -> CrashState:
    asked = AIMessage(content="", tool_calls=state.get("tool_calls") or [])  # type: ignore[arg-type]
    messages = await _TOOL_NODE.ainvoke([asked])
    results = [*(state.get("results") or []), *(str(m.content) for m in messages)]
    return {"tool_calls": [], "results": results}


async def route(state: CrashState) -> str:
    return "tools" if state.get("tool_calls") else END


def builder(options: dict[str, Any]) -> StateGraph[Any, Any, Any, Any]:
    """The graph, its nodes run as activities with ``options`` (their metadata)."""
    graph: StateGraph[Any, Any, Any, Any] = StateGraph(CrashState)
    graph.add_node("model", model, metadata={"execute_in": "activity", **options})
    graph.add_node("tools", tools, metadata={"execute_in": "activity", **options})
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", route, ["tools", END])
    graph.add_edge("tools", "model")
    return graph
