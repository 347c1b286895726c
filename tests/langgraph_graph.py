"""A LangGraph graph with a scripted chat model and a file-appending tool, for tests.

Its own module so the workflow sandbox imports little. The model node and the tool node
run as activities on the host, where the counters below are the truth about what
happened. The scripted model gives every tool call a fresh id, as a real model does:
asked again, it asks for a call with another id.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, TypedDict

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage, convert_to_messages
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command
from temporal_ledger.activities.langgraph import ledger_tool_calls
from temporal_ledger.ledger import NoEffect
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


def append(path: str, text: str) -> int:
    """Append ``text`` to the file at ``path`` (the effect the ledger protects); the line
    number it got."""
    target = Path(path)
    with target.open("a") as handle:
        handle.write(text + "\n")
    if "explode" in text:
        # Acted, then failed: the effect happened but the attempt reports an error.
        raise RuntimeError("connection reset after the write")
    return len(target.read_text().splitlines())


@tool
def append_line(path: str, line: str) -> str:
    """Append a line to the file at ``path`` (the effect the ledger protects)."""
    return f"appended {line!r} (line {append(path, line)})"


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
    return await _ask(state, _reply(state))


async def _ask(state: State, scripted: AIMessage) -> State:
    """Count the call and have a chat model answer ``scripted``: its tool calls, or the
    end of the run."""
    prompt = state["prompt"]
    MODEL_CALLS[prompt] = MODEL_CALLS.get(prompt, 0) + 1
    chat = GenericFakeChatModel(messages=iter([scripted]))
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


#: A node's metadata: run as an activity, quickly retried.
NODE_OPTIONS: dict[str, Any] = {
    "execute_in": "activity",
    "start_to_close_timeout": timedelta(seconds=20),
    "retry_policy": RetryPolicy(
        initial_interval=timedelta(milliseconds=100), maximum_interval=timedelta(seconds=1)
    ),
}


def builder() -> StateGraph[Any, Any, Any, Any]:
    """The graph, new each time: the plugin wraps the nodes of the builder it is given."""
    return _model_and_tools(model, tools)


def _model_and_tools(model_node: Any, tool_node: Any) -> StateGraph[Any, Any, Any, Any]:
    """A model node and a tool node, as activities, that take turns until the model
    answers."""
    graph: StateGraph[Any, Any, Any, Any] = StateGraph(State)
    graph.add_node("model", model_node, metadata=dict(NODE_OPTIONS))
    graph.add_node("tools", tool_node, metadata=dict(NODE_OPTIONS))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", route, ["tools", END])
    graph.add_edge("tools", "model")
    return graph


async def _answer(graph_name: str, prompt: str, path: str) -> str:
    """Run the registered graph ``graph_name`` (in the workflow) to its answer."""
    from temporalio.langgraph import graph

    app = graph(graph_name).compile()
    final = await app.ainvoke({"prompt": prompt, "path": path, "results": []})
    return str(final["answer"])


@workflow.defn
class LedgeredGraphWorkflow:
    @workflow.run
    async def run(self, prompt: str, path: str) -> str:
        return await _answer(GRAPH_NAME, prompt, path)


# -- one key per tool call: a ToolNode with the ledger's wrappers --------------------------

CALLS_GRAPH = "ledger_test_calls"

#: Tool node activity runs, by prompt.
NODE_RUNS: dict[str, int] = {}
#: Prompts whose flaky call has refused once (with no effect).
_REFUSED_ONCE: set[str] = set()


@tool
def flaky_append(path: str, line: str) -> str:
    """Append a line, after refusing once with no effect (a 429: nothing was done)."""
    if line not in _REFUSED_ONCE:
        _REFUSED_ONCE.add(line)
        raise NoEffect("busy: try again", retryable=True)
    return str(append_line.invoke({"path": path, "line": line}))


#: Set in a worker process (tests.langgraph_worker): a "crash" prompt's second call waits
#: here, before the ledger sees it, until the test kills the process.
HOLD = "LEDGER_TEST_LG_HOLD"


async def _held_then_ledgered(
    request: ToolCallRequest,
    execute: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
) -> ToolMessage:
    """``ledger_tool_calls``, composed with a wrapper of the app's own that stops a crash
    test's second call before it reaches the ledger."""
    held = os.environ.get(HOLD)
    line = str(request.tool_call["args"].get("line", ""))
    if held and line.startswith("B for crash"):
        Path(held).write_text(request.tool_call["id"] or "")
        await asyncio.Event().wait()  # until the process is killed
    return await ledger_tool_calls(request, execute)


_TOOL_NODE = ToolNode(
    [append_line, flaky_append],
    awrap_tool_call=_held_then_ledgered,
    wrap_tool_call=ledger_tool_calls,
)


def _two_calls(state: State) -> AIMessage:
    prompt = state["prompt"]
    if state.get("results"):
        return AIMessage(content="done: " + " | ".join(state["results"]))
    second = "flaky_append" if "flaky" in prompt else "append_line"
    calls = [
        {
            "name": name,
            "args": {"path": state["path"], "line": f"{which} for {prompt}{tail}"},
            "id": f"call_{uuid.uuid4().hex[:12]}",
            "type": "tool_call",
        }
        for name, which, tail in (
            ("append_line", "A", ""),
            # The second call acts and then fails for a "boom" prompt (a lost reply).
            (second, "B", " explode" if "boom" in prompt else ""),
        )
    ]
    return AIMessage(content="", tool_calls=calls)  # type: ignore[arg-type]


async def two_call_model(state: State) -> State:
    """The scripted model: two tool calls in one reply, then an answer."""
    return await _ask(state, _two_calls(state))


async def call_tools(state: State) -> State:
    """Run the model's tool calls with a ToolNode whose calls each have a ledger key."""
    prompt = state["prompt"]
    NODE_RUNS[prompt] = NODE_RUNS.get(prompt, 0) + 1
    asked = AIMessage(content="", tool_calls=state.get("tool_calls") or [])  # type: ignore[arg-type]
    if "sync" in prompt:
        messages = await asyncio.to_thread(_TOOL_NODE.invoke, [asked])
    else:
        messages = await _TOOL_NODE.ainvoke([asked])
    results = list(state.get("results") or [])
    results.extend(str(message.content) for message in messages)
    return {"tool_calls": [], "results": results}


def calls_builder() -> StateGraph[Any, Any, Any, Any]:
    return _model_and_tools(two_call_model, call_tools)


@workflow.defn
class ToolCallsGraphWorkflow:
    @workflow.run
    async def run(self, prompt: str, path: str) -> str:
        return await _answer(CALLS_GRAPH, prompt, path)


# -- a messages graph: LangGraph's own MessagesState, as its docs teach ---------------------

#: The graph whose tool node is the ledger's unit, and the one whose ToolNode gives each
#: call a key of its own (``ledger_tool_calls``, ``per_call=True``).
MESSAGES_GRAPH = "ledger_test_messages"
MESSAGES_CALLS_GRAPH = "ledger_test_messages_calls"

#: Lines whose append has lost its reply once (the tool acted, then failed).
_LOST_ONCE: set[str] = set()


@tool
def append_note(path: str, line: str) -> str:
    """Append a line to the file at ``path``; a line with "lose" loses its reply once."""
    target = Path(path)
    with target.open("a") as handle:
        handle.write(line + "\n")
    if "lose" in line and line not in _LOST_ONCE:
        _LOST_ONCE.add(line)
        raise RuntimeError("connection reset after the write")
    return f"appended {line!r} (line {len(target.read_text().splitlines())})"


def _asked(messages: list[Any]) -> tuple[str, str]:
    """The prompt and the file the conversation's first (human) message names."""
    text = str(messages[0].content)
    prompt, _, path = text.removeprefix("note ").partition(" in ")
    return prompt, path


def _scripted(messages: list[Any]) -> AIMessage:
    """One tool call with a fresh id, as a real model makes; after its answer, the end."""
    prompt, path = _asked(messages)
    answered = [m for m in messages if isinstance(m, ToolMessage)]
    if answered:
        return AIMessage(content=f"done: {answered[-1].content}")
    call = {
        "name": "append_note",
        "args": {"path": path, "line": f"line for {prompt}"},
        "id": f"call_{uuid.uuid4().hex[:12]}",
        "type": "tool_call",
    }
    return AIMessage(content="", tool_calls=[call])  # type: ignore[list-item]


async def agent(state: MessagesState) -> dict[str, Any]:
    """The model node: the scripted chat model reads the conversation and answers."""
    # Messages cross the activity boundary as dicts: LangGraph's conversion reads them.
    messages = convert_to_messages(state["messages"])
    prompt, _ = _asked(messages)
    MODEL_CALLS[prompt] = MODEL_CALLS.get(prompt, 0) + 1
    chat = GenericFakeChatModel(messages=iter([_scripted(messages)]))
    return {"messages": [await chat.ainvoke(messages)]}


async def note_tools(state: MessagesState) -> dict[str, Any]:
    """The tool node as the ledger's unit: a ToolNode runs the model's calls."""
    messages = convert_to_messages(state["messages"])
    prompt, _ = _asked(messages)
    NODE_RUNS[prompt] = NODE_RUNS.get(prompt, 0) + 1
    result: dict[str, Any] = await ToolNode([append_note]).ainvoke({"messages": messages})
    return result


_LEDGERED_NOTES = ToolNode(
    [append_note], awrap_tool_call=ledger_tool_calls, wrap_tool_call=ledger_tool_calls
)


async def ledgered_note_tools(state: MessagesState) -> dict[str, Any]:
    """The tool node whose ToolNode gives each call a key of its own."""
    messages = convert_to_messages(state["messages"])
    prompt, _ = _asked(messages)
    NODE_RUNS[prompt] = NODE_RUNS.get(prompt, 0) + 1
    result: dict[str, Any] = await _LEDGERED_NOTES.ainvoke({"messages": messages})
    return result


async def route_messages(state: MessagesState) -> str:
    last = state["messages"][-1]
    return "tools" if isinstance(last, AIMessage) and last.tool_calls else END


def messages_builder(*, per_call: bool = False) -> StateGraph[Any, Any, Any, Any]:
    """A model node ``agent``, a tool node ``tools``, conditional edges."""
    graph: StateGraph[Any, Any, Any, Any] = StateGraph(MessagesState)
    graph.add_node("agent", agent, metadata=dict(NODE_OPTIONS))
    graph.add_node(
        "tools", ledgered_note_tools if per_call else note_tools, metadata=dict(NODE_OPTIONS)
    )
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", route_messages, ["tools", END])
    graph.add_edge("tools", "agent")
    return graph


@workflow.defn
class MessagesGraphWorkflow:
    """Asks the graph ``graph`` to note ``prompt`` in the file ``path``."""

    @workflow.run
    async def run(self, graph: str, prompt: str, path: str) -> str:
        return await _last_message(graph, HumanMessage(f"note {prompt} in {path}"))


async def _last_message(graph: str, asked: HumanMessage) -> str:
    """Run the registered messages graph ``graph`` (in the workflow) from ``asked``; the
    text of its last message."""
    from temporalio.langgraph import graph as registered

    final = await registered(graph).compile().ainvoke({"messages": [asked]})
    return str(final["messages"][-1].content)


@workflow.defn(name="MessagesGraphWorkflow")
class RevisedMessagesGraphWorkflow:
    """The same workflow after a change of its code: its first message says more."""

    @workflow.run
    async def run(self, graph: str, prompt: str, path: str) -> str:
        return await _last_message(graph, HumanMessage(f"note {prompt} in {path} (revised)"))
