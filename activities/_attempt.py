"""One attempt of a ledgered call through the ledger: request, policy, span, ledger,
outcome. Every ledgered call runs through :func:`run_attempt`, whoever defines it: a
``@tool`` (``_tool``), another library's activity (``_generic``, entered from the
plugin's :class:`ActivityInterceptor` here) and a call made inside one under a key of its
own (``langgraph``) each describe their call as an :class:`Attempt` and get back the
call's result or its typed error."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory
from temporalio.worker import (
    ActivityInboundInterceptor,
    ActivityOutboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
)

from ..ledger import (
    ActionInProgressError,
    ActionRequest,
    ActionResult,
    ActionState,
    IdempotencyConflictError,
    InvalidRequest,
    LedgerUnavailable,
    NoEffect,
)
from ..ledger._seam import EffectState, ExecutionContext, FailureType, NextOperation
from ..workflows._seam import (
    ASK_ONLY_HEADER,
    ConflictDetails,
    ErrorType,
    Tool,
    ToolHints,
    ToolOutcome,
    covers,
)
from ._outcomes import CallOutcome, count_call, outcome_or_raise, record_outcome
from ._rules import LedgeredActivity
from ._runtime import Runtime, _runtime, final
from ._tracing import call_span, current_call, describe_request


class LostReply(Exception):
    """The call returned a value that is the framework's report of a call whose outcome
    it does not know (a failed MCP call handed back as a result): not an output to record."""


@dataclasses.dataclass(frozen=True)
class Attempt:
    """One attempt of a ledgered call, as the rule that covers it describes it.

    Attributes:
        spec: The call as a tool, as its rule declares it (the policy's word comes after).
        request: What the call asks the ledger (key, capability, instruction, payload,
            performer, context; precondition and ``output_schema`` where it has them).
        act: Makes the call, once the ledger lets the key act; its exceptions are the
            call's own.
        record: The value ``act`` returned as ``(what the caller gets, the JSON the ledger
            records)``; it raises :class:`LostReply` for a value that reports a lost call.
        read: What the caller gets from the ledger's answer (a replay, an operator's or a
            probe's output), raising where it does not fit.
        tool: The called tool's name for the policy's ``[tools]`` and the call's span
            (default: the spec's).
        hints: The tool's annotations, weighed by the policy.
        server: The server whose tool it is (for the policy's trust in its hints).
        output_schema: What an operator's output must fit, read only for a call that may
            park (not retry-safe by the policy).
        before_acting: Whether an exception of ``act`` is one its rule declares as raised
            only before the call acts: recorded as no effect, handed to Temporal as raised.
        hand_back: Any exception of the call reaches Temporal as raised where the ledger
            lets the key act again (a framework maps its own errors); otherwise only the
            declared ones do, and the others become the ledger's typed errors.
        fresh: A fresh success returns what ``record`` gave the caller; otherwise it too
            is ``read`` from the ledger's answer.
        state: Reads the current state a precondition is compared with.
        ask_only: Whether this attempt only asks (default: as the workflow scheduled it).
    """

    spec: Tool[Any, Any]
    request: dict[str, Any]
    act: Callable[[ExecutionContext], Awaitable[Any]]
    record: Callable[[Any], tuple[Any, Any]]
    read: Callable[[ToolOutcome], Any]
    tool: str | None = None
    hints: ToolHints | None = None
    server: str | None = None
    output_schema: Callable[[], Any] | None = None
    before_acting: Callable[[BaseException], bool] = lambda exc: False
    hand_back: bool = False
    fresh: bool = True
    state: Callable[[ActionRequest], Any] | None = None
    ask_only: bool | None = None


async def run_attempt(runtime: Runtime, attempt: Attempt) -> Any:
    """Run one attempt of a call through the ledger (the policy's treatment, a span, the
    rule that acts at most once per key): the caller's result (fresh, or read from the
    ledger's answer), or the typed ``ApplicationError`` that tells the workflow what comes
    next, or the call's own exception where the key may act again (:attr:`Attempt.hand_back`).
    """
    # The tool's declaration, weighed against its hints (those that relax only where the
    # policy trusts them), with the policy's [tools] table's last word.
    tool = attempt.tool or attempt.spec.name
    treatment = runtime.policy.treatment(
        capability=attempt.spec.capability,
        retry_safe=attempt.spec.retry_safe,
        requires_approval=attempt.spec.requires_approval,
        tool=tool,
        hints=attempt.hints,
        server=attempt.server,
    )
    spec = dataclasses.replace(attempt.spec, **treatment.model_dump())
    request = attempt.request
    # Computed only for a call that may park: the ledger records it and checks verdicts.
    schema = attempt.output_schema() if attempt.output_schema and not spec.retry_safe else None
    if schema is not None:
        request = {**request, "output_schema": schema}
    #: What this attempt's call gave, if it ran: what the caller gets, or its exception.
    ran: dict[str, Any] = {}

    async def adapter(ledger_request: ActionRequest, ctx: ExecutionContext) -> Any:
        current_call().set("lease_token", ctx.fencing_token)
        try:
            value = await attempt.act(ctx)
        except NoEffect:
            raise
        except BaseException as exc:
            declared = attempt.before_acting(exc)
            if declared or attempt.hand_back:
                ran["error"] = exc
            if declared:
                raise NoEffect(f"{type(exc).__name__}: {exc}", retryable=True) from exc
            raise
        try:
            ran["value"], recorded = attempt.record(value)
        except LostReply as exc:
            if attempt.hand_back:
                ran["error"] = exc
            raise
        return recorded

    with call_span(tool, request["key"], content=runtime.trace_content) as span:
        describe_request(span, request)
        result = await execute_ledgered(
            runtime, request, spec, adapter, attempt.state, attempt.ask_only
        )
        fresh = not result.replayed
        if fresh and attempt.fresh and "value" in ran and result.status == "succeeded":
            record_outcome(spec, result)
            return ran["value"]
        unknown = result.effect is EffectState.UNKNOWN
        if fresh and "error" in ran and (result.retryable or (unknown and spec.retry_safe)):
            # The ledger lets this key act again: Temporal (and the framework's own error
            # mapping on the workflow side) gets the call's exception, as without the ledger.
            record_outcome(spec, result)
            raise ran["error"]
        outcome = outcome_or_raise(spec, result, runtime, request=request)
    try:
        return attempt.read(outcome)
    except Exception as exc:
        raise final(
            f"{spec.name}: the recorded output of {request['key']!r} does not fit the "
            f"call's result: {exc}",
            ErrorType.FAILED,
        ) from None


#: Describes one attempt of an activity that a rule covers (``_generic.activity_attempt``,
#: handed in by the plugin: ``_generic`` imports this module, so this one cannot import it).
Describe = Callable[
    [Runtime, ExecuteActivityInput, ActivityInboundInterceptor, LedgeredActivity], Attempt
]


@dataclasses.dataclass(frozen=True)
class ActivityInterceptor(Interceptor):
    """The plugin's activity interceptor: hands ``@tool`` activities and the plugin's own
    the ledger and policy, and runs an activity a ``ledger_activities`` rule covers as the
    attempt ``describe`` makes of it, through :func:`run_attempt`.

    Attributes:
        open_runtime: The plugin's ledger and policy (a URL ledger opened on first use).
        rules: The plugin's ``ledger_activities`` rules, in the order they are matched.
        describe: Describes a covered activity's attempt.
        own: The plugin's own activities (they record answers in the ledger).
    """

    open_runtime: Callable[[], Awaitable[Runtime]]
    rules: Sequence[LedgeredActivity]
    describe: Describe
    own: Sequence[Any]

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _ActivityInbound(next, self)


class _ActivityInbound(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, outer: ActivityInterceptor) -> None:
        super().__init__(next)
        self._outer = outer
        self._details: HeartbeatDetails | None = None

    def init(self, outbound: ActivityOutboundInterceptor) -> None:
        # The ledger heartbeats a ledgered call while it runs (_heartbeat); this keeps the
        # activity's own heartbeat details for those heartbeats to send.
        self._details = HeartbeatDetails(outbound)
        super().init(self._details)

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        # Each activity runs in an asyncio task of its own: what is set here ends with it.
        heartbeat_details.set(self._details)
        # The workflow's interceptor marks an attempt scheduled after the user's retry
        # policy was spent: it asks the ledger and never acts (execute_ledgered).
        ask_only_attempt.set(ASK_ONLY_HEADER in input.headers)
        fn, outer = input.fn, self._outer
        if hasattr(fn, "__ledger_tool__") or fn in outer.own:
            _runtime.set(await outer.open_runtime())
            return await self.next.execute_activity(input)
        name = activity.info().activity_type
        rule = next((r for r in outer.rules if covers(r, name, input.args, fn)), None)
        if rule is None:
            return await self.next.execute_activity(input)
        runtime = await outer.open_runtime()
        # The call is described by _generic and run here, the one path of every call.
        return await run_attempt(runtime, outer.describe(runtime, input, self.next, rule))


def call_context(info: activity.Info, **extra: Any) -> dict[str, Any]:
    """Where a call comes from, recorded with its request and never fingerprinted."""
    return {
        "workflow_id": info.workflow_id,
        "namespace": info.workflow_namespace,
        "workflow_run_id": info.workflow_run_id,
        "activity_id": info.activity_id,
        "attempt": info.attempt,
        **extra,
    }


async def execute_ledgered(
    runtime: Runtime,
    request: dict[str, Any],
    spec: Tool[Any, Any],
    adapter: Callable[[ActionRequest, ExecutionContext], Any],
    state: Callable[[ActionRequest], Any] | None,
    ask_only: bool | None,
) -> ActionResult:
    """One activity attempt through the ledger, heartbeating while it runs; the ledger's
    refusals as typed ``ApplicationError`` s (an in-progress key or an unreachable ledger
    retryable). An attempt that only asks (``ask_only``, by default as the workflow
    scheduled it: :data:`ask_only_attempt`) never acts: where the ledger would let the
    call act (:func:`_free_to_act`) it fails with ``ATTEMPTS_SPENT`` at once, without
    writing; otherwise it gets the ledger's answer (a replay, an unknown effect, a live
    claim) with an adapter that refuses to act."""
    spent = final(
        f"{spec.name}: {_NOT_TRIED}",
        ErrorType.ATTEMPTS_SPENT,
        category=ApplicationErrorCategory.BENIGN,
    )
    refused = False
    ask_only = ask_only_attempt.get() if ask_only is None else ask_only

    async def refuse(request: ActionRequest, ctx: ExecutionContext) -> Any:
        # The race the read of the key cannot see: another attempt freed the key between
        # that read and the ledger's admission. Recorded as what it is, a failure with no
        # effect that leaves the key free to act again (a reset run may).
        nonlocal refused
        refused = True
        raise NoEffect(_NOT_TRIED, retryable=True)

    every = activity.info().heartbeat_timeout
    heartbeat = asyncio.create_task(_heartbeat(every))
    try:
        if ask_only:
            standing = await asyncio.to_thread(runtime.ledger.state, request["key"])
            if _free_to_act(standing, retry_safe=spec.retry_safe):
                raise spent
        result = await runtime.ledger.execute(
            request,
            authority=runtime.policy.authority_for(request["performer"]),
            adapter=refuse if ask_only else adapter,
            state=state,
            retry_safe=spec.retry_safe,
            requires_approval=spec.requires_approval,
            lease=_lease(runtime.ledger.lease, every),
        )
    except IdempotencyConflictError as exc:
        count_call(spec.name, CallOutcome.REFUSED)
        current_call().set("conflict.dimensions", list(exc.dimensions))
        current_call().set("original_action_id", exc.original_action_id)
        details = ConflictDetails.model_validate(exc, from_attributes=True)
        raise final(str(exc), ErrorType.CONFLICT, details.model_dump()) from None
    except ActionInProgressError as exc:
        raise ApplicationError(
            str(exc),
            type=ErrorType.IN_PROGRESS,
            next_retry_delay=timedelta(seconds=max(exc.lease_remaining, 0.1)),
            category=ApplicationErrorCategory.BENIGN,
        ) from None
    except InvalidRequest as exc:
        count_call(spec.name, CallOutcome.FAILED)
        raise final(f"{spec.name}: {exc}", ErrorType.INVALID_REQUEST) from None
    except LedgerUnavailable as exc:
        raise ApplicationError(str(exc), type=ErrorType.LEDGER_UNAVAILABLE) from None
    finally:
        heartbeat.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await heartbeat
    # Approved, the call would act: nobody is asked to approve what will not run.
    if refused or (ask_only and result.error_type == FailureType.APPROVAL_REQUIRED):
        raise spent
    return result


def _free_to_act(standing: ActionState, *, retry_safe: bool) -> bool:
    """Whether the ledger would let a call act on a key that stands as ``standing``:
    nothing recorded, a claim abandoned before it started, an outcome after which the key
    may act again (a retryable no-effect failure, an operator's ``no_effect_confirmed``,
    a denial), a call that waits for a person's approval to act, or an unknown effect of
    a retry-safe call (which the ledger tries again). The rule's own test is
    ``may_act_again``; this reads it off the key's projection, without writing."""
    operation = standing.next_operation
    return (
        operation in (NextOperation.START_ACTION, NextOperation.AWAIT_APPROVAL)
        or standing.status == "denied"
        or (retry_safe and standing.retry_safe and operation is NextOperation.RECONCILE_EFFECT)
    )


#: The attempt running now only asks the ledger: its activity came with the
#: ``ASK_ONLY_HEADER`` (set by :class:`ActivityInterceptor`).
ask_only_attempt: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "ledger_ask_only", default=False
)

_NOT_TRIED = (
    "not tried again: the retry policy's attempts or time were spent on an attempt that "
    "timed out, and the ledger holds no outcome of it to give back"
)


def _lease(ledger_lease: float, heartbeat_timeout: timedelta | None) -> float:
    """How long this attempt's claim holds its key without renewal.

    Temporal starts the next attempt once this one misses its heartbeat timeout (its
    worker died, or lost Temporal), and that attempt must find the claim expired, so
    that it records the interruption and the step parks (or, retry-safe, acts again)
    then, not a whole ledger lease later: a 5 second heartbeat timeout under the
    default 30 second lease would keep a dead worker's call "in progress" for 30
    seconds. So the lease is at most the heartbeat timeout. The ledger renews it every
    third of it while the tool runs, as this attempt heartbeats every third of the
    timeout: a live worker keeps both, a dead one loses both within about the same
    time. A worker that stays alive but cannot reach Temporal loses the attempt too
    (Temporal retries it elsewhere); the retry then finds a claim that is still renewed
    (in progress, tried again later) or, once the renewals stop, an unknown effect that
    parks: never a second execution. Without a heartbeat timeout, the ledger's own.
    """
    timeout = heartbeat_timeout.total_seconds() if heartbeat_timeout else ledger_lease
    return min(ledger_lease, timeout)


class HeartbeatDetails(ActivityOutboundInterceptor):
    """The activity's own heartbeats, passed on and remembered: the ledger's heartbeats
    send the details the activity last gave, so that an activity that heartbeats itself
    (with progress its next attempt reads from ``activity.info().heartbeat_details``)
    does not have them replaced by empty ones."""

    def __init__(self, next: ActivityOutboundInterceptor) -> None:
        super().__init__(next)
        self._details: tuple[Any, ...] = ()

    def heartbeat(self, *details: Any) -> None:
        self._details = details
        self.next.heartbeat(*details)

    def again(self) -> None:
        """Heartbeat with the details the activity last heartbeat with (none yet: none)."""
        self.next.heartbeat(*self._details)


#: The running activity's :class:`HeartbeatDetails`, set by :class:`ActivityInterceptor`.
heartbeat_details: contextvars.ContextVar[HeartbeatDetails | None] = contextvars.ContextVar(
    "ledger_heartbeat_details", default=None
)


async def _heartbeat(every: timedelta | None) -> None:
    """Keep Temporal informed that this worker is alive while the ledger runs the tool.

    Started and cancelled (and awaited) around the ledger's execution, so it never
    heartbeats after the attempt's outcome is settled."""
    if not every:
        return
    interval = max(every.total_seconds() / 3, 0.05)
    details = heartbeat_details.get()
    beat = details.again if details is not None else activity.heartbeat
    while True:
        # Sleep first: a tool that finishes within the interval costs no heartbeat RPC.
        await asyncio.sleep(interval)
        beat()
