"""What a LangGraph node's call is and what answers it: the fingerprint of a node's input
(without what LangGraph mints per run) and the checks of an operator's state update
against the node's input state and the graph's channels (``activities.langgraph``)."""

from __future__ import annotations

import contextvars
import dataclasses
import functools
from typing import Any

from pydantic import ValidationError

from ..workflows._seam import PLACEHOLDER, Answer
from ._rules import without


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
        key, pending = _pending_tool_calls(state) or (None, [])
        allowed = frozenset(state) | _graph_channels(self.graph)
        answers = [
            {"type": "tool", "tool_call_id": c["id"], "name": c["name"], "content": PLACEHOLDER}
            for c in pending
        ]
        asked = [
            {"name": c["name"], "arguments": c.get("args"), "tool_call_id": c["id"]}
            for c in pending
        ]

        def unusable(result: Any) -> str | None:
            update = result.get("result") if isinstance(result, dict) else None
            if not isinstance(update, dict) or result.get("langgraph_command") is not None:
                return None
            # Keys the graph has no channel for are dropped by LangGraph: not a failure.
            # A node's own update may give add_messages one message, not a list.
            problem = _type_problem(state, {k: v for k, v in update.items() if k != key})
            if problem is None and key is not None and key in update:
                problem = _messages_problem(state, key, update[key])
            return problem

        return Answer(
            template={key: answers} if pending else PLACEHOLDER,
            tool_calls=asked,
            misfit=functools.partial(_answer_problem, state, allowed, key, pending),
            unusable=unusable,
        )


def _not_an_update(output: Any) -> str:
    return (
        "the node's answer is its state update, a JSON object such as "
        f'{{"messages": [...]}}, not {_json_kind(output)}'
    )


#: JSON's kinds of value: their Python types, what an error calls them, their schema type.
_KINDS = (
    (bool, "a boolean", "boolean"),
    ((int, float), "a number", "number"),
    (str, "a string", "string"),
    (dict, "an object", "object"),
    (list, "an array", "array"),
)


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    kinds = (said for types, said, _ in _KINDS if isinstance(value, types))
    return next(kinds, f"a {type(value).__name__}")


_SCHEMA_TYPES = {said: schema for _, said, schema in _KINDS}


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
        # Not an enum: a message's tag is its type alone, so a wrong id is named as such.
        ids = {"anyOf": [{"const": call["id"]} for call in pending]}
        tool = _object(type={"const": "tool"}, content=content, tool_call_id=ids)
        other = _object(type={"enum": _OTHER_MESSAGE_TYPES}, content=content)
        properties[key] = {"type": "array", "items": {"anyOf": [tool, other]}}
    return {"type": ["object", "null"], "properties": properties}


def _object(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(properties)}


def _graph_channels(graph: str) -> frozenset[str]:
    """The channels of the graph registered as ``graph``, read in the workflow; none
    outside one (an answer's keys are then those of the node's input state)."""
    try:
        from temporalio.langgraph import graph as registered

        # graph() also resets the plugin's task cache in the current context: a copy
        # keeps the running graph's.
        builder = contextvars.copy_context().run(registered, graph)
        return frozenset(name for name in builder.channels if isinstance(name, str))
    except Exception:  # not in a workflow, or no such graph (or none named)
        return frozenset()


def _type_problem(state: dict[str, Any], update: dict[str, Any]) -> str | None:
    """Why a value of ``update`` cannot go where the state holds another JSON type: the
    channel's reducer (``operator.add``, ``add_messages``) would fail on it."""
    wrong = (
        f"{_shown_key(name)}: {_json_kind(value)}, where the state holds {_json_kind(current)}"
        for name, value in update.items()
        if (current := state.get(name)) is not None and _json_kind(value) != _json_kind(current)
    )
    return next(wrong, None)


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
        asking: dict[str, Any] = next((m for m in reversed(value) if m["type"] in _AI_TYPES), {})
        calls = asking.get("tool_calls")
        return key, [
            call
            for call in (calls if isinstance(calls, list) else [])
            if isinstance(call, dict)
            and isinstance(call.get("id"), str)
            and isinstance(call.get("name"), str)
            and call["id"] not in answered
        ]
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
    unknown = next((name for name in output if name not in allowed), None)
    if unknown is not None:
        keys = ", ".join(sorted(allowed))
        return f"{_shown_key(unknown)}: not a key of the graph's state (its keys: {keys})"
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
    answers = [
        (i, m.tool_call_id)
        for i, m in enumerate(convert_to_messages(given))
        if isinstance(m, ToolMessage)
    ]
    for i, call_id in answers:
        if call_id not in ids:
            return (
                f"{key}[{i}].tool_call_id: {call_id!r} is not a pending call of this node "
                f"(pending: {', '.join(sorted(ids))})"
            )
    answered = {call_id for _, call_id in answers}
    missing = [f"{call_id} ({name})" for call_id, name in ids.items() if call_id not in answered]
    return f"{key}: no tool message answers the call {', '.join(missing)}" if missing else None


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
    try:  # a list of messages: what add_messages takes
        current: Any = convert_to_messages(state[key])
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


def normalize(activity_type: str, args: list[Any]) -> dict[str, Any]:
    """The fingerprinted identity of a node call: its input and the graph's context.

    The plugin sends ``{"args", "kwargs", "langgraph_config"}``. The config's run id,
    checkpoint ids, task id and scratchpad are LangGraph's per-run bookkeeping and
    change on a reset, so they are not identity; the runnable config a node asked for
    (``kwargs["config"]``) carries the same. So is the ``id`` of each message in the
    node's input (:func:`_message_ids`). Arguments of another shape (another
    version) are fingerprinted whole: a spurious conflict refuses loudly, a too-lenient
    fingerprint would replay silently.
    """
    if len(args) == 1 and isinstance(args[0], dict) and {"args", "kwargs"} <= set(args[0]):
        call = args[0]
        kwargs = call["kwargs"] if isinstance(call["kwargs"], dict) else {}
        config = call.get("langgraph_config")
        return {
            "input": without(call["args"], _message_ids),
            "kwargs": without(
                {k: v for k, v in kwargs.items() if k not in ("config", "runtime")}, _message_ids
            ),
            "context": config.get("context") if isinstance(config, dict) else None,
        }
    return {"args": args}


#: The fields every langchain message has when the plugin's pydantic converter sends it.
_MESSAGE_FIELDS = frozenset({"content", "additional_kwargs", "response_metadata", "type", "id"})


def _message_ids(name: str | None, value: dict[str, Any]) -> tuple[str, ...]:
    """The ``id`` of a langchain message, wherever it sits, is left out of a fingerprint.

    LangGraph's ``add_messages`` gives each message that has no id a ``uuid4()``, drawn in
    the workflow: a reset run draws others, and so would a fingerprint that kept them.
    No model or tool reads a message's id: a model reads content, role, name and tool
    calls, a tool its call's arguments, and the links between messages are the tool
    calls' ids (``tool_calls[].id``, ``tool_call_id``), which stay. A ``RemoveMessage``
    (``type == "remove"``) keeps its id: the id is what it removes.
    """
    message = _MESSAGE_FIELDS <= value.keys() and value.get("type") != "remove"
    return ("id",) if message else ()
