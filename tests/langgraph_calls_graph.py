"""A LangGraph graph whose one activity node makes three calls from its own code with
``ledger_call``, for tests (``tests/test_langgraph_calls.py``).

Its own module so the workflow sandbox imports little (the file effect and the node
options are ``tests/langgraph_graph.py``'s). The node runs as an activity on the host,
where the counters below are the truth about what happened. The prompt says what the
node does: ``boom`` makes the third call append its line and then fail (a lost
reply), ``sync`` runs the node as a plain function (``ledger_call`` on the plugin's
thread), ``flaky`` makes the second call refuse once with no effect (the node is
retried), ``drift`` puts the node's run count in the first call's request (a retry asks
for something else under the same name), ``twice`` makes the node use one name for two
calls.
"""

from __future__ import annotations

from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph
from pydantic import BaseModel
from temporal_ledger.activities.langgraph import ledger_call
from temporal_ledger.ledger import NoEffect
from temporalio import workflow

from tests.langgraph_graph import NODE_OPTIONS, append

GRAPH = "ledger_test_named_calls"

#: Node activity runs (attempts included), by prompt (each test uses its own prompt).
NODE_RUNS: dict[str, int] = {}
#: What the first call returned to the async node, each run, by prompt.
FIRST_RESULTS: dict[str, list[Any]] = {}
#: Prompts whose second call has refused once (with no effect).
_REFUSED_ONCE: set[str] = set()


class State(TypedDict, total=False):
    prompt: str
    path: str
    answer: str


class Line(BaseModel):
    """What the first call returns: the line it wrote."""

    line: int


class Appended(BaseModel):
    """What the third call returns: the line it wrote and where."""

    line: int
    text: str


def _first_request(state: State, text: str) -> dict[str, Any]:
    request: dict[str, Any] = {"path": state["path"], "text": text}
    if "drift" in state["prompt"]:
        request["run"] = NODE_RUNS[state["prompt"]]
    return request


def _plan(state: State) -> list[tuple[str, str]]:
    """The node's three calls: (name, line to append)."""
    prompt = state["prompt"]
    names = ["first", "first" if "twice" in prompt else "second", "third"]
    texts = [f"A for {prompt}", f"B for {prompt}", f"C for {prompt}"]
    if "boom" in prompt:
        texts[2] += " explode"
    return list(zip(names, texts, strict=True))


def _second(prompt: str, path: str, text: str) -> int:
    if "flaky" in prompt and prompt not in _REFUSED_ONCE:
        _REFUSED_ONCE.add(prompt)
        raise NoEffect("busy: try again", retryable=True)
    return append(path, text)


async def three_calls(state: State) -> State:
    """Three calls with effects, each through the ledger under a name of its own."""
    prompt, path = state["prompt"], state["path"]
    NODE_RUNS[prompt] = NODE_RUNS.get(prompt, 0) + 1
    (one, a), (two, b), (three, c) = _plan(state)

    async def append_a() -> Line:  # a model, but no output=: recorded as its JSON
        return Line(line=append(path, a))

    async def append_b() -> int:
        return _second(prompt, path, b)

    async def append_c() -> Appended:
        return Appended(line=append(path, c), text=c)

    first = await ledger_call(one, append_a, request=_first_request(state, a))
    FIRST_RESULTS.setdefault(prompt, []).append(first)
    second = await ledger_call(two, append_b, request={"path": path, "text": b})
    third = await ledger_call(three, append_c, request={"path": path, "text": c}, output=Appended)
    return {"answer": f"{first['line']} | {second} | {third.line}: {third.text}"}


def three_calls_sync(state: State) -> State:
    """:func:`three_calls` as a plain function: the plugin runs it on a thread."""
    prompt, path = state["prompt"], state["path"]
    NODE_RUNS[prompt] = NODE_RUNS.get(prompt, 0) + 1
    (one, a), (two, b), (three, c) = _plan(state)
    first = ledger_call(one, lambda: {"line": append(path, a)}, request=_first_request(state, a))
    second = ledger_call(
        two,
        lambda: _second(prompt, path, b),
        request={"path": path, "text": b},
    )
    third = ledger_call(
        three,
        lambda: Appended(line=append(path, c), text=c),
        request={"path": path, "text": c},
        output=Appended,
    )
    return {"answer": f"{first['line']} | {second} | {third.line}: {third.text}"}


async def pick(state: State) -> str:
    """The async node or the sync one (runs in the workflow)."""
    return "work_sync" if "sync" in state["prompt"] else "work"


def builder() -> StateGraph[Any, Any, Any, Any]:
    """The graph, new each time: the plugin wraps the nodes of the builder it is given."""
    graph: StateGraph[Any, Any, Any, Any] = StateGraph(State)
    graph.add_node("work", three_calls, metadata=dict(NODE_OPTIONS))
    graph.add_node("work_sync", three_calls_sync, metadata=dict(NODE_OPTIONS))
    graph.add_conditional_edges(START, pick, ["work", "work_sync"])
    graph.add_edge("work", END)
    graph.add_edge("work_sync", END)
    return graph


@workflow.defn
class NamedCallsGraphWorkflow:
    @workflow.run
    async def run(self, prompt: str, path: str) -> str:
        from temporalio.langgraph import graph

        app = graph(GRAPH).compile()
        final = await app.ainvoke({"prompt": prompt, "path": path})
        return str(final["answer"])
