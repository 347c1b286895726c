"""The support agent's graph, whose nodes temporalio-langgraph runs as activities: a
scripted model node, and one node per effectful tool (refund, note).

The model is scripted (no network, no API key): the prompt is its script, one tool call
per line (``tool_name {"json": "arguments"}``), as in ``examples/pydantic_ai``; it is a
LangChain chat model (``GenericFakeChatModel``), so any chat model with tools bound (for
example ``init_chat_model("openai:gpt-5").bind_tools([issue_refund, add_note])``) can take
its place. Each effectful tool has a node of its own, and each node runs its tool calls
with LangGraph's ``ToolNode`` and the ledger's ``ledger_tool_calls``, so every tool call
has a ledger key of its own (the node's key and the call's id): an unknown effect parks
one tool call, not a batch (docs/agents.md, LangGraph); ``builder(ledgered=False)``
leaves the ledger out (the worker's ``--no-ledger``). The tools write to the folder
named by ``SUPPORT_DIR`` (default: ``temporal-ledger-examples`` in the system's temporary
directory, never the repository: see ``examples.work_dir``); ``add_note`` appends to the
same ``notes.txt`` as the MCP notes server of the other two examples
(``examples.notes_server``), in the same form.
"""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from typing import Any, TypedDict

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.prebuilt import ToolNode
from temporal_ledger.activities.langgraph import ledger_tool_calls, ledger_tool_calls_sync
from temporalio.common import RetryPolicy

from examples import lose_the_reply_if_asked, work_dir

#: The name the graph is registered under (``LangGraphPlugin(graphs=...)``); its nodes'
#: activities are ``support.agent``, ``support.issue_refund`` and ``support.add_note``.
GRAPH = "support"
MODEL_NODE = "agent"


class State(TypedDict, total=False):
    prompt: str
    #: The tool call the model asked for last (with the id it chose), or none.
    tool_calls: list[dict[str, Any]]
    #: What the tools returned, in order.
    results: list[str]
    answer: str


@tool
def issue_refund(order: str, cents: int) -> str:
    """Refund an order (appends the refund to refunds.jsonl)."""
    folder = work_dir()
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "refunds.jsonl").open("a", encoding="utf-8") as handle:
        handle.write(json.dumps({"order": order, "cents": cents}) + "\n")
    lose_the_reply_if_asked()
    return f"refunded {cents} cents on {order}"


@tool
def add_note(ticket: str, text: str) -> str:
    """Add a note to a ticket (appends it to notes.txt)."""
    path = work_dir() / "notes.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        handle.write(f"{ticket}: {text}\n")
    return f"note {len(path.read_text(encoding='utf-8').splitlines())} on {ticket}"


TOOLS = {t.name: t for t in (issue_refund, add_note)}


def scripted(state: State) -> AIMessage:
    """The prompt's next tool call (one per turn, with a fresh id as a real model gives),
    then an answer with what the tools returned."""
    calls = [line.strip().partition(" ") for line in state["prompt"].splitlines() if line.strip()]
    returned = state.get("results") or []
    if len(returned) < len(calls):
        name, _, arguments = calls[len(returned)]
        call = {
            "name": name,
            "args": json.loads(arguments or "{}"),
            "id": f"call_{uuid.uuid4().hex[:12]}",
            "type": "tool_call",
        }
        return AIMessage(content="", tool_calls=[call])
    return AIMessage(content="done: " + " | ".join(returned))


async def agent(state: State) -> State:
    """Ask the model; the tool call it chose (with its id) goes into the state."""
    chat = GenericFakeChatModel(messages=iter([scripted(state)]))
    reply = await chat.ainvoke(state["prompt"])
    assert isinstance(reply, AIMessage)
    if reply.tool_calls:
        return {"tool_calls": [dict(call) for call in reply.tool_calls]}
    return {"tool_calls": [], "answer": str(reply.content)}


#: Runs each tool call through the ledger under a key of its own (the tool nodes are
#: listed with ``activity_rules(..., per_call=True)``).
TOOL_NODE = ToolNode(
    list(TOOLS.values()),
    awrap_tool_call=ledger_tool_calls,
    wrap_tool_call=ledger_tool_calls_sync,
)
#: Runs the tool calls as they are, for the worker's ``--no-ledger``: ``ledger_tool_calls``
#: refuses to run outside a ledgered node.
UNLEDGERED_TOOL_NODE = ToolNode(list(TOOLS.values()))


async def _run_tools(state: State) -> State:
    """Run the tool calls the model asked for with ``TOOL_NODE``."""
    return await _tools_ran(TOOL_NODE, state)


async def _run_tools_unledgered(state: State) -> State:
    """Run the tool calls the model asked for with ``UNLEDGERED_TOOL_NODE``."""
    return await _tools_ran(UNLEDGERED_TOOL_NODE, state)


async def _tools_ran(tools: ToolNode, state: State) -> State:
    """The state after ``tools`` ran the model's tool calls. The calls cross the activity
    boundary as dicts, which a ``ToolNode`` as the graph's node would not take
    (docs/agents.md), so the node hands it the model's message rebuilt from them. (The
    nodes are functions of the module, not closures: temporalio-langgraph names a node's
    task by its module and qualified name.)"""
    asked = AIMessage(content="", tool_calls=state.get("tool_calls") or [])
    messages = await tools.ainvoke([asked])
    results = list(state.get("results") or [])
    results.extend(str(message.content) for message in messages)
    return {"tool_calls": [], "results": results}


async def route(state: State) -> str:
    """To the node of the tool the model asked for, or the end (runs in the workflow)."""
    calls = state.get("tool_calls") or []
    return calls[0]["name"] if calls else END


_OPTIONS: dict[str, Any] = {
    "execute_in": "activity",
    "start_to_close_timeout": timedelta(seconds=30),
    "retry_policy": RetryPolicy(maximum_interval=timedelta(seconds=5)),
}


def builder(*, ledgered: bool = True) -> StateGraph[Any, Any, Any, Any]:
    """The graph, new each time: ``LangGraphPlugin`` wraps the nodes of the builder it is
    given. ``agent`` asks the model; ``issue_refund`` and ``add_note`` each run their one
    tool and go back to it, through the ledger unless ``ledgered`` is false (the worker's
    ``--no-ledger``)."""
    graph: StateGraph[Any, Any, Any, Any] = StateGraph(State)
    graph.add_node(MODEL_NODE, agent, metadata=dict(_OPTIONS))
    run = _run_tools if ledgered else _run_tools_unledgered
    for name in TOOLS:
        graph.add_node(name, run, metadata=dict(_OPTIONS))
        graph.add_edge(name, MODEL_NODE)
    graph.add_edge(START, MODEL_NODE)
    graph.add_conditional_edges(MODEL_NODE, route, [*TOOLS, END])
    return graph
