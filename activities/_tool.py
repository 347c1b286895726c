"""``@tool``: a ledgered Temporal activity from an async function of one pydantic model."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import inspect
import typing
from collections.abc import Awaitable, Callable
from datetime import timedelta
from enum import StrEnum
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from ..ledger import (
    APPROVAL_REJECTED,
    APPROVAL_REQUIRED,
    ActionInProgressError,
    ActionRequest,
    ActionResult,
    ActionStatus,
    EffectState,
    ExecutionContext,
    IdempotencyConflictError,
    InvalidRequest,
    LedgerUnavailable,
    Verdict,
    may_act_again,
)
from . import _payloads as p
from ._probe import Probe
from ._runtime import Runtime, _execution, current_runtime
from ._tracing import CallSpan, call_span, current_call

ArgT = TypeVar("ArgT", bound=BaseModel)
OutT = TypeVar("OutT")


@dataclasses.dataclass(frozen=True)
class ToolSpec(Generic[ArgT, OutT]):
    """What the workflow side needs to know about a tool (no I/O, sandbox-safe)."""

    name: str
    capability: str
    retry_safe: bool
    arg_type: type[ArgT]
    output_type: type[BaseModel] | None
    #: Every call needs a person's approval of its exact request before it may act.
    requires_approval: bool = False
    #: The tool has a probe (kept on the activity, see ``tool(probe=...)``).
    has_probe: bool = False
    #: The probe's ``absent`` is conclusive: the far side would show any operation.
    probe_absence_conclusive: bool = False

    @functools.cached_property
    def output_schema(self) -> dict[str, Any] | None:
        """The output model's JSON schema, recorded with every execution so that an
        operator's ``effect_confirmed`` output can be checked without the tool's code."""
        return None if self.output_type is None else self.output_type.model_json_schema()


class Tool(Generic[ArgT, OutT]):
    """A ledgered tool: register it as an activity, call it with ``run_tool``."""

    __ledger_tool__: ToolSpec[ArgT, OutT]

    async def __call__(self, call: p.ToolCall) -> p.ToolOutcome: ...


def tool(
    *,
    capability: str,
    retry_safe: bool = False,
    state: Callable[[Any], Any] | None = None,
    name: str | None = None,
    requires_approval: bool = False,
    probe: Probe | None = None,
    probe_absence_conclusive: bool = False,
) -> Callable[[Callable[[ArgT], Awaitable[OutT]]], Tool[ArgT, OutT]]:
    """Make a ledgered activity of ``async def fn(arg: Model) -> Output | None``.

    Every attempt goes through the ledger: an identical call under the same key
    replays, a different one is refused, an unknown effect parks the workflow step.
    ``retry_safe`` declares that the far side deduplicates by the idempotency key
    (see :func:`tool_context`), so an unknown effect may be retried under that key.
    ``state`` reads the current state that a call's precondition is compared with.

    ``requires_approval``: each execution waits for a person's approval of its exact
    request (update ``approve``). ``probe``: ``async def probe(key, arg)`` that looks the
    key up on the far side without acting, and answers ``present(output, evidence)``,
    ``absent(evidence)`` or ``inconclusive()``; it runs before an unknown effect parks.
    ``absent`` frees the key to act again only with ``probe_absence_conclusive=True``.
    """
    if not isinstance(capability, str) or not capability:
        raise TypeError("tool(capability=...) needs a dotted capability name")
    if probe is not None and not inspect.iscoroutinefunction(probe):
        raise TypeError("tool(probe=...) needs an async function probe(key, arg)")
    if probe_absence_conclusive and probe is None:
        raise TypeError("tool(probe_absence_conclusive=True) needs a probe=")

    def decorate(fn: Callable[[ArgT], Awaitable[OutT]]) -> Tool[ArgT, OutT]:
        if not inspect.iscoroutinefunction(fn):
            raise TypeError(f"@tool needs an async function; {fn.__qualname__} is not")
        arg_type, output_type = _signature(fn)
        spec: ToolSpec[ArgT, OutT] = ToolSpec(
            name=name or fn.__name__,
            capability=capability,
            retry_safe=retry_safe,
            arg_type=arg_type,
            output_type=output_type,
            requires_approval=requires_approval,
            has_probe=probe is not None,
            probe_absence_conclusive=probe_absence_conclusive,
        )
        # Fail at decoration, not in the first workflow, if the name is not a capability.
        ActionRequest(key="k", capability=capability, instruction=spec.name, performer="p")

        # The argument is taken as plain JSON so that a call that did not come from
        # run_tool is answered with what to do instead of a conversion error retried forever.
        async def run(call: Any) -> p.ToolOutcome:
            return await _run_ledgered(spec, fn, state, _tool_call(spec, call))

        run.__name__ = run.__qualname__ = spec.name
        run.__doc__ = fn.__doc__
        ledgered = activity.defn(name=spec.name)(run)
        ledgered.__ledger_tool__ = spec  # type: ignore[attr-defined]
        ledgered.__ledger_probe__ = probe  # type: ignore[attr-defined]
        return typing.cast(Tool[ArgT, OutT], ledgered)

    return decorate


def _tool_call(spec: ToolSpec[Any, Any], raw: Any) -> p.ToolCall:
    try:
        return p.ToolCall.model_validate(raw)
    except ValidationError:
        raise ApplicationError(
            f"{spec.name} is a ledgered @tool: call it from a workflow with "
            f"temporal_ledger.workflows.run_tool({spec.name}, arg, step=..., performer=...), "
            "not with workflow.execute_activity",
            type=p.ErrorType.INVALID_REQUEST,
            non_retryable=True,
        ) from None


def argument_of(spec: ToolSpec[ArgT, Any], raw: Any, *, refused: p.ErrorType) -> ArgT:
    """The tool's argument model from its JSON; a non-retryable ``refused`` if it does not fit."""
    try:
        return spec.arg_type.model_validate(raw or {})
    except ValidationError as exc:
        raise ApplicationError(
            f"{spec.name}: argument does not fit {spec.arg_type.__name__}: {exc}",
            type=refused,
            non_retryable=True,
        ) from None


def spec_of(tool: Any) -> ToolSpec[Any, Any]:
    """The spec of a ``@tool`` (or a bare :class:`ToolSpec`, for activities built elsewhere)."""
    if isinstance(tool, ToolSpec):
        return tool
    spec = getattr(tool, "__ledger_tool__", None)
    if not isinstance(spec, ToolSpec):
        raise TypeError(f"{tool!r} is not a @tool; decorate it with activities.tool(...)")
    return spec


def _signature(fn: Callable[..., Any]) -> tuple[type[Any], type[BaseModel] | None]:
    hints = typing.get_type_hints(fn)
    params = list(inspect.signature(fn).parameters)
    if len(params) != 1 or params[0] not in hints:
        raise TypeError(f"@tool {fn.__qualname__} must take exactly one annotated argument")
    arg_type = hints[params[0]]
    if not (inspect.isclass(arg_type) and issubclass(arg_type, BaseModel)):
        raise TypeError(f"@tool {fn.__qualname__}: its argument must be a pydantic model")
    output = hints.get("return", type(None))
    if output is type(None) or output is None:
        return arg_type, None
    if not (inspect.isclass(output) and issubclass(output, BaseModel)):
        raise TypeError(f"@tool {fn.__qualname__} must return a pydantic model or None")
    return arg_type, output


async def _run_ledgered(
    spec: ToolSpec[Any, Any],
    fn: Callable[[Any], Awaitable[Any]],
    state: Callable[[Any], Any] | None,
    call: p.ToolCall,
) -> p.ToolOutcome:
    runtime = current_runtime()
    info = activity.info()
    arg = argument_of(spec, call.arg, refused=p.ErrorType.INVALID_REQUEST)

    async def adapter(request: ActionRequest, ctx: ExecutionContext) -> Any:
        current_call().set("lease_token", ctx.fencing_token)
        token = _execution.set(ctx)
        try:
            output = await fn(arg)
        finally:
            _execution.reset(token)
        if spec.output_type is not None and not isinstance(output, spec.output_type):
            output = spec.output_type.model_validate(output)
        return output

    async def read_state(request: ActionRequest) -> Any:
        assert state is not None
        value = state(arg)
        return await value if inspect.isawaitable(value) else value

    request = {
        "key": call.key,
        "capability": spec.capability,
        "instruction": spec.name,
        "payload": call.arg or {},
        "precondition": call.precondition,
        "performer": call.performer,
        "output_schema": spec.output_schema,
        "context": {
            "workflow_id": info.workflow_id,
            "namespace": info.workflow_namespace,
            "workflow_run_id": info.workflow_run_id,
            "activity_id": info.activity_id,
            "attempt": info.attempt,
            "step": call.step,
        },
    }
    spec = treated(spec, runtime)
    with call_span(spec.name, call.key, content=runtime.trace_content) as span:
        describe_request(span, request)
        result = await execute_ledgered(
            runtime,
            request,
            spec=spec,
            performer=call.performer,
            adapter=adapter,
            state=read_state if state is not None else None,
        )
        return _outcome_or_raise(spec, result, runtime, request=request)


def treated(
    spec: ToolSpec[ArgT, OutT],
    runtime: Runtime,
    *,
    tool: str | None = None,
    hints: p.ToolHints | None = None,
) -> ToolSpec[ArgT, OutT]:
    """The spec as the policy has it handled: the tool's declaration, weighed against its
    hints, with the ``[tools]`` table's last word."""
    treatment = runtime.policy.treatment(
        capability=spec.capability,
        retry_safe=spec.retry_safe,
        requires_approval=spec.requires_approval,
        tool=tool or spec.name,
        hints=hints,
    )
    if (treatment.retry_safe, treatment.requires_approval) == (
        spec.retry_safe,
        spec.requires_approval,
    ):
        return spec
    return dataclasses.replace(
        spec, retry_safe=treatment.retry_safe, requires_approval=treatment.requires_approval
    )


async def execute_ledgered(
    runtime: Runtime,
    request: dict[str, Any],
    *,
    spec: ToolSpec[Any, Any],
    performer: str,
    adapter: Callable[[ActionRequest, ExecutionContext], Any],
    state: Callable[[ActionRequest], Any] | None = None,
) -> ActionResult:
    """One activity attempt through the ledger, heartbeating while it runs.

    The ledger's refusals become typed ``ApplicationError`` s: final ones
    non-retryable, an in-progress key or an unreachable ledger retryable.
    """
    heartbeat = asyncio.create_task(_heartbeat(activity.info().heartbeat_timeout))
    try:
        return await runtime.ledger.execute(
            request,
            authority=runtime.policy.authority_for(performer),
            adapter=adapter,
            state=state,
            retry_safe=spec.retry_safe,
            requires_approval=spec.requires_approval,
        )
    except IdempotencyConflictError as exc:
        count_call(spec.name, CallOutcome.REFUSED)
        current_call().set("conflict.dimensions", list(exc.dimensions))
        current_call().set("original_action_id", exc.original_action_id)
        details = p.ConflictDetails(
            key=exc.key,
            original_action_id=exc.original_action_id,
            dimensions=list(exc.dimensions),
            fingerprint_version=exc.fingerprint_version,
        )
        raise ApplicationError(
            str(exc), details.model_dump(), type=p.ErrorType.CONFLICT, non_retryable=True
        ) from None
    except ActionInProgressError as exc:
        raise ApplicationError(
            str(exc),
            type=p.ErrorType.IN_PROGRESS,
            next_retry_delay=timedelta(seconds=max(exc.lease_remaining, 0.1)),
            category=ApplicationErrorCategory.BENIGN,
        ) from None
    except InvalidRequest as exc:
        count_call(spec.name, CallOutcome.FAILED)
        raise ApplicationError(
            f"{spec.name}: {exc}", type=p.ErrorType.INVALID_REQUEST, non_retryable=True
        ) from None
    except LedgerUnavailable as exc:
        raise ApplicationError(str(exc), type=p.ErrorType.LEDGER_UNAVAILABLE) from None
    finally:
        heartbeat.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await heartbeat


def _outcome_or_raise(
    spec: ToolSpec[Any, Any],
    result: ActionResult,
    runtime: Runtime,
    *,
    request: dict[str, Any] | None = None,
) -> p.ToolOutcome:
    record_outcome(spec, result)
    if result.status is ActionStatus.DENIED and result.error_type == APPROVAL_REQUIRED:
        assert request is not None
        needed = p.ApprovalNeeded(
            key=result.key,
            fingerprint=ActionRequest.parse(request).fingerprint(),
            capability=spec.capability,
            performer=request["performer"],
            arguments=request["payload"],
            approvers=runtime.policy.approvers,
            keys=runtime.policy.keys,
            signature_required=runtime.policy.signed_decisions,
            address=runtime.address,
            awaiting_approval_attribute=runtime.awaiting_approval_attribute,
        )
        # The workflow waits for the decision (run_tool, or the plugin's interceptor
        # for a ledger_activities call) and says so once: the expected hand-over.
        raise ApplicationError(
            f"{spec.name}: {result.error}",
            needed.model_dump(),
            type=p.ErrorType.AWAITING_APPROVAL,
            non_retryable=True,
            category=ApplicationErrorCategory.BENIGN,
        )
    if result.status is ActionStatus.DENIED and result.error_type == APPROVAL_REJECTED:
        raise ApplicationError(
            f"{spec.name}: {result.error}", type=p.ErrorType.REJECTED, non_retryable=True
        )
    outcome = p.ToolOutcome(
        key=result.key,
        action_id=result.action_id,
        output=result.output,
        replayed=result.replayed,
        reused_from_action_id=result.reused_from_action_id,
    )
    if (
        result.compacted
        and spec.output_type is not None
        and result.status is not (ActionStatus.DENIED)
    ):
        # The step happened long ago and its output is gone: answer, never act again,
        # and say so instead of handing the workflow an output that is not there.
        raise ApplicationError(
            f"{spec.name}: the outcome of {result.key!r} ({result.status.value}) was compacted; "
            "its output is no longer recorded",
            type=p.ErrorType.OUTPUT_COMPACTED,
            non_retryable=True,
        )
    if result.status is ActionStatus.SUCCEEDED:
        return outcome
    if result.verdict is Verdict.EFFECT_CONFIRMED:
        return outcome.model_copy(update={"reconciled": True})
    if result.status is ActionStatus.DENIED:
        # The key is not used up, but the policy that denied this performer still stands.
        raise ApplicationError(
            result.error or "denied", type=p.ErrorType.DENIED, non_retryable=True
        )
    if may_act_again(
        status=result.status,
        effect=result.effect,
        retryable=result.retryable,
        retry_safe=spec.retry_safe,
    ):
        if result.effect is EffectState.UNKNOWN:
            # The far side deduplicates by key: another attempt under it is safe.
            raise ApplicationError(
                result.error or "effect unknown",
                type=p.ErrorType.EFFECT_UNKNOWN_RETRY_SAFE,
                category=ApplicationErrorCategory.BENIGN,
            )
        delay = timedelta(seconds=result.retry_after) if result.retry_after else None
        raise ApplicationError(
            result.error or "no effect",
            type=p.ErrorType.NO_EFFECT_RETRYABLE,
            next_retry_delay=delay,
            category=ApplicationErrorCategory.BENIGN,
        )
    if result.effect is EffectState.UNKNOWN:
        details = p.UnknownEffect(
            key=result.key,
            action_id=result.reused_from_action_id or result.action_id,
            capability=spec.capability,
            error=result.error,
            reconcilers=runtime.policy.reconcilers,
            keys=runtime.policy.keys,
            signature_required=runtime.policy.signed_verdicts,
            address=runtime.address,
            open_effects_attribute=runtime.open_effects_attribute,
            probe=spec.has_probe,
        )
        # The workflow parks the step and says so once; the activity's failure is the
        # expected hand-over, not an error to log with a traceback.
        raise ApplicationError(
            f"{spec.name}: the effect of {result.key!r} is unknown: {result.error}",
            details.model_dump(),
            type=p.ErrorType.EFFECT_UNKNOWN,
            non_retryable=True,
            category=ApplicationErrorCategory.BENIGN,
        )
    raise ApplicationError(
        f"{spec.name}: {result.error or 'failed'}", type=p.ErrorType.FAILED, non_retryable=True
    )


class CallOutcome(StrEnum):
    """What a ledgered tool call came to, as counted by the ``ledger_tool_calls`` metric."""

    ACTED = "acted"
    REPLAYED = "replayed"
    REFUSED = "refused"
    DENIED = "denied"
    FAILED = "failed"
    UNKNOWN = "unknown"
    AWAITING_APPROVAL = "awaiting_approval"


def _call_outcome(result: ActionResult) -> CallOutcome:
    if result.replayed:
        return CallOutcome.REPLAYED
    if result.status is ActionStatus.DENIED and result.error_type == APPROVAL_REQUIRED:
        return CallOutcome.AWAITING_APPROVAL
    if result.status is ActionStatus.DENIED:
        return CallOutcome.DENIED
    if result.effect is EffectState.UNKNOWN:
        return CallOutcome.UNKNOWN
    if result.status is ActionStatus.SUCCEEDED:
        return CallOutcome.ACTED
    return CallOutcome.FAILED


def count_call(tool: str, outcome: CallOutcome) -> None:
    """One tool call by outcome: the metric (through the worker runtime's metric meter),
    and the call's span."""
    activity.metric_meter().create_counter(
        "ledger_tool_calls", "ledgered tool calls by outcome"
    ).add(1, {"tool": tool, "outcome": outcome.value})
    current_call().set("outcome", outcome.value)


def record_outcome(spec: ToolSpec[Any, Any], result: ActionResult) -> None:
    """What the ledger answered a call: counted, and described on the call's span."""
    count_call(spec.name, _call_outcome(result))
    describe_result(current_call(), result)


def describe_request(span: CallSpan, request: dict[str, Any]) -> None:
    """What the call asks for, on its span: the fingerprint, and the arguments if opted in."""
    if span.recording:
        span.set("fingerprint", ActionRequest.parse(request).fingerprint())
        span.set_content("arguments", request.get("payload"))


def describe_result(span: CallSpan, result: ActionResult) -> None:
    """What the ledger answered, on the call's span."""
    span.set("action_id", result.action_id)
    span.set("reused_from_action_id", result.reused_from_action_id)
    span.set("effect", result.effect.value)
    if result.status is ActionStatus.SUCCEEDED or result.verdict is Verdict.EFFECT_CONFIRMED:
        span.set_content("result", result.output)


async def _heartbeat(every: timedelta | None) -> None:
    """Keep Temporal informed that this worker is alive while the ledger runs the tool."""
    if not every:
        return
    interval = max(every.total_seconds() / 3, 0.05)
    while True:
        # Sleep first: a tool that finishes within the interval costs no heartbeat RPC.
        await asyncio.sleep(interval)
        activity.heartbeat()
