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
        tools, awrap_tool_call=ledger_tool_calls, wrap_tool_call=ledger_tool_calls_sync
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
import contextvars
import dataclasses
import json
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar, overload

from pydantic import BaseModel, ConfigDict, RootModel, ValidationError
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from ..ledger import NoEffect
from ..ledger._seam import check_json, model_json, output_template
from ..workflows._seam import (
    PLACEHOLDER,
    Answer,
    ErrorType,
    InnerCall,
    ToolSpec,
    UnknownEffect,
    step_key,
)
from . import _rules
from ._attempt import Attempt, call_context, run_attempt
from ._failures import no_effect_errors_of
from ._generic import Enclosing, enclosing
from ._rules import LedgeredActivity, capability_for

if TYPE_CHECKING:
    from langchain_core.messages import ToolMessage
    from langgraph.prebuilt.tool_node import ToolCallRequest
    from langgraph.types import Command

__all__ = [
    "activity_rules",
    "ledger_call",
    "ledger_call_sync",
    "ledger_tool_calls",
    "ledger_tool_calls_sync",
]


def activity_rules(
    graph: str | None = None,
    *,
    model_nodes: Iterable[str] = (),
    tool_nodes: Iterable[str] = (),
    tools_retry_safe: bool = False,
    per_call: bool = False,
    no_effect_errors: Iterable[type[BaseException]] = (),
) -> list[LedgeredActivity]:
    """The ledgered activities of ``temporalio-langgraph``, for
    ``LedgerPlugin(ledger_activities=...)``: every node and every Functional API ``@task``
    that ``LangGraphPlugin`` runs as an activity, named or not.

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
    return [
        *_rules.models(*(f"{graph}.{node}" for node in models), normalize=_normalize),
        *(
            LedgeredActivity(
                f"{graph}.{node}",
                retry_safe=tools_retry_safe or per_call,
                normalize=_normalize,
                output=NodeReturn(graph),
                calls_inside=per_call,
                no_effect_errors=declared,
            )
            for node in tools
        ),
        # Every other node of the graph: parks on an unknown effect.
        LedgeredActivity(f"{graph}.*", normalize=_normalize, output=NodeReturn(graph)),
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


@dataclasses.dataclass(frozen=True)
class NodeReturn:
    """An operator answers a parked node with the node's return value, its state update;
    the plugin's activity returns ``{"result": ..., "langgraph_command": ...,
    "langgraph_interrupts": ...}``.

    An answer is a JSON object (or ``null``, no update) checked against the node's input
    state as the workflow will use it: each key is a key of that state or a channel of
    the graph ``graph`` (read in the workflow through ``temporalio.langgraph.graph``), and
    a value has the JSON type of the state's current value there (the reducers run on
    both). For a node whose input holds messages with tool calls not answered yet (a
    tool node of a messages graph), the template is a ``ToolMessage`` per pending call,
    its ``tool_call_id`` filled in, and an answer that holds the messages key is checked
    through LangGraph's ``add_messages`` (langchain's message conversion) onto the node's
    messages, each pending call answered, no other; an answer without that key (a node
    that returns other state) is taken as it is. The activity side gives the same rules
    that it can read from the input alone as a JSON schema (:meth:`output_schema`), which
    the ledger checks too (``temporal-ledger reconcile``).

    Attributes:
        graph: The name the graph is registered under in ``LangGraphPlugin``.
    """

    graph: str = ""

    def template(self, result_type: Any) -> Any:
        return PLACEHOLDER

    def result(self, output: Any) -> Any:
        if output is not None and not isinstance(output, dict):  # None: no update
            raise ValueError(_not_an_update(output))
        return {"result": output, "langgraph_command": None, "langgraph_interrupts": None}

    def output_schema(self, result_type: Any, args: list[Any]) -> dict[str, Any] | None:
        state = _node_state(args)
        return None if state is None else _update_schema(state)

    def answer_for(self, args: list[Any]) -> Answer | None:
        state = _node_state(args)
        if state is None:
            return None
        found = _pending_tool_calls(state)
        key, pending = found if found is not None else (None, [])
        allowed = frozenset(state) | _graph_channels(self.graph)
        template = {
            key: [
                {
                    "type": "tool",
                    "tool_call_id": call["id"],
                    "name": call["name"],
                    "content": PLACEHOLDER,
                }
                for call in pending
            ]
        }
        asked = [
            {"name": call["name"], "arguments": call.get("args"), "tool_call_id": call["id"]}
            for call in pending
        ]

        def misfit(output: Any) -> str | None:
            return _answer_problem(state, allowed, key, pending, output)

        def unusable(result: Any) -> str | None:
            if not isinstance(result, dict) or result.get("langgraph_command") is not None:
                return None
            update = result.get("result")
            if not isinstance(update, dict):
                return None
            # Keys the graph has no channel for are dropped by LangGraph: not a failure.
            # A node's own update may give add_messages one message, not a list.
            problem = _type_problem(state, {k: v for k, v in update.items() if k != key})
            if problem is None and key is not None and key in update:
                problem = _messages_problem(state, key, update[key])
            return problem

        return Answer(
            template=template if pending else PLACEHOLDER,
            tool_calls=asked,
            misfit=misfit,
            unusable=unusable,
        )


def _not_an_update(output: Any) -> str:
    return (
        "the node's answer is its state update, a JSON object such as "
        f'{{"messages": [...]}}, not {_json_kind(output)}'
    )


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, dict):
        return "an object"
    return "an array" if isinstance(value, list) else f"a {type(value).__name__}"


#: JSON schema types of state values, by :func:`_json_kind`.
_SCHEMA_TYPES = {
    "a boolean": "boolean",
    "a number": "number",
    "a string": "string",
    "an object": "object",
    "an array": "array",
}

#: The ``type`` of every langchain message but a tool message, as a dict gives it.
_OTHER_MESSAGE_TYPES = [
    "human", "user", "ai", "assistant", "AIMessageChunk", "system", "developer",
    "chat", "function", "remove",
]  # fmt: skip


def _update_schema(state: dict[str, Any]) -> dict[str, Any]:
    """The JSON schema of a state update for a node with input ``state``: an object (or
    null) whose values have their state values' JSON types; where tool calls are pending,
    the messages it holds are each a ``type`` and ``content``, a tool message's
    ``tool_call_id`` one of the pending calls'. Which keys it may hold is not said: a
    channel never written is absent from the input, and only the workflow, which has
    the graph, knows it (:meth:`NodeReturn.answer_for`)."""
    properties: dict[str, Any] = {
        name: {"type": _SCHEMA_TYPES[_json_kind(value)]}
        for name, value in state.items()
        if _json_kind(value) in _SCHEMA_TYPES
    }
    found = _pending_tool_calls(state)
    if found is not None and found[1]:
        key, pending = found
        content = {"type": ["string", "array"]}
        properties[key] = {
            "type": "array",
            "items": {
                "anyOf": [
                    {
                        "type": "object",
                        "properties": {
                            "type": {"const": "tool"},
                            "content": content,
                            # Not an enum: a message's tag is its type alone, so a
                            # wrong id is named as such.
                            "tool_call_id": {"anyOf": [{"const": c["id"]} for c in pending]},
                        },
                        "required": ["type", "content", "tool_call_id"],
                    },
                    {
                        "type": "object",
                        "properties": {"type": {"enum": _OTHER_MESSAGE_TYPES}, "content": content},
                        "required": ["type", "content"],
                    },
                ]
            },
        }
    return {"type": ["object", "null"], "properties": properties}


def _graph_channels(graph: str) -> frozenset[str]:
    """The channels of the graph registered as ``graph``, read in the workflow; none
    outside one (an answer's keys are then those of the node's input state)."""
    if not graph:
        return frozenset()
    try:
        from temporalio.langgraph import graph as registered

        # graph() also resets the plugin's task cache in the current context: a copy
        # keeps the running graph's.
        builder = contextvars.copy_context().run(registered, graph)
        return frozenset(name for name in builder.channels if isinstance(name, str))
    except Exception:  # not in a workflow, or no such graph
        return frozenset()


def _type_problem(state: dict[str, Any], update: dict[str, Any]) -> str | None:
    """Why a value of ``update`` cannot go where the state holds another JSON type: the
    channel's reducer (``operator.add``, ``add_messages``) would fail on it."""
    for name, value in update.items():
        current = state.get(name)
        if current is not None and _json_kind(value) != _json_kind(current):
            return (
                f"{_shown_key(name)}: {_json_kind(value)}, where the state holds "
                f"{_json_kind(current)}"
            )
    return None


def _shown_key(name: Any) -> str:
    text = str(name)
    return text if len(text) <= 60 and text.isprintable() else repr(text[:57]) + "..."


def _node_state(args: list[Any]) -> dict[str, Any] | None:
    """The node's input state, from the plugin's ``{"args": [state], ...}``."""
    if len(args) == 1 and isinstance(args[0], dict):
        inputs = args[0].get("args")
        if isinstance(inputs, list) and inputs and isinstance(inputs[0], dict):
            return inputs[0]
    return None


def _is_message(value: Any) -> bool:
    return isinstance(value, dict) and _MESSAGE_FIELDS <= value.keys()


def _pending_tool_calls(state: dict[str, Any]) -> tuple[str, list[dict[str, Any]]] | None:
    """The state's messages key and the tool calls of its last AI message that no tool
    message answers yet; ``None`` where the state holds no messages."""
    for key, value in state.items():
        if not (isinstance(value, list) and value and all(_is_message(m) for m in value)):
            continue
        answered = {m.get("tool_call_id") for m in value if m["type"] == "tool"}
        asking = next((m for m in reversed(value) if m["type"] in _AI_TYPES), None)
        calls = asking.get("tool_calls") if asking is not None else None
        pending = [
            call
            for call in (calls if isinstance(calls, list) else [])
            if isinstance(call, dict)
            and isinstance(call.get("id"), str)
            and isinstance(call.get("name"), str)
            and call["id"] not in answered
        ]
        return key, pending
    return None


_AI_TYPES = ("ai", "AIMessageChunk")


def _answer_problem(
    state: dict[str, Any],
    allowed: frozenset[str],
    key: str | None,
    pending: list[dict[str, Any]],
    output: Any,
) -> str | None:
    """Why ``output`` cannot be the node's state update, in one line: not an object, a key
    not in ``allowed`` (the input state's and the graph's channels), a value of another
    JSON type than the state's, or messages that do not answer the pending tool calls."""
    if output is None:
        return None
    if not isinstance(output, dict):
        return _not_an_update(output)
    for name in output:
        if name not in allowed:
            return (
                f"{_shown_key(name)}: not a key of the graph's state "
                f"(its keys: {', '.join(sorted(allowed))})"
            )
    problem = _type_problem(state, output)
    if problem is not None or key is None or key not in output:
        # An update without the messages key is the node's own business (e.g. a node
        # that returns other state): LangGraph takes it as it is.
        return problem
    problem = _messages_problem(state, key, output[key])
    if problem is not None or not pending:
        return problem
    from langchain_core.messages import ToolMessage, convert_to_messages

    given = output[key] if isinstance(output[key], list) else [output[key]]
    ids = {call["id"]: call["name"] for call in pending}
    answered: set[str] = set()
    for i, message in enumerate(convert_to_messages(given)):
        if not isinstance(message, ToolMessage):
            continue
        if message.tool_call_id not in ids:
            return (
                f"{key}[{i}].tool_call_id: {message.tool_call_id!r} is not a pending call "
                f"of this node (pending: {', '.join(sorted(ids))})"
            )
        answered.add(message.tool_call_id)
    missing = [f"{call_id} ({name})" for call_id, name in ids.items() if call_id not in answered]
    if missing:
        return f"{key}: no tool message answers the call {', '.join(missing)}"
    return None


def _messages_problem(state: dict[str, Any], key: str, value: Any) -> str | None:
    """Why LangGraph's ``add_messages`` would refuse ``value`` onto the state's messages
    (what the workflow does with the node's return value), in one line."""
    from langchain_core.messages import convert_to_messages
    from langgraph.graph.message import add_messages

    given = value if isinstance(value, list) else [value]
    for i, message in enumerate(given):
        try:
            convert_to_messages([message])
        except KeyError as exc:
            return f'{key}[{i}]: missing "{exc.args[0] if exc.args else exc}"'
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(str(part) for part in error["loc"])
            return f"{key}[{i}].{where}: {error['msg']}"
        except Exception as exc:  # langchain's coercion errors: their first line says it
            return f"{key}[{i}]: {_first_line(exc)}"
    current: Any  # a list of messages: what add_messages takes
    try:
        current = convert_to_messages(state[key])
    except Exception:  # the workflow holds them as messages already; check the answer
        current = []
    try:
        add_messages(current, value)
    except Exception as exc:
        return f"{key}: {_first_line(exc)}"
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _normalize(activity_type: str, args: list[Any]) -> dict[str, Any]:
    """The fingerprinted identity of a node call: its input and the graph's context.

    The plugin sends ``{"args", "kwargs", "langgraph_config"}``. The config's run id,
    checkpoint ids, task id and scratchpad are LangGraph's per-run bookkeeping and
    change on a reset, so they are not identity; the runnable config a node asked for
    (``kwargs["config"]``) carries the same. So is the ``id`` of each message in the
    node's input (:func:`_without_message_ids`). Arguments of another shape (another
    version) are fingerprinted whole: a spurious conflict refuses loudly, a too-lenient
    fingerprint would replay silently.
    """
    if len(args) == 1 and isinstance(args[0], dict) and {"args", "kwargs"} <= set(args[0]):
        call = args[0]
        kwargs = call["kwargs"] if isinstance(call["kwargs"], dict) else {}
        config = call.get("langgraph_config")
        return {
            "input": _without_message_ids(call["args"]),
            "kwargs": _without_message_ids(
                {k: v for k, v in kwargs.items() if k not in ("config", "runtime")}
            ),
            "context": config.get("context") if isinstance(config, dict) else None,
        }
    return {"args": args}


#: Every node and task activity of ``LangGraphPlugin``, told by its argument: parks on an
#: unknown effect (the ledger tries the rules that name an activity first).
_EVERY_ACTIVITY = _rules.rule(
    "*", accepts=_is_plugin_call, normalize=_normalize, output=_TaskReturn()
)


#: The fields every langchain message has when the plugin's pydantic converter sends it.
_MESSAGE_FIELDS = frozenset({"content", "additional_kwargs", "response_metadata", "type", "id"})


def _without_message_ids(value: Any) -> Any:
    """``value`` with the ``id`` of every langchain message in it left out, wherever it sits.

    LangGraph's ``add_messages`` gives each message that has no id a ``uuid4()``, drawn in
    the workflow: a reset run draws others, and so would a fingerprint that kept them.
    No model or tool reads a message's id: a model reads content, role, name and tool
    calls, a tool its call's arguments, and the links between messages are the tool
    calls' ids (``tool_calls[].id``, ``tool_call_id``), which stay. A ``RemoveMessage``
    (``type == "remove"``) keeps its id: the id is what it removes.
    """
    if isinstance(value, list):
        return [_without_message_ids(item) for item in value]
    if not isinstance(value, dict):
        return value
    message = _MESSAGE_FIELDS <= value.keys() and value.get("type") != "remove"
    return {
        name: _without_message_ids(item)
        for name, item in value.items()
        if not (message and name == "id")
    }


# -- calls with keys of their own inside a node --------------------------------------------


class _ToolCallOutput(BaseModel):
    """What the ledger records of a tool call: its ``ToolMessage`` without the ids the call
    already has. An operator's ``effect_confirmed`` output has this shape too."""

    model_config = ConfigDict(extra="forbid", title="ToolCallOutput")

    content: str | list[str | dict[str, Any]]
    artifact: Any = None
    status: Literal["success", "error"] = "success"


_TOOL_CALL_SCHEMA = _ToolCallOutput.model_json_schema()


class _JsonOutput(RootModel[Any]):
    """The output of a :func:`ledger_call` without an ``output`` model: any JSON."""


_TOOL_CALL_TEMPLATE = {"content": PLACEHOLDER}

_T = TypeVar("_T")
_M = TypeVar("_M", bound=BaseModel)


@dataclasses.dataclass(frozen=True)
class _InnerCall(Generic[_T]):
    """One call inside a ledgered node, as the ledger sees it.

    ``act`` runs the effect; ``record`` turns its value into what the caller gets back
    and the JSON the ledger records; ``read`` turns a recorded JSON (a replay, or an
    operator's answer) into what the caller gets back, raising ``ValueError`` (pydantic's
    ``ValidationError`` is one) when it does not fit.
    """

    #: The tool's name, or the call's (the policy's ``[tools]``, the capability's tail).
    tool: str
    #: Appended to the node's key; unique within one node call.
    call_id: str
    #: The fingerprinted request.
    payload: dict[str, Any]
    act: Callable[[], Awaitable[Any]]
    record: Callable[[Any], tuple[_T, Any]]
    read: Callable[[Any], _T]
    #: The output's model, and what an operator's output must fit, and the template of it.
    output_type: type[BaseModel]
    output_schema: dict[str, Any] | None
    template: Any
    #: Recorded with the request, never fingerprinted.
    context: dict[str, Any]
    #: Why the call is refused before it runs (a mistake in the code that makes it).
    refused: str | None = None


async def ledger_tool_calls(
    request: ToolCallRequest,
    execute: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
) -> ToolMessage:
    """Run one tool call of a LangGraph ``ToolNode`` through the ledger, under a key of its
    own; pass it as ``ToolNode(tools, awrap_tool_call=ledger_tool_calls,
    wrap_tool_call=ledger_tool_calls_sync)`` in a tool node listed with
    ``activity_rules(..., per_call=True)``.

    The key is the node activity's key with the call's ``tool_call_id`` appended
    (``{workflow id}/{first run}/{call}/{tool_call_id}``): the id comes from the model
    node's recorded output, so a retry of the node, a worker crash and a ``temporal
    workflow reset`` find the same keys. A call already made replays its recorded
    ``ToolMessage`` (content, artifact, status); the others run. A call whose effect is
    unknown fails the node with that call's key: the workflow parks on it, an operator
    answers with the call's output (``{"content": ...}``), and the node then runs again,
    every call replaying or running under its own key.

    The capability is ``activity.<graph>.<node>.<tool>`` and the performer the
    workflow's type; the policy's ``[tools]`` table names the tool by its own name.

    Args:
        request: The ``ToolNode``'s request (the model's tool call and the tool).
        execute: Runs the tool call (the ``ToolNode``'s own execution).

    Returns:
        The call's ``ToolMessage``, run or replayed.

    Raises:
        RuntimeError: Not inside a ledgered node activity.
        temporalio.exceptions.ApplicationError: The ledger's answer that ends the node's
            attempt (an unknown effect, an approval to wait for, a refusal, a retry).
    """
    inside = _inside("ledger_tool_calls")
    return await _ledgered_call(inside, _tool_call(request, lambda: execute(request)))


def ledger_tool_calls_sync(
    request: ToolCallRequest,
    execute: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
) -> ToolMessage:
    """:func:`ledger_tool_calls` for a ``ToolNode`` that runs synchronously: its
    ``wrap_tool_call``. ``temporalio-langgraph`` runs a ``ToolNode`` that is itself a
    graph node synchronously, on a thread; the call goes through the ledger on the
    activity's event loop, and the tool runs on a thread of its own.

    Args:
        request: The ``ToolNode``'s request (the model's tool call and the tool).
        execute: Runs the tool call (the ``ToolNode``'s own execution).

    Returns:
        The call's ``ToolMessage``, run or replayed.

    Raises:
        RuntimeError: Not inside a ledgered node activity, or called on the event loop
            (give the ``ToolNode`` ``awrap_tool_call=ledger_tool_calls`` too).
    """
    inside = _inside("ledger_tool_calls_sync", instead="awrap_tool_call=ledger_tool_calls")
    call = _tool_call(request, lambda: asyncio.to_thread(execute, request))
    return asyncio.run_coroutine_threadsafe(_ledgered_call(inside, call), inside.loop).result()


@overload
async def ledger_call(
    name: str, fn: Callable[[], Awaitable[_T]], *, request: object, output: None = None
) -> _T: ...


@overload
async def ledger_call(
    name: str, fn: Callable[[], Awaitable[object]], *, request: object, output: type[_M]
) -> _M: ...


async def ledger_call(
    name: str,
    fn: Callable[[], Awaitable[Any]],
    *,
    request: object,
    output: type[BaseModel] | None = None,
) -> Any:
    """Run one call with an effect (a tool, an API) from a node function through the
    ledger, under a key of its own, so that a node making several calls repeats none of
    them when a later one fails. The node must be listed with
    ``activity_rules(..., tool_nodes=[...], per_call=True)``.

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
        The call's result: an ``output`` instance, or the JSON ``fn`` returned.

    Raises:
        RuntimeError: Not inside a ledgered node activity.
        temporalio.exceptions.ApplicationError: The ledger's answer that ends the node's
            attempt (an unknown effect, an approval to wait for, a refusal, a retry).
    """
    inside = _inside("ledger_call")
    return await _ledgered_call(inside, _named_call(name, fn, request, output))


@overload
def ledger_call_sync(
    name: str, fn: Callable[[], _T], *, request: object, output: None = None
) -> _T: ...


@overload
def ledger_call_sync(
    name: str, fn: Callable[[], object], *, request: object, output: type[_M]
) -> _M: ...


def ledger_call_sync(
    name: str,
    fn: Callable[[], Any],
    *,
    request: object,
    output: type[BaseModel] | None = None,
) -> Any:
    """:func:`ledger_call` for a node function that is not ``async``:
    ``temporalio-langgraph`` runs such a node on a thread, where this goes through the
    ledger on the activity's event loop and runs ``fn`` on a thread of its own.

    Args:
        name: The call's name within the node (see :func:`ledger_call`).
        fn: Makes the call; run only if the ledger lets the key act.
        request: What the call asks for, as exact JSON.
        output: A pydantic model of the call's result.

    Returns:
        The call's result: an ``output`` instance, or the JSON ``fn`` returned.

    Raises:
        RuntimeError: Not inside a ledgered node activity, or called on the event loop
            (an ``async`` node uses :func:`ledger_call`).
    """
    inside = _inside("ledger_call_sync", instead="await ledger_call(...)")
    call = _named_call(name, lambda: asyncio.to_thread(fn), request, output)
    return asyncio.run_coroutine_threadsafe(_ledgered_call(inside, call), inside.loop).result()


def _inside(what: str, *, instead: str | None = None) -> Enclosing:
    """The ledgered node activity around the caller; a sync caller must be off its loop."""
    inside = enclosing.get()
    if inside is None:
        raise RuntimeError(
            f"{what} runs calls through the ledger of the node activity around them, and "
            "no ledgered activity is running: list the node in "
            "activity_rules(..., tool_nodes=[...], per_call=True) for LedgerPlugin"
        )
    if instead is not None:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise RuntimeError(f"{what} was called on the event loop: use {instead} there")
    return inside


def _tool_call(
    request: ToolCallRequest, run: Callable[[], Awaitable[ToolMessage | Command[Any]]]
) -> _InnerCall[ToolMessage]:
    """A ``ToolNode``'s tool call, keyed by its ``tool_call_id``."""
    from langchain_core.messages import ToolMessage

    call = request.tool_call
    name, call_id = str(call.get("name")), call.get("id")

    def record(message: Any) -> tuple[ToolMessage, Any]:
        if not isinstance(message, ToolMessage):
            raise TypeError(
                f"{name} returned {type(message).__name__}, not a ToolMessage: "
                "ledger_tool_calls records ToolMessages only"
            )
        recorded = _ToolCallOutput(
            content=message.content, artifact=message.artifact, status=message.status
        )
        return message, recorded.model_dump(mode="json")

    def read(recorded: Any) -> ToolMessage:
        output = _ToolCallOutput.model_validate(recorded)
        return ToolMessage(
            content=output.content,
            artifact=output.artifact,
            status=output.status,
            tool_call_id=call_id,
            name=name,
        )

    return _InnerCall(
        tool=name,
        # Refused by _ledgered_call, before anything runs, when the model gave no id.
        call_id=call_id if isinstance(call_id, str) else "",
        payload={"tool": name, "args": call.get("args")},
        act=run,
        record=record,
        read=read,
        output_type=_ToolCallOutput,
        output_schema=_TOOL_CALL_SCHEMA,
        template=_TOOL_CALL_TEMPLATE,
        context={"tool": name, "tool_call_id": call_id},
    )


def _named_call(
    name: str,
    fn: Callable[[], Awaitable[Any]],
    request: object,
    output: type[BaseModel] | None,
) -> _InnerCall[Any]:
    """A call that node code makes with :func:`ledger_call`, keyed by its name."""
    refused = None
    if not isinstance(name, str) or not name or "/" in name or not name.isprintable():
        refused = f"a call's name must be printable text without '/', not {name!r}"
        name = repr(name)
    elif output is not None and not (isinstance(output, type) and issubclass(output, BaseModel)):
        refused = f"{name}: output must be a pydantic model class, not {output!r}"
        output = None

    def read(recorded: Any) -> Any:
        if output is None:
            return recorded
        return output.model_validate(recorded)

    def record(value: Any) -> tuple[Any, Any]:
        if output is None:
            recorded = model_json(value) if isinstance(value, BaseModel) else value
            try:
                check_json(recorded, where="output")
            except Exception:
                # Not exact JSON: the ledger records the effect as observed and its
                # output as unrecordable, and the call fails without acting again.
                return value, value
            # What a replay will get back (a model is its JSON, an enum member its
            # value), so that the first run gets the same.
            return json.loads(json.dumps(recorded)), recorded
        recorded = output.model_validate(value).model_dump(mode="json")
        # What a replay will get back, so that the first run gets the same.
        return read(recorded), recorded

    schema = None if output is None else output.model_json_schema()
    return _InnerCall(
        tool=name,
        call_id=name,
        payload={"call": name, "request": request},
        act=fn,
        record=record,
        read=read,
        output_type=output or _JsonOutput,
        output_schema=schema,
        template=PLACEHOLDER if schema is None else output_template(schema),
        context={"call": name},
        refused=refused,
    )


async def _ledgered_call(inside: Enclosing, call: _InnerCall[_T]) -> _T:
    """One call inside the node ``inside``, under the node's key and the call's id: run,
    replayed, or ended with the ledger's answer (which also ends the node's attempt)."""
    info = inside.info
    name = f"{info.activity_type}.{call.tool}"
    try:
        if not inside.calls_inside:
            # Refused before anything acts, as having had no effect: the node's own key
            # does not park for a mistake in its wiring.
            raise NoEffect(
                f"{info.activity_type}: a call with a key of its own needs the node listed "
                "with activity_rules(..., tool_nodes=[...], per_call=True); nothing was run"
            )
        refused = None
        if not call.call_id:
            refused = f"{name}: the call has no id, so it has no key of its own"
        elif call.refused:
            refused = f"{info.activity_type}: {call.refused}"
        elif call.call_id in inside.call_ids:
            refused = (
                f"{name}: a second call named {call.call_id!r} in one node call would share "
                "the first one's key: give each call a name of its own"
            )
        if refused is not None:
            raise ApplicationError(refused, type=ErrorType.INVALID_REQUEST, non_retryable=True)
        inside.call_ids.add(call.call_id)
        assert info.workflow_id is not None
        key = step_key(
            info.workflow_id,
            inside.anchor.first,
            f"{inside.step}/{call.call_id}",
            continued_from=inside.anchor.continued,
        )
        attempt = Attempt(
            spec=ToolSpec(
                name=name,
                capability=capability_for(name),
                retry_safe=False,
                arg_type=dict,  # only name/capability/retry_safe are read
                # Every call has an output: one compacted away is said so, never read as None.
                output_type=call.output_type,
            ),
            request={
                "key": key,
                "capability": capability_for(name),
                "instruction": call.tool,
                "payload": call.payload,
                "performer": inside.performer,
                "output_schema": call.output_schema,
                "context": call_context(
                    info,
                    first_execution_run_id=inside.anchor.first,
                    continued_run_id=inside.anchor.continued,
                    activity_type=info.activity_type,
                    **call.context,
                ),
            },
            act=lambda ctx: call.act(),
            record=call.record,
            read=lambda outcome: call.read(outcome.output),
            span=call.tool,
            tool=call.tool,
        )
        result: _T = await run_attempt(inside.runtime, attempt)
        return result
    except (ApplicationError, NoEffect) as err:
        failure = _naming_the_call(err, call) if isinstance(err, ApplicationError) else err
        if inside.failure is None:
            inside.failure = failure
        raise failure from None


def _naming_the_call(err: ApplicationError, call: _InnerCall[Any]) -> ApplicationError:
    """An unknown effect's details, saying the key is a call's inside the node."""
    if err.type != ErrorType.EFFECT_UNKNOWN or not err.details:
        return err
    unknown = UnknownEffect.model_validate(err.details[0])
    inner = InnerCall(
        tool=call.tool,
        call_id=call.call_id,
        template=call.template,
        output_schema=call.output_schema,
        arguments=call.payload.get("args", call.payload.get("request")),
    )
    return ApplicationError(
        err.message,
        unknown.model_copy(update={"inner": inner}).model_dump(),
        type=err.type,
        non_retryable=True,
        category=ApplicationErrorCategory.BENIGN,
    )
