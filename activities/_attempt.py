"""One attempt of a ledgered call through the ledger: the policy's treatment of the tool,
the ledger's rule while Temporal hears heartbeats, and the ledger's refusals as typed
errors. Shared by ``@tool`` activities and the activities of other libraries."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory
from temporalio.worker import ActivityOutboundInterceptor

from ..ledger import (
    ActionInProgressError,
    ActionRequest,
    ActionResult,
    ActionState,
    ActionStatus,
    IdempotencyConflictError,
    InvalidRequest,
    LedgerUnavailable,
    NoEffect,
)
from ..ledger._seam import ExecutionContext, FailureType, NextOperation
from ..workflows._seam import ConflictDetails, ErrorType, ToolHints, ToolSpec
from ._metrics import CallOutcome, count_call
from ._runtime import Runtime
from ._tracing import current_call

SpecT = TypeVar("SpecT", bound=ToolSpec[Any, Any])


def treated(
    spec: SpecT,
    runtime: Runtime,
    *,
    tool: str | None = None,
    hints: ToolHints | None = None,
    server: str | None = None,
) -> SpecT:
    """The spec as the policy has it handled: the tool's declaration, weighed against its
    hints (those that relax only where the policy trusts them), with the ``[tools]``
    table's last word."""
    treatment = runtime.policy.treatment(
        capability=spec.capability,
        retry_safe=spec.retry_safe,
        requires_approval=spec.requires_approval,
        tool=tool or spec.name,
        hints=hints,
        server=server,
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
    ask_only: bool | None = None,
) -> ActionResult:
    """One activity attempt through the ledger, heartbeating while it runs.

    The ledger's refusals become typed ``ApplicationError`` s: final ones
    non-retryable, an in-progress key or an unreachable ledger retryable.

    An attempt that only asks (``ask_only``; by default, as the workflow scheduled the
    attempt: :data:`ask_only_attempt`) never acts, and records nothing where there is
    nothing to answer: it reads the key first, and where the ledger would let the call
    act (see :func:`_free_to_act`) it fails with ``ATTEMPTS_SPENT`` at once. Otherwise
    it goes through the ledger for its answer (a replay, an unknown effect, a live
    claim), with an adapter that refuses to act, in case another attempt freed the key
    between the read and the ledger's admission.
    """
    refused: list[str] = []
    if ask_only is None:
        ask_only = ask_only_attempt.get()
    if ask_only:
        adapter = _refusing(refused)
    every = activity.info().heartbeat_timeout
    heartbeat = asyncio.create_task(_heartbeat(every))
    try:
        if ask_only:
            standing = await asyncio.to_thread(runtime.ledger.state, request["key"])
            if _free_to_act(standing, retry_safe=spec.retry_safe):
                raise _attempts_spent(spec)
        result = await runtime.ledger.execute(
            request,
            authority=runtime.policy.authority_for(performer),
            adapter=adapter,
            state=state,
            retry_safe=spec.retry_safe,
            requires_approval=spec.requires_approval,
            lease=_lease(runtime.ledger.lease, every),
        )
    except IdempotencyConflictError as exc:
        count_call(spec.name, CallOutcome.REFUSED)
        current_call().set("conflict.dimensions", list(exc.dimensions))
        current_call().set("original_action_id", exc.original_action_id)
        details = ConflictDetails(
            key=exc.key,
            original_action_id=exc.original_action_id,
            dimensions=list(exc.dimensions),
            fingerprint_version=exc.fingerprint_version,
        )
        raise ApplicationError(
            str(exc), details.model_dump(), type=ErrorType.CONFLICT, non_retryable=True
        ) from None
    except ActionInProgressError as exc:
        raise ApplicationError(
            str(exc),
            type=ErrorType.IN_PROGRESS,
            next_retry_delay=timedelta(seconds=max(exc.lease_remaining, 0.1)),
            category=ApplicationErrorCategory.BENIGN,
        ) from None
    except InvalidRequest as exc:
        count_call(spec.name, CallOutcome.FAILED)
        raise ApplicationError(
            f"{spec.name}: {exc}", type=ErrorType.INVALID_REQUEST, non_retryable=True
        ) from None
    except LedgerUnavailable as exc:
        raise ApplicationError(str(exc), type=ErrorType.LEDGER_UNAVAILABLE) from None
    finally:
        heartbeat.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await heartbeat
    if ask_only and result.error_type == FailureType.APPROVAL_REQUIRED:
        # Approved, the call would act: nobody is asked to approve what will not run.
        refused.append(_NOT_TRIED)
    if refused:
        raise _attempts_spent(spec)
    return result


def _free_to_act(standing: ActionState, *, retry_safe: bool) -> bool:
    """Whether the ledger would let a call act on a key that stands as ``standing``:
    nothing recorded, a claim abandoned before it started, an outcome after which the key
    may act again (a retryable no-effect failure, an operator's ``no_effect_confirmed``,
    a denial), a call that waits for a person's approval to act, or an unknown effect of
    a retry-safe call (which the ledger tries again). The rule's own test is
    ``may_act_again``; this reads it off the key's projection, without writing."""
    if standing.next_operation in (NextOperation.START_ACTION, NextOperation.AWAIT_APPROVAL):
        return True
    if standing.status is ActionStatus.DENIED:
        return True
    return (
        retry_safe
        and standing.retry_safe
        and standing.next_operation is NextOperation.RECONCILE_EFFECT
    )


def _attempts_spent(spec: ToolSpec[Any, Any]) -> ApplicationError:
    return ApplicationError(
        f"{spec.name}: {_NOT_TRIED}",
        type=ErrorType.ATTEMPTS_SPENT,
        non_retryable=True,
        category=ApplicationErrorCategory.BENIGN,
    )


#: The attempt running now only asks the ledger: its activity came with the
#: ``ASK_ONLY_HEADER`` (set by the plugin's activity interceptor).
ask_only_attempt: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "ledger_ask_only", default=False
)


_NOT_TRIED = (
    "not tried again: the retry policy's attempts or time were spent on an attempt that "
    "timed out, and the ledger holds no outcome of it to give back"
)


def _refusing(refused: list[str]) -> Callable[[ActionRequest, ExecutionContext], Any]:
    """The adapter of an attempt that only asks, for the race its read of the key cannot
    see: another attempt freed the key (no effect) between that read and the ledger's
    admission. It does not act. Recorded as what it is, a failure with no effect that
    leaves the key free to act again (a reset run may)."""

    async def refuse(request: ActionRequest, ctx: ExecutionContext) -> Any:
        refused.append(_NOT_TRIED)
        raise NoEffect(_NOT_TRIED, retryable=True)

    return refuse


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
    if not heartbeat_timeout:
        return ledger_lease
    return min(ledger_lease, heartbeat_timeout.total_seconds())


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


#: The running activity's :class:`HeartbeatDetails`, set by the plugin's interceptor.
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
    while True:
        # Sleep first: a tool that finishes within the interval costs no heartbeat RPC.
        await asyncio.sleep(interval)
        if details is not None:
            details.again()
        else:
            activity.heartbeat()
