"""The calls a LangGraph node makes through the ledger under keys of their own
(``activities.langgraph.ledger_tool_calls`` and ``ledger_call``): each described as an
:class:`InnerCall` and run by ``_attempt.run_attempt`` under the node's key and the call's
id; the ledger's answer that ends the call also ends the node's attempt."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar, cast

from pydantic import BaseModel, ConfigDict, RootModel
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from ..ledger import NoEffect
from ..ledger._seam import check_json, model_json, output_template
from ..workflows._seam import PLACEHOLDER, ErrorType, Tool, UnknownEffect
from ..workflows._seam import InnerCall as _InnerCallDetails
from ._attempt import Attempt, run_attempt
from ._generic import Enclosing, enclosing

if TYPE_CHECKING:
    from langchain_core.messages import ToolMessage
    from langgraph.prebuilt.tool_node import ToolCallRequest
    from langgraph.types import Command

_T = TypeVar("_T")


class _ToolCallOutput(BaseModel):
    """What the ledger records of a tool call: its ``ToolMessage`` without the ids the call
    already has. An operator's ``effect_confirmed`` output has this shape too."""

    model_config = ConfigDict(extra="forbid", title="ToolCallOutput")

    content: str | list[str | dict[str, Any]]
    artifact: Any = None
    status: Literal["success", "error"] = "success"


_TOOL_CALL_SCHEMA = _ToolCallOutput.model_json_schema()


class _JsonOutput(RootModel[Any]):
    """A call's output, as its spec has it: any JSON."""


_TOOL_CALL_TEMPLATE = {"content": PLACEHOLDER}


@dataclasses.dataclass(frozen=True)
class InnerCall(Generic[_T]):
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
    #: What an operator's output must fit, and the template of it.
    output_schema: dict[str, Any] | None
    template: Any
    #: Recorded with the request, never fingerprinted.
    context: dict[str, Any]
    #: Why the call is refused before it runs (a mistake in the code that makes it).
    refused: str | None = None


def run_inside(what: str, call: InnerCall[Any], *, blocking: bool) -> Any:
    """``call`` in the ledgered node activity around the caller: a coroutine to await, or,
    ``blocking`` (a sync caller, on a thread of its own), its result, run on the
    activity's event loop."""
    inside = enclosing.get()
    if inside is None:
        raise RuntimeError(
            f"{what} runs calls through the ledger of the node activity around them, and "
            "no ledgered activity is running: list the node in "
            "activity_rules(..., tool_nodes=[...], per_call=True) for LedgerPlugin"
        )
    if not blocking:
        return ledgered_call(inside, call)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run_coroutine_threadsafe(ledgered_call(inside, call), inside.loop).result()
    raise RuntimeError(
        f"{what} was called on the event loop with a function that is not async: give the "
        "ToolNode awrap_tool_call=ledger_tool_calls too"
    )


def tool_call(
    request: ToolCallRequest, run: Callable[[], Awaitable[ToolMessage | Command[Any]]]
) -> InnerCall[ToolMessage]:
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
        fields = {field: getattr(message, field) for field in _ToolCallOutput.model_fields}
        return message, _ToolCallOutput(**fields).model_dump(mode="json")

    def read(recorded: Any) -> ToolMessage:
        output = _ToolCallOutput.model_validate(recorded)
        return ToolMessage(**dict(output), tool_call_id=call_id, name=name)

    return InnerCall(
        tool=name,
        # Refused by ledgered_call, before anything runs, when the model gave no id.
        call_id=call_id if isinstance(call_id, str) else "",
        payload={"tool": name, "args": call.get("args")},
        act=run,
        record=record,
        read=read,
        output_schema=_TOOL_CALL_SCHEMA,
        template=_TOOL_CALL_TEMPLATE,
        context={"tool": name, "tool_call_id": call_id},
    )


def named_call(
    name: str, fn: Callable[[], Awaitable[Any]], request: object, output: type[BaseModel] | None
) -> InnerCall[Any]:
    """A call that node code makes with :func:`ledger_call`, keyed by its name."""
    refused = None
    if not isinstance(name, str) or not name or "/" in name or not name.isprintable():
        refused = f"a call's name must be printable text without '/', not {name!r}"
        name = repr(name)
    elif output is not None and not (isinstance(output, type) and issubclass(output, BaseModel)):
        refused = f"{name}: output must be a pydantic model class, not {output!r}"
        output = None

    def read(recorded: Any) -> Any:
        return recorded if output is None else output.model_validate(recorded)

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
    return InnerCall(
        tool=name,
        call_id=name,
        payload={"call": name, "request": request},
        act=fn,
        record=record,
        read=read,
        output_schema=schema,
        template=PLACEHOLDER if schema is None else output_template(schema),
        context={"call": name},
        refused=refused,
    )


async def ledgered_call(inside: Enclosing, call: InnerCall[_T]) -> _T:
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
        refused = call.refused and f"{info.activity_type}: {call.refused}"
        if not call.call_id:
            refused = f"{name}: the call has no id, so it has no key of its own"
        elif call.call_id in inside.call_ids:
            refused = (
                f"{name}: a second call named {call.call_id!r} in one node call would share "
                "the first one's key: give each call a name of its own"
            )
        if refused:
            raise ApplicationError(refused, type=ErrorType.INVALID_REQUEST, non_retryable=True)
        inside.call_ids.add(call.call_id)
        step = f"{inside.step}/{call.call_id}"
        request = inside.request(step, name, call.tool, call.payload, **call.context)
        attempt = Attempt(
            # Not retry-safe; only name, capability and retry_safe are read, and that there
            # is an output model: every call has an output, and one compacted away is said
            # so, never read as None.
            spec=Tool(name, request["capability"], False, dict, _JsonOutput),
            request={**request, "output_schema": call.output_schema},
            act=lambda ctx: call.act(),
            record=call.record,
            read=lambda outcome: call.read(outcome.output),
            tool=call.tool,
        )
        return cast(_T, await run_attempt(inside.runtime, attempt))
    except (ApplicationError, NoEffect) as err:
        failure = _naming_the_call(err, call) if isinstance(err, ApplicationError) else err
        if inside.failure is None:
            inside.failure = failure
        raise failure from None


def _naming_the_call(err: ApplicationError, call: InnerCall[Any]) -> ApplicationError:
    """An unknown effect's details, saying the key is a call's inside the node."""
    if err.type != ErrorType.EFFECT_UNKNOWN or not err.details:
        return err
    unknown = UnknownEffect.model_validate(err.details[0])
    inner = _InnerCallDetails(
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
