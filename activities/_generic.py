"""Activities not written with ``@tool`` (e.g. pydantic-ai's), put through the ledger.

``LedgerPlugin(ledger_activities=[...])`` runs every activity whose type matches one of
its glob patterns as the :func:`activity_attempt` it describes (through
``_attempt.run_attempt``, the one path of every ledgered call). The activity's arguments (as the
JSON of the payloads Temporal delivered, see ``_delivered``) become the request, its
return value (as JSON, through the worker's payload converter) the recorded outcome, and
a later attempt under the same key gets the recorded value back, decoded to the
activity's return type, instead of running the activity again.

The key is ``{workflow_id}/{first_execution_run_id}/{call}`` (with the previous run of
a continue-as-new or cron chain inserted when there is one). ``activity.info()`` does
not carry the first execution's run id, so the plugin's workflow interceptor puts it in
a header of every activity the workflow schedules, with ``call``. Why these parts:

* ``call`` numbers the activities the workflow schedules in order ("1", "2", ...), as
  Temporal's activity id does, but leaves out the ledger's own (recording a verdict,
  another attempt of a parked call: see ``workflows._scheduling``), which only a run
  that waited schedules. So the same call of a deterministic workflow has the same
  number after a worker crash, on every retry of the activity, and in the new run a
  ``temporal workflow reset`` creates, whether or not the original run parked.
* ``workflow_run_id`` changes on reset, so keying on it would run every effect again;
  ``first_execution_run_id`` is copied into the reset run, so it does not.
* ``workflow_id`` alone is not enough: a workflow id reused (after the first execution
  closed) for a new execution would then replay the old execution's outcomes, or be
  refused as a conflict. A new execution has a new first execution run id.
* A continue-as-new (or cron, or workflow-retry) run restarts activity ids at "1"
  with the same first execution run id, so the run it continued from is part of the
  key; a reset run keeps that value too.

A header without ``call`` (from a workflow worker before it) keys by the activity id.
An activity scheduled without the header (the workflow worker lacks the interceptor)
is refused, non-retryably, before anything runs: no key that is both stable and unique
can be formed without it, and acting without one would be guessing.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import contextvars
import dataclasses
import fnmatch
import functools
import json
import re
import typing
from collections.abc import Callable, Sequence
from typing import Any

from temporalio import activity
from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput

from ..ledger._seam import ExecutionContext, canonical_dump, step_key
from ..workflows._seam import (
    ANCHOR_HEADER,
    HINTS_HEADER,
    ErrorType,
    RunAnchor,
    Tool,
    ToolHints,
    ToolOutcome,
    read_args,
    served_by,
)
from . import _mcp
from ._attempt import Attempt, LostReply, call_context
from ._delivered import delivered_arguments
from ._failures import failed_before_acting
from ._rules import LedgeredActivity
from ._runtime import Runtime, final


@dataclasses.dataclass
class Enclosing:
    """The ledgered activity running now, for calls made inside it under keys of their own
    (``activities.langgraph.ledger_tool_calls`` and ``ledger_call``)."""

    runtime: Runtime
    info: activity.Info
    anchor: RunAnchor
    #: The activity's own step in its key: its call number (or activity id).
    step: str
    #: The activity's event loop, for calls made on another thread.
    loop: asyncio.AbstractEventLoop = dataclasses.field(default_factory=asyncio.get_running_loop)
    #: The rule says the calls inside have keys of their own (the activity is retry-safe).
    calls_inside: bool = dataclasses.field(default=False, kw_only=True)
    #: The first of the ledger's answers to a call inside that ends this attempt.
    failure: BaseException | None = None
    #: The ids of the calls made inside this attempt so far, each a key of its own.
    call_ids: set[str] = dataclasses.field(default_factory=set)

    def request(
        self, step: str, name: str, instruction: str, payload: Any, **context: Any
    ) -> dict[str, Any]:
        """What a call of this activity (``name``: the activity, or a call inside it) asks
        the ledger under ``step``; ``context`` is recorded, never fingerprinted."""
        info, anchor = self.info, self.anchor
        assert info.workflow_id is not None
        return {
            "key": step_key(info.workflow_id, anchor.first, step, continued_from=anchor.continued),
            "capability": capability_for(name),
            "instruction": instruction,
            "payload": payload,
            "performer": info.workflow_type or "unknown-workflow",
            "context": call_context(
                info,
                first_execution_run_id=anchor.first,
                continued_run_id=anchor.continued,
                activity_type=info.activity_type,
                **context,
            ),
        }


#: The ledgered activity whose code runs now, if any.
enclosing: contextvars.ContextVar[Enclosing | None] = contextvars.ContextVar(
    "ledger_enclosing", default=None
)


# -- the activity side -----------------------------------------------------------------


def capability_for(activity_type: str) -> str:
    """``agent__support__model_request`` -> ``activity.agent.support.model_request``."""
    segments = (re.sub(r"[^A-Za-z0-9_-]", "_", s) for s in re.split(r"__|\.", activity_type))
    parts = [s if re.match(r"[A-Za-z_]", s) else "_" + s for s in segments if s]
    return ".".join(["activity", *parts])


def _header(headers: typing.Mapping[str, Payload], name: str, parse: Callable[[bytes], Any]) -> Any:
    """The header ``name`` as ``parse`` reads it; ``None`` if absent or unreadable."""
    payload = headers.get(name)
    try:
        return None if payload is None else parse(payload.data)
    except ValueError:  # pydantic's ValidationError and JSON's errors are ValueErrors
        return None


def _to_json(payload: Payload) -> Any:
    encoding = payload.metadata.get("encoding", b"")
    if encoding == b"json/plain":
        return json.loads(payload.data)
    if encoding == b"binary/null":
        return None
    # Bytes, protobuf and the like: keep the exact payload, readable as JSON.
    return {"$payload": base64.b64encode(payload.SerializeToString(deterministic=True)).decode()}


def _from_json(value: Any) -> Payload:
    if isinstance(value, dict) and set(value) == {"$payload"}:
        payload = Payload()
        payload.ParseFromString(base64.b64decode(str(value["$payload"])))
        return payload
    if value is None:
        return Payload(metadata={"encoding": b"binary/null"})
    return Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(value).encode())


def _return_type(fn: Callable[..., Any]) -> Any:
    try:
        return typing.get_type_hints(fn).get("return")
    except Exception:
        # An annotation that does not resolve: decode without a type (plain JSON values).
        return None


def _output_schema(rule: LedgeredActivity, fn: Callable[..., Any], args: list[Any]) -> Any:
    """The JSON schema an operator's output for this call must fit, or ``None``."""
    describe = getattr(rule.output, "output_schema", None)
    if describe is None:  # a shape of the user's that does not say
        return None
    try:
        return describe(_return_type(fn), args)
    except Exception as exc:
        # Arguments of a shape it cannot read (another version of the framework): the
        # workflow still converts an answer before recording it, but the CLI's path has
        # no check, which an operator of this worker should hear of.
        activity.logger.warning(
            f"{activity.info().activity_type}: no schema for an operator's answer: {exc!r}"
        )
        return None


def _delivered_json(activity_type: str, values: Sequence[Any]) -> list[Any]:
    """The activity's arguments as JSON, read from the payloads Temporal delivered: never
    by encoding ``values`` again, which would consume a value that can be read once (see
    ``_delivered``) and hand the activity what is left of it."""
    payloads = delivered_arguments(values)
    if payloads is None:
        raise final(
            f"{activity_type}: cannot be ledgered: the payloads Temporal delivered its "
            "arguments in were not seen, so the call cannot be fingerprinted as it was sent. "
            "Put the ledger plugin on the client (its workers inherit it), after any plugin "
            "that replaces the whole data converter.",
            ErrorType.INVALID_REQUEST,
        )
    try:
        # Sets in canonical order; the ledger refuses what JSON cannot hold exactly (a NaN).
        return [
            canonical_dump(value, _to_json(payload))
            for value, payload in zip(values, payloads, strict=True)
        ]
    except Exception as exc:
        raise final(
            f"{activity_type}: arguments are not JSON: {exc}", ErrorType.INVALID_REQUEST
        ) from None


def activity_attempt(
    runtime: Runtime,
    input: ExecuteActivityInput,
    next: ActivityInboundInterceptor,
    rule: LedgeredActivity,
) -> Attempt:
    """One attempt of an activity as ``_attempt.run_attempt`` runs it: act once
    (``next.execute_activity(input)``, its return value recorded as JSON), replay
    afterwards (the recorded value decoded to the activity's return type)."""
    info = activity.info()
    name = info.activity_type
    anchor: RunAnchor | None = _header(input.headers, ANCHOR_HEADER, RunAnchor.model_validate_json)
    if info.workflow_id is None or anchor is None:
        raise final(
            f"{name}: cannot be ledgered: the activity carries no {ANCHOR_HEADER!r} header, "
            "so no key that survives a reset yet is unique per execution can be formed. "
            "Register the ledger plugin on the worker that runs the workflow too (put it on "
            "the client: its workers inherit it).",
            ErrorType.INVALID_REQUEST,
        )
    args = _delivered_json(name, input.args)
    step = anchor.call or info.activity_id
    tool = read_args(rule.tool_name, args)
    tool = tool if isinstance(tool, str) else None
    hints = ToolHints.parse(read_args(rule.hints, args)) or _header(
        input.headers, HINTS_HEADER, lambda data: ToolHints.parse(json.loads(data))
    )
    inside = Enclosing(runtime, info, anchor, step, calls_inside=rule.calls_inside)
    mcp = any(fnmatch.fnmatchcase(name, pattern) for pattern in _MCP_CALLS)
    call = _ActivityCall(input, next, rule, inside, mcp)
    # An MCP call's request metadata is not what the tool is asked to do.
    plain = _mcp.without_meta(args) if call.mcp else args
    request = inside.request(
        step,
        name,
        name,
        rule.normalize(name, args) if rule.normalize else {"args": plain},
        # The tool's name and its server's hints are recorded, never fingerprinted.
        **({"tool": tool} if tool else {}),
        **({"hints": hints.model_dump(by_alias=True)} if hints else {}),
    )
    return Attempt(
        # The activity as a tool, as the rule declares it (before the policy's word).
        spec=Tool(
            name=name,
            capability=request["capability"],
            retry_safe=rule.retry_safe,
            arg_type=dict,  # only name/capability/retry_safe are read
            output_type=None,
            has_probe=rule.probe is not None,
            probe_absence_conclusive=rule.probe_absence_conclusive,
        ),
        request=request,
        act=call.act,
        record=call.record,
        read=call.read,
        tool=tool,
        hints=hints,
        server=served_by(rule, name),
        # What an operator's output must fit, by the activity's real result type (only
        # this side knows it).
        output_schema=lambda: _output_schema(rule, input.fn, args),
        # Declared by the rule as raised before acting; never a call inside's answer (one of
        # the ledger's own errors, or a NoEffect the ledger reads itself).
        before_acting=functools.partial(failed_before_acting, declared=rule.no_effect_errors),
        hand_back=True,
        # A node whose calls have keys of their own changes nothing but through them: when
        # the attempt only asks, the node runs and each of its calls only asks.
        ask_only=False if rule.calls_inside else None,
    )


@dataclasses.dataclass
class _ActivityCall:
    """An activity of another library as the ledger runs it: the activity itself as the
    call, its return value recorded as JSON, a recorded one decoded to its return type."""

    input: ExecuteActivityInput
    next: ActivityInboundInterceptor
    rule: LedgeredActivity
    inside: Enclosing
    #: An MCP tool call whose argument carries ``meta``.
    mcp: bool

    async def act(self, ctx: ExecutionContext) -> Any:
        # The key (and the span's traceparent) reach an MCP server in the request's _meta:
        # added here, where the key is known, after the fingerprint was taken.
        ours = _mcp.request_meta(ctx.key)
        current = _mcp.current.set(ours)
        entered = enclosing.set(self.inside)
        scope = getattr(self.rule, "scope", None)
        input = self.input
        try:
            if self.mcp and input.args:
                first = _mcp.with_meta(input.args[0], ours)
                input = dataclasses.replace(input, args=[first, *input.args[1:]])
            with scope(ctx.key) if scope is not None else contextlib.nullcontext():
                value = await self.next.execute_activity(input)
            if self.inside.failure is not None:
                # A call inside had the ledger's answer that ends this attempt (an unknown
                # effect, an approval to wait for, another try); the code around it (a
                # ToolNode's error handling) may have turned it into a value.
                raise self.inside.failure
            return value
        finally:
            enclosing.reset(entered)
            _mcp.current.reset(current)

    def record(self, value: Any) -> tuple[Any, Any]:
        # Recorded through the same converter Temporal would use to send it to the
        # workflow, so decoding it on replay gives the workflow the same object (a set's
        # items in canonical order; a NaN makes the output one the ledger cannot record).
        sent = activity.payload_converter().to_payload(value)
        recorded = canonical_dump(value, _to_json(sent))
        lost = getattr(self.rule, "lost_reply", None)
        reason = lost(recorded) if lost is not None else None
        if reason:
            raise LostReply(f"{self.inside.info.activity_type}: {reason}")
        # Temporal sends the payload just recorded, not the value encoded a second time: a
        # value that can be read once (an iterator in the result) was read by the encoding.
        return RawValue(sent), recorded

    def read(self, outcome: ToolOutcome) -> Any:
        # An operator's or a probe's effect_confirmed output is the tool's own; the
        # activity returns the framework's record of it.
        output = outcome.output
        recorded = self.rule.output.result(output) if outcome.reconciled else output
        return activity.payload_converter().from_payload(
            _from_json(recorded), _return_type(self.input.fn)
        )


#: The activities that call an MCP tool with a ``meta`` argument: temporalio-mcp's (the
#: OpenAI Agents SDK's ``temporal_mcp_server`` too) and the Agents SDK's older providers'.
_MCP_CALLS = ("temporalio.mcp.*.call-tool", "*-stateless-call-tool-v2", "*-stateful-call-tool-v2")
