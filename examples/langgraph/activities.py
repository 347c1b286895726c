"""The support agent's graph, as LangGraph's docs teach it: a ``MessagesState``, a model
node ``agent``, a tool node ``tools`` built on LangGraph's ``ToolNode``, and a conditional
edge between them; temporalio-langgraph runs both nodes as activities.

The model is scripted (no network, no API key): the user's message is its script, one
tool call per line (``tool_name {"json": "arguments"}``), as in ``examples/pydantic_ai``;
it is a LangChain chat model (``GenericFakeChatModel``), so any chat model with tools
bound (for example ``init_chat_model("openai:gpt-5").bind_tools([issue_refund,
add_note])``) can take its place. The tool node runs the model's tool calls with a
``ToolNode`` and the ledger's ``ledger_tool_calls``, so every tool call has a ledger key of
its own (the node's key and the call's id): an unknown effect parks one tool call, not
a batch (docs/agents.md, LangGraph); ``builder(ledgered=False)`` leaves the ledger out
(the worker's ``--no-ledger``). The tools write to the folder named by ``SUPPORT_DIR``
(default: ``temporal-ledger-examples`` in the system's temporary directory, never the
repository: see ``examples.work_dir``); ``add_note`` appends to the same ``notes.txt`` as
the MCP notes server of the other two examples (``examples.notes_server``), in the same
form.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    ToolMessage,
    convert_to_messages,
)
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from temporal_ledger.activities.langgraph import ledger_tool_calls
from temporalio.common import RetryPolicy

from examples import lose_the_reply_if_asked, work_dir

#: The name the graph is registered under (``LangGraphPlugin(graphs=...)``); its nodes'
#: activities are ``support.agent`` and ``support.tools``.
GRAPH = "support"
MODEL_NODE = "agent"
TOOL_NODE = "tools"


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


TOOLS = [issue_refund, add_note]


def scripted(messages: Sequence[BaseMessage]) -> AIMessage:
    """The script's next tool call (one per turn, with a fresh id as a real model gives),
    then an answer with what the tools returned."""
    script = str(messages[0].content)
    calls = [line.strip().partition(" ") for line in script.splitlines() if line.strip()]
    returned = [str(m.content) for m in messages if isinstance(m, ToolMessage)]
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


async def agent(state: MessagesState) -> dict[str, list[AnyMessage]]:
    """Ask the model; its reply, with the tool calls it chose (and their ids), joins the
    conversation."""
    # Messages reach an activity node as dicts (docs/agents.md): LangChain rebuilds them.
    messages = convert_to_messages(state["messages"])
    chat = GenericFakeChatModel(messages=iter([scripted(messages)]))
    return {"messages": [await chat.ainvoke(messages)]}


#: Runs each tool call through the ledger under a key of its own (the tool node is
#: listed with ``activity_rules(..., per_call=True)``).
LEDGERED_TOOLS = ToolNode(
    TOOLS, awrap_tool_call=ledger_tool_calls, wrap_tool_call=ledger_tool_calls
)
#: Runs the tool calls as they are, for the worker's ``--no-ledger``: ``ledger_tool_calls``
#: refuses to run outside a ledgered node.
UNLEDGERED_TOOLS = ToolNode(TOOLS)


async def tools(state: MessagesState) -> dict[str, Any]:
    """Run the model's tool calls with ``LEDGERED_TOOLS``."""
    return await _ran(LEDGERED_TOOLS, state)


async def tools_unledgered(state: MessagesState) -> dict[str, Any]:
    """Run the model's tool calls with ``UNLEDGERED_TOOLS``."""
    return await _ran(UNLEDGERED_TOOLS, state)


async def _ran(tool_node: ToolNode, state: MessagesState) -> dict[str, Any]:
    """The ``ToolMessage`` s of the model's last tool calls. A ``ToolNode`` that is itself the
    activity node would get the messages as dicts and find no ``AIMessage`` in them
    (docs/agents.md), so the node function converts them and invokes it. (The nodes are
    functions of the module, not closures: temporalio-langgraph names a node's task by its
    module and qualified name.)"""
    result: dict[str, Any] = await tool_node.ainvoke(
        {"messages": convert_to_messages(state["messages"])}
    )
    return result


async def route(state: MessagesState) -> str:
    """To the tool node if the model asked for tools, else to the end. Routers run in the
    workflow, where they must be ``async``: LangGraph's ``tools_condition`` inside one."""
    return tools_condition(state["messages"])


_OPTIONS: dict[str, Any] = {
    "execute_in": "activity",
    "start_to_close_timeout": timedelta(seconds=30),
    "retry_policy": RetryPolicy(maximum_interval=timedelta(seconds=5)),
}


def builder(*, ledgered: bool = True) -> StateGraph[Any, Any, Any, Any]:
    """The graph, new each time: ``LangGraphPlugin`` wraps the nodes of the builder it is
    given. ``agent`` asks the model; ``tools`` runs the tool calls it asked for and goes
    back to it, through the ledger unless ``ledgered`` is false (the worker's
    ``--no-ledger``)."""
    graph: StateGraph[Any, Any, Any, Any] = StateGraph(MessagesState)
    graph.add_node(MODEL_NODE, agent, metadata=dict(_OPTIONS))
    graph.add_node(TOOL_NODE, tools if ledgered else tools_unledgered, metadata=dict(_OPTIONS))
    graph.add_edge(START, MODEL_NODE)
    graph.add_conditional_edges(MODEL_NODE, route, [TOOL_NODE, END])
    graph.add_edge(TOOL_NODE, MODEL_NODE)
    return graph
