"""A LangGraph graph and ``@tool`` steps whose calls hang or fail, for the tests of the
user's retry bounds (tests/test_retry_bounds.py).

Its own module so the workflow sandbox imports little. The nodes and tools run as
activities on the host, where the counters below are the truth about how often each
was tried. What a node or tool does is chosen by words in the prompt (each test uses a
prompt of its own): ``hang`` (wait until cancelled), ``bad`` (fail with ``ValueError``),
``stall`` (append a line, then wait until cancelled); ``checked`` picks the ``run_tool``
step with a precondition, whose read of the state hangs under ``hang``; ``unpolled``
schedules the ``run_tool`` step on a task queue no worker polls.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any, TypedDict

from langchain_core.messages import AIMessage
from langchain_core.tools import tool as lc_tool
from langgraph.graph import END, START, StateGraph
from langgraph.prebuilt import ToolNode
from pydantic import BaseModel
from temporal_ledger.activities import tool
from temporal_ledger.activities.langgraph import ledger_tool_calls
from temporal_ledger.workflows import run_tool
from temporalio import workflow
from temporalio.common import RetryPolicy

GRAPH = "bounded_graph"

#: Tries of each node or tool, by prompt.
TRIES: dict[str, int] = {}


async def _behave(prompt: str, path: str) -> None:
    TRIES[prompt] = TRIES.get(prompt, 0) + 1
    if "stall" in prompt:
        with Path(path).open("a") as handle:
            handle.write(f"line for {prompt}\n")
    if "hang" in prompt or "stall" in prompt:
        await asyncio.Event().wait()  # until Temporal's cancel reaches it
    if "bad" in prompt:
        raise ValueError(f"the model refused {prompt}")


class State(TypedDict, total=False):
    prompt: str
    path: str
    answer: str


async def model(state: State) -> State:
    """A model node (retry-safe): asks a scripted model."""
    if "tool" not in state["prompt"]:
        await _behave(state["prompt"], state["path"])
    return {"answer": f"model answered {state['prompt']}"}


async def tools(state: State) -> State:
    """A tool node (not retry-safe): appends a line."""
    await _behave(state["prompt"], state["path"])
    return {"answer": f"tool appended for {state['prompt']}"}


async def _route(state: State) -> str:
    return "tools" if "tool" in state["prompt"] else END


def builder(options: dict[str, Any]) -> StateGraph[Any, Any, Any, Any]:
    """The graph, both nodes run as activities with ``options`` in their metadata."""
    graph: StateGraph[Any, Any, Any, Any] = StateGraph(State)
    graph.add_node("model", model, metadata={"execute_in": "activity", **options})
    graph.add_node("tools", tools, metadata={"execute_in": "activity", **options})
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", _route, ["tools", END])
    graph.add_edge("tools", END)
    return graph


@workflow.defn
class BoundedGraphWorkflow:
    @workflow.run
    async def run(self, prompt: str, path: str) -> str:
        from temporalio.langgraph import graph

        final = await graph(GRAPH).compile().ainvoke({"prompt": prompt, "path": path})
        return str(final["answer"])


# -- a tool node whose tool calls have keys of their own (per_call) -------------------

CALLS_GRAPH = "bounded_calls_graph"


@lc_tool
async def stalling_append(prompt: str, path: str) -> str:
    """Append a line for ``prompt`` to ``path`` (then stall, as _behave says)."""
    await _behave(prompt, path)
    return f"appended for {prompt}"


_TOOL_NODE = ToolNode(
    [stalling_append], awrap_tool_call=ledger_tool_calls, wrap_tool_call=ledger_tool_calls
)


async def call_tools(state: State) -> State:
    """The node runs the one tool call through a ``ToolNode`` with the ledger's wrappers."""
    call = {
        "name": "stalling_append",
        "args": {"prompt": state["prompt"], "path": state["path"]},
        "id": "call_append",
        "type": "tool_call",
    }
    [message] = await _TOOL_NODE.ainvoke([AIMessage(content="", tool_calls=[call])])  # type: ignore[list-item]
    return {"answer": str(message.content)}


def calls_builder(options: dict[str, Any]) -> StateGraph[Any, Any, Any, Any]:
    """One tool node, run as an activity with ``options``."""
    graph: StateGraph[Any, Any, Any, Any] = StateGraph(State)
    graph.add_node("tools", call_tools, metadata={"execute_in": "activity", **options})
    graph.add_edge(START, "tools")
    graph.add_edge("tools", END)
    return graph


@workflow.defn
class BoundedCallsWorkflow:
    @workflow.run
    async def run(self, prompt: str, path: str) -> str:
        from temporalio.langgraph import graph

        final = await graph(CALLS_GRAPH).compile().ainvoke({"prompt": prompt, "path": path})
        return str(final["answer"])


# -- run_tool steps ------------------------------------------------------------------------


class Work(BaseModel):
    prompt: str
    path: str


class Done(BaseModel):
    text: str


@tool(capability="bounded.lookup", retry_safe=True)
async def bounded_lookup(arg: Work) -> Done:
    """A retry-safe tool (the far side dedupes by the key)."""
    await _behave(arg.prompt, arg.path)
    return Done(text=f"looked up {arg.prompt}")


@tool(capability="bounded.append")
async def bounded_append(arg: Work) -> Done:
    """A tool that may not repeat."""
    await _behave(arg.prompt, arg.path)
    return Done(text=f"appended for {arg.prompt}")


#: The state a checked step's precondition holds.
READY = {"ready": True}


async def _read_state(arg: Work) -> dict[str, bool]:
    """What ``bounded_checked`` compares its precondition with: read once the ledger
    claimed the key, before the tool acts (``hang``: the read hangs, nothing acts)."""
    if "hang" in arg.prompt:
        await asyncio.Event().wait()  # until Temporal's cancel reaches it
    return READY


@tool(capability="bounded.checked", state=_read_state)
async def bounded_checked(arg: Work) -> Done:
    """A tool that may not repeat, with a precondition read before it acts."""
    await _behave(arg.prompt, arg.path)
    return Done(text=f"checked for {arg.prompt}")


@workflow.defn
class BoundedStepWorkflow:
    @workflow.run
    async def run(self, prompt: str, path: str) -> str:
        step = bounded_append if "stall" in prompt else bounded_lookup
        if "checked" in prompt:
            step = bounded_checked
        options = workflow.ActivityConfig(
            start_to_close_timeout=timedelta(milliseconds=500),
            heartbeat_timeout=timedelta(seconds=1),
            retry_policy=RetryPolicy(maximum_attempts=1),
        )
        if "unpolled" in prompt:
            # A tool that may not repeat, on a task queue no worker polls: no attempt
            # ever starts, and the step's 1 s from schedule to close runs out.
            step = bounded_append
            options = workflow.ActivityConfig(
                task_queue=f"{workflow.info().task_queue}-unpolled",
                schedule_to_close_timeout=timedelta(seconds=1),
            )
        done = await run_tool(
            step,
            Work(prompt=prompt, path=path),
            step="work",
            performer="BoundedStepWorkflow",
            precondition=READY if step is bounded_checked else None,
            options=options,
        )
        return done.text
