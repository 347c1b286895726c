"""Ledgered graph nodes for LangGraph graphs run by Temporal's ``temporalio-langgraph``.

``temporalio.langgraph.LangGraphPlugin`` runs each graph node whose metadata says
``execute_in="activity"`` as one activity, named ``{graph}.{node}`` after the name the
graph is registered under and the node's name. This module gives the rules that put
those activities through the ledger; users add one plugin and change no node::

    from temporalio.langgraph import LangGraphPlugin
    from temporal_ledger.activities import LedgerPlugin
    from temporal_ledger.activities.langgraph import activity_rules

    client = await Client.connect(
        "localhost:7233",
        plugins=[
            LangGraphPlugin(graphs={"support": builder()}),
            LedgerPlugin(
                "sqlite:///ledger.db",
                ledger_activities=activity_rules(
                    "support", model_nodes=["agent"], tool_nodes=["tools"]
                ),
            ),
        ],
    )

Every node activity is then keyed by workflow, first execution run and call number
(see ``activities._generic``), listed or not, and so is every Functional API ``@task``
the plugin runs as an activity: one not listed parks on an unknown effect, as a tool
node does. A worker crash, an activity retry or ``temporal workflow reset`` replays the
node's recorded return value instead of running it again.

* Model nodes are retry-safe: they ask a model and change nothing in the world, so an
  attempt whose outcome is unknown may ask again. Their recorded output, tool call ids
  included, is what a reset run gets back, so the tool node after it sees the same
  calls.
* Tool nodes are not (``tools_retry_safe=False``): a node that started and never
  reported, or failed after it may have acted, is not run a second time. The graph's
  workflow waits instead, parked like a ``run_tool`` step (search attribute
  ``LedgerOpenEffects``, query ``open_effects``, update ``reconcile``), until an
  operator answers with the node's own return value (its state update).

The unit is the node, because the node is Temporal's activity: two tool calls in one
tool node are one ledgered call under one key, and an unknown effect parks the whole
node. For one key per call, the node makes its calls through the ledger, and is listed
with ``per_call=True``: a ``ToolNode``'s tool calls with the ledger's wrappers, and any
other call (a tool or an API called from the node's own code) with :func:`ledger_call`::

    tool_node = ToolNode(
        tools, awrap_tool_call=ledger_tool_calls, wrap_tool_call=ledger_tool_calls
    )

    async def tools(state):  # the graph's tool node, run as an activity
        # Messages reach an activity node as dicts: LangChain's converter rebuilds them.
        return await tool_node.ainvoke({"messages": convert_to_messages(state["messages"])})

    async def refund(state):  # a node that calls an API itself
        order = state["order"]
        done = await ledger_call(
            "refund", lambda: payments.refund(order), request={"order": order}
        )
        return {"refund": done}

    activity_rules("support", model_nodes=["agent"], tool_nodes=["tools", "refund"],
                   per_call=True)

Each call is then keyed by the node's key and the call's ``tool_call_id`` or name
(``{workflow id}/{first run}/{call}/{tool_call_id}``; the id comes from the model node's
recorded output, so it is the same on a retry and after a reset, as a name is). The
node is retry-safe: a retry of it replays the calls already made and runs the others.
A call whose effect is unknown parks on its own key, the operator answers with that
call's output (for a tool call ``{"content": ...}``, the ``ToolMessage``'s content), and
the node then runs again, every call replaying or running under its key. The call's
capability is ``activity.<graph>.<node>.<tool or name>``.

The policy's performer is the workflow type and the capability is
``activity.<graph>.<node>``, e.g. ``"SupportWorkflow" = ["activity.support.*"]``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar, cast, overload

from pydantic import BaseModel

from ..workflows._seam import PLACEHOLDER
from . import _rules
from ._failures import no_effect_errors_of
from ._langgraph_calls import named_call, run_inside, tool_call
from ._langgraph_state import NodeReturn, normalize
from ._rules import LedgeredActivity

if TYPE_CHECKING:
    from langchain_core.messages import ToolMessage
    from langgraph.prebuilt.tool_node import ToolCallRequest
    from langgraph.types import Command

__all__ = ["activity_rules", "ledger_call", "ledger_tool_calls"]


def activity_rules(
    graph: str | None = None,
    *,
    model_nodes: Iterable[str] = (),
    tool_nodes: Iterable[str] = (),
    tools_retry_safe: bool = False,
    per_call: bool = False,
    no_effect_errors: Iterable[type[BaseException]] = (),
) -> list[LedgeredActivity]:
    """The ledgered activities of ``temporalio-langgraph``: every node and every Functional
    API ``@task`` that ``LangGraphPlugin`` runs as an activity, named or not.

    Put the plugin on ``Client.connect(plugins=[...])`` (workers inherit it) next to
    ``LangGraphPlugin``; a worker that runs only workflows needs it too, because it stamps
    each scheduled activity with the run identity the key is built from. Only nodes whose
    metadata has ``execute_in="activity"`` are activities; nodes run in the workflow are
    replayed by Temporal itself.

    Every activity of the plugin (told by its argument, the plugin's ``ActivityInput``)
    parks on an unknown effect, and is fingerprinted without LangGraph's run, checkpoint
    and task ids: a ``@task`` (named ``module.qualname``) too. The nodes of ``graph``
    have their answers checked against the graph's state; the nodes named here are
    relaxed (model nodes) or given the options below (tool nodes).

    Args:
        graph: The name the graph is registered under in ``LangGraphPlugin(graphs=...)``;
            ``None``: no graph of its own (the defaults alone).
        model_nodes: Nodes that ask a model (or otherwise change nothing): retry-safe.
        tool_nodes: Nodes that act on the world and take the options below (every other
            node of the graph parks on an unknown effect too).
        tools_retry_safe: The tool nodes' far sides deduplicate by the key: an unknown
            effect is tried again instead of parking.
        per_call: The tool nodes make their calls through the ledger, each under a key
            of its own: a ``ToolNode``'s tool calls with :func:`ledger_tool_calls`, other
            calls with :func:`ledger_call`. The node itself then changes nothing but
            through them, so it is retry-safe, and an unknown effect parks the one call,
            not the node.
        no_effect_errors: Exception types that the tool nodes raise only before they act
            (e.g. ``(NonRetryableApplicationError,)`` for ``raise ApplicationError(...,
            non_retryable=True)``): recorded as no effect and failing the node as
            LangGraph reports it, instead of parking it as an unknown effect (what every
            other exception does). The calls of :func:`ledger_tool_calls` and
            :func:`ledger_call` are not covered: their exceptions still park the one call.

    Returns:
        The rules, for ``LedgerPlugin(ledger_activities=...)``.

    Raises:
        ValueError: Nodes without a graph, an empty graph name, or a node listed as both
            kinds.
        TypeError: ``no_effect_errors`` that are not exception classes.
    """
    declared = no_effect_errors_of(no_effect_errors)
    models, tools = list(model_nodes), list(tool_nodes)
    if graph is None:
        if models or tools:
            raise ValueError("model_nodes and tool_nodes need the graph's registered name")
        return [_EVERY_ACTIVITY]
    if not isinstance(graph, str) or not graph:
        raise ValueError("activity_rules needs the graph's registered name")
    both = sorted(set(models) & set(tools))
    if both:
        raise ValueError(f"nodes listed as both model and tool nodes: {both}")
    # Every other node of the graph: parks on an unknown effect.
    other = LedgeredActivity(f"{graph}.*", normalize=normalize, output=NodeReturn(graph))
    tool = dataclasses.replace(
        other,
        retry_safe=tools_retry_safe or per_call,
        calls_inside=per_call,
        no_effect_errors=declared,
    )
    return [
        *_rules.models(*(f"{graph}.{node}" for node in models), normalize=normalize),
        *(dataclasses.replace(tool, pattern=f"{graph}.{node}") for node in tools),
        other,
        _EVERY_ACTIVITY,
    ]


def _is_plugin_call(args: Any) -> bool:
    """Whether an activity's arguments are ``temporalio-langgraph``'s ``ActivityInput`` (the
    one argument of every node and task activity it registers)."""
    return (
        len(args) == 1
        and dataclasses.is_dataclass(args[0])
        and {f.name for f in dataclasses.fields(args[0])} == {"args", "kwargs", "langgraph_config"}
    )


@dataclasses.dataclass(frozen=True)
class _TaskReturn:
    """An operator answers a call no graph names (a ``@task``) with its return value."""

    def template(self, result_type: Any) -> Any:
        return PLACEHOLDER

    def result(self, output: Any) -> Any:
        return {"result": output, "langgraph_command": None, "langgraph_interrupts": None}

    def output_schema(self, result_type: Any, args: list[Any]) -> dict[str, Any] | None:
        return None  # any JSON value


#: Every node and task activity of ``LangGraphPlugin``, told by its argument: parks on an
#: unknown effect (the ledger tries the rules that name an activity first).
_EVERY_ACTIVITY = _rules.Rule(
    "*", accepts=_is_plugin_call, normalize=normalize, output=_TaskReturn()
)


_T = TypeVar("_T")
_M = TypeVar("_M", bound=BaseModel)


@overload
def ledger_tool_calls(
    request: ToolCallRequest,
    execute: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
) -> Awaitable[ToolMessage]: ...


@overload
def ledger_tool_calls(
    request: ToolCallRequest, execute: Callable[[ToolCallRequest], ToolMessage | Command[Any]]
) -> ToolMessage: ...


def ledger_tool_calls(
    request: ToolCallRequest,
    execute: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]]
    | Callable[[ToolCallRequest], ToolMessage | Command[Any]],
) -> Awaitable[ToolMessage] | ToolMessage:
    """Run one tool call of a LangGraph ``ToolNode`` through the ledger, under a key of its
    own; pass it as both of the ``ToolNode``'s wrappers, ``ToolNode(tools,
    awrap_tool_call=ledger_tool_calls, wrap_tool_call=ledger_tool_calls)``, in a tool
    node listed with ``activity_rules(..., per_call=True)``.

    The key is the node activity's key with the call's ``tool_call_id`` appended
    (``{workflow id}/{first run}/{call}/{tool_call_id}``): the id comes from the model
    node's recorded output, so a retry of the node, a worker crash and a ``temporal
    workflow reset`` find the same keys. A call already made replays its recorded
    ``ToolMessage`` (content, artifact, status); the others run. A call whose effect is
    unknown fails the node with that call's key: the workflow parks on it, an operator
    answers with the call's output (``{"content": ...}``), and the node then runs again,
    every call replaying or running under its own key.

    Given the ``ToolNode``'s async ``execute`` (its ``ainvoke``), it returns an awaitable.
    Given its sync one (``temporalio-langgraph`` runs a ``ToolNode`` that is itself a
    graph node synchronously, on a thread), it returns the message: the call goes
    through the ledger on the activity's event loop, and the tool runs on a thread of
    its own.

    The capability is ``activity.<graph>.<node>.<tool>`` and the performer the
    workflow's type; the policy's ``[tools]`` table names the tool by its own name.

    Args:
        request: The ``ToolNode``'s request (the model's tool call and the tool).
        execute: Runs the tool call (the ``ToolNode``'s own execution).

    Returns:
        The call's ``ToolMessage``, run or replayed (an awaitable of it for an async
        ``execute``).

    Raises:
        RuntimeError: Not inside a ledgered node activity, or a sync ``execute`` on the
            event loop (give the ``ToolNode`` ``awrap_tool_call=ledger_tool_calls`` too).
        temporalio.exceptions.ApplicationError: The ledger's answer that ends the node's
            attempt (an unknown effect, an approval to wait for, a refusal, a retry).
    """
    if inspect.iscoroutinefunction(execute):
        call = tool_call(request, lambda: execute(request))
        return cast("Awaitable[ToolMessage]", run_inside("ledger_tool_calls", call, blocking=False))
    sync = cast("Callable[[ToolCallRequest], ToolMessage | Command[Any]]", execute)
    call = tool_call(request, lambda: asyncio.to_thread(sync, request))
    return cast("ToolMessage", run_inside("ledger_tool_calls", call, blocking=True))


@overload
def ledger_call(
    name: str, fn: Callable[[], Awaitable[_T]], *, request: object, output: None = None
) -> Awaitable[_T]: ...


@overload
def ledger_call(  # type: ignore[overload-overlap]  # an awaitable is an object too
    name: str, fn: Callable[[], Awaitable[object]], *, request: object, output: type[_M]
) -> Awaitable[_M]: ...


@overload
def ledger_call(name: str, fn: Callable[[], _T], *, request: object, output: None = None) -> _T: ...


@overload
def ledger_call(
    name: str, fn: Callable[[], object], *, request: object, output: type[_M]
) -> _M: ...


def ledger_call(
    name: str, fn: Callable[[], Any], *, request: object, output: type[BaseModel] | None = None
) -> Any:
    """Run one call with an effect (a tool, an API) from a node function through the
    ledger, under a key of its own, so that a node making several calls repeats none of
    them when a later one fails. The node must be listed with
    ``activity_rules(..., tool_nodes=[...], per_call=True)``.

    In an ``async`` node, ``fn`` returns an awaitable and so does ``ledger_call``: ``await
    ledger_call(...)``. In a node that is not ``async`` (``temporalio-langgraph`` runs it
    on a thread), ``fn`` is a plain function and ``ledger_call`` returns its result: the
    call goes through the ledger on the activity's event loop, and ``fn`` runs on a
    thread of its own.

    The key is the node activity's key with ``name`` appended (``{workflow id}/{first
    run}/{call}/{name}``), the same on a retry of the node, after a worker crash and after
    a ``temporal workflow reset``. The whole rule applies to that key: a call already
    made replays its recorded outcome and ``fn`` does not run; another ``request`` under
    the same name is refused as a conflict; a call that fails after it may have acted
    parks **that key** (the operator answers with what ``fn`` would have returned, and
    the node then runs again, this call replaying the answer); a gated call waits for an
    approval of its own key. ``fn`` raising ``NoEffect`` says it did nothing.

    What is recorded, and what every run gets back, fresh or replayed: with ``output``,
    ``fn``'s return value validated by that pydantic model (an operator's answer is
    checked against its schema, and read back through it); without, ``fn``'s return
    value as JSON (a pydantic model as its JSON), which must then be exact JSON (a dict,
    list, str, number, bool or None; a tuple or a set is refused as unrecordable), and
    every run, the first included, gets that JSON back as ``json.loads`` reads it.

    The capability is ``activity.<graph>.<node>.<name>`` and the performer the workflow's
    type; the policy's ``[tools]`` table names the call by ``name``.

    Args:
        name: The call's name within the node: printable, no ``/``, and used once per
            node call (two calls under one name would share a key).
        fn: Makes the call; run only if the ledger lets the key act.
        request: What the call asks for, as exact JSON: its fingerprint binds the key,
            so put in everything the effect depends on.
        output: A pydantic model of the call's result.

    Returns:
        The call's result: an ``output`` instance, or the JSON ``fn`` returned (in an
        ``async`` node, an awaitable of it).

    Raises:
        RuntimeError: Not inside a ledgered node activity.
        temporalio.exceptions.ApplicationError: The ledger's answer that ends the node's
            attempt (an unknown effect, an approval to wait for, a refusal, a retry).
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # a sync node, on a thread of its own
        call = named_call(name, lambda: asyncio.to_thread(fn), request, output)
        return run_inside("ledger_call", call, blocking=True)
    return run_inside("ledger_call", named_call(name, fn, request, output), blocking=False)
