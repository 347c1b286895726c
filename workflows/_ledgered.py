"""One ledgered call in a workflow: its attempts, and the waits for people between them.

A ``run_tool`` step and an activity of another library that the plugin ledgers run
through this one loop, so approvals, parks, probes, reconciles and the attempts after
them behave alike by construction. Each attempt is answered by the ledger on the
activity side; what the workflow does with the answer is:

* an approval is needed: the call waits in the run's inbox for a decision; approved (or
  decided elsewhere), the next attempt takes the ledger's decision; rejected, the call
  ends at once with the ledger's ``ToolRejected`` error (the ledger would answer another
  attempt with it).
* the effect is unknown: the tool's probe is asked, else the call parks for an
  operator's verdict. ``effect_confirmed`` gives the call its result from the confirmed
  output; otherwise the next attempt reads what the ledger holds (or acts again where
  ``no_effect_confirmed`` freed the key).
* any other failure: :class:`Attempts` says whether the call is tried (or asked) again.

What differs between the two kinds of call is told by a :class:`Face`: how the call
shows in the inbox and how a confirmed output becomes the attempt's result.
"""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta
from typing import Any, Protocol, cast

from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.exceptions import ActivityError, ApplicationError, TimeoutError, TimeoutType
from temporalio.worker import StartActivityInput, WorkflowOutboundInterceptor

from ..ledger._seam import Decision
from ._inbox import Inbox, cause_message, decided
from ._protocol import (
    ASK_ONLY_HEADER,
    PROBE_ACTIVITY,
    ApprovalNeeded,
    ErrorType,
    ProbeInput,
    ProbeOutcome,
    ProbeResult,
    UnknownEffect,
)
from ._render import Call
from ._scheduling import ask_only_options, scheduling, start_own_activity

#: The value of the ask-only header (its presence is what counts).
_ASK_ONLY = Payload(metadata={"encoding": b"json/plain"}, data=b"true")


class Face(Protocol):
    """What one kind of ledgered call tells the loop: how it shows to people, and how an
    answer becomes its attempt's result."""

    @property
    def calls_inside(self) -> bool:
        """The call's code makes ledgered calls of its own (see ``Attempts``)."""

    @property
    def probe_arg(self) -> Any:
        """The argument the tool's probe is given."""

    def shown(self, waiting: ApprovalNeeded | UnknownEffect) -> Call:
        """The call (or the call inside it) as it waits for approval or a verdict."""

    def confirmed(self, call: Call, unknown: UnknownEffect, output: Any) -> Any:
        """The attempt's result for a confirmed effect's ``output``."""

    def received(self, result: Any, waited_on: str | None) -> None:
        """Look at an attempt's result before the workflow gets it; ``waited_on``: the key
        the call last waited on for a person, if any."""


class Ledgered:
    """One call of a ledgered activity: its attempts, and the waits between them.

    Made as the workflow schedules the call: its first attempt is scheduled at once, where
    the workflow asked for it, so that its command keeps its place among the workflow's
    others. Later attempts go straight to ``next`` under the same input (the same key and
    anchor header), never numbered again (``_scheduling``).
    """

    def __init__(
        self, next: WorkflowOutboundInterceptor, input: StartActivityInput, face: Face, inbox: Inbox
    ) -> None:
        self._next = next
        self._input = input
        self._face = face
        self._inbox = inbox
        self._attempts = Attempts(calls_inside=face.calls_inside)
        #: The handle of the call's first attempt.
        self.first = self._attempt = next.start_activity(input)

    def as_handle(self) -> workflow.ActivityHandle[Any]:
        """The whole call as the handle a framework awaits: its result, or its error."""
        task = asyncio.get_running_loop().create_task(self.settle())
        task.add_done_callback(self._cancel_attempt_if_cancelled)
        # temporalio's ActivityHandle is an asyncio.Task that adds nothing to it; the
        # interceptor's signature names it, and a plain task is what the workflow awaits.
        return cast(workflow.ActivityHandle[Any], task)

    def _cancel_attempt_if_cancelled(self, task: asyncio.Task[Any]) -> None:
        # Cancelled before it awaited the attempt, the task never passed the cancel on.
        if task.cancelled() and not self._attempt.done():
            self._attempt.cancel()

    async def settle(self) -> Any:
        """The call's result: the ledger's answer to its last attempt, or the result of a
        confirmed effect; else the error that ends it (an ``ActivityError``, as Temporal
        gives it)."""
        face, inbox, attempts = self._face, self._inbox, self._attempts
        #: The key this call last waited on for a person (its result may be an answer).
        waited_on: str | None = None
        while True:
            try:
                result = await self._attempt
            except ActivityError as err:
                match err.cause:
                    case ApplicationError(type=ErrorType.AWAITING_APPROVAL) as cause:
                        needed = ApprovalNeeded.model_validate(cause.details[0])
                        decision = await inbox.await_approval(face.shown(needed), needed)
                        if decision is Decision.REJECT:
                            rejected = _rejected(err, needed.key)
                            raise rejected from rejected.cause
                        waited_on = needed.key
                        attempts.answered()
                    case ApplicationError(type=ErrorType.EFFECT_UNKNOWN) as cause:
                        unknown = UnknownEffect.model_validate(cause.details[0])
                        call = face.shown(unknown)
                        confirmed, output = await self._settle_unknown(call, unknown)
                        waited_on = unknown.key
                        if confirmed and unknown.inner is None:
                            return face.confirmed(call, unknown, output)
                        # A call inside the activity: whatever the verdict, the activity
                        # runs again, and that call replays it (its other calls, theirs).
                        attempts.answered()
                    case _:
                        # Within the user's retry bounds, or asking what a timed-out
                        # attempt did; else the call ends with the error it raises.
                        await attempts.retry_after(err)
            else:
                face.received(result, waited_on)
                return result
            self._again()

    async def _settle_unknown(self, call: Call, unknown: UnknownEffect) -> tuple[bool, Any]:
        """Whether the unknown effect of ``call`` happened, and its output: the tool's
        probe, if it has one, asks the far side first; the call parks for a person's
        verdict only if the probe cannot tell. Not confirmed, the call runs again under
        its key (no effect, or the key settled elsewhere: the ledger answers that try)."""
        if unknown.probe:
            found = await self._ask_probe(unknown)
            # Absent or resolved: the call runs again, to act or to read the outcome.
            if found is not None and found.finding is not ProbeOutcome.INCONCLUSIVE:
                return found.finding is ProbeOutcome.PRESENT, found.output
        verdict = await self._inbox.park(call, unknown)
        if verdict is not None and verdict.verdict == "effect_confirmed":
            return True, verdict.output
        return False, None

    async def _ask_probe(self, unknown: UnknownEffect) -> ProbeResult | None:
        """Ask the tool's probe about the unknown effect; ``None`` if it could not answer.

        ``present`` comes back with the output the ledger recorded for the verdict;
        ``absent`` (where conclusive) means the call may act again under its key;
        ``resolved`` that the key was settled meanwhile and the call should run again to
        read it. A probe only reads: a few tries, then the call parks for a person as it
        would without one.
        """
        tool, arg = self._input.activity, self._face.probe_arg
        try:
            found: ProbeResult = await start_own_activity(
                PROBE_ACTIVITY,
                ProbeInput(key=unknown.key, tool=tool, action_id=unknown.action_id, arg=arg),
                result_type=ProbeResult,
                **scheduling("probe", run=self._inbox.options, task_queue=self._input.task_queue),
            )
        except ActivityError as err:
            workflow.logger.warning(
                f"the probe of {tool} for key {unknown.key!r} failed ({cause_message(err)}); "
                "the call parks for an operator"
            )
            return None
        if found.verdict is not None:
            decided("verdict", unknown.key, verdict=found.verdict, actor=f"probe:{tool}")
        return found

    def _again(self) -> None:
        again, attempts = self._input, self._attempts
        if attempts.ask_only:
            options = ask_only_options(
                again, run=self._inbox.options, calls_inside=attempts.calls_inside
            )
            again = dataclasses.replace(
                again, headers={**again.headers, ASK_ONLY_HEADER: _ASK_ONLY}, **options
            )
        self._attempt = self._next.start_activity(dataclasses.replace(again))


def _rejected(err: ActivityError, key: str) -> ActivityError:
    """The error of a call a person rejected: the failure the ledger gives every attempt
    under ``key`` from now on, without an attempt to fetch it."""
    kept = "scheduled_event_id started_event_id identity activity_type activity_id retry_state"
    rejected = ActivityError(err.message, **{name: getattr(err, name) for name in kept.split()})
    rejected.__cause__ = ApplicationError(  # as the ledger fails every later attempt
        f"{err.activity_type}: the call under {key!r} was rejected",
        type=ErrorType.REJECTED,
        non_retryable=True,
    )
    return rejected


#: Waits between asking the ledger again about a call it kept from acting.
_FIRST_WAIT = timedelta(seconds=1)
_LONGEST_WAIT = timedelta(seconds=60)

#: The ledger kept the attempt from acting.
_LEDGER_WAITS = (ErrorType.IN_PROGRESS, ErrorType.LEDGER_UNAVAILABLE)


class Attempts:
    """The attempts of one ledgered call after its first, as the user's retry bounds and
    the ledger allow them.

    Within the retry policy and timeouts the user gave the call, and past them only to ask
    the ledger what the call did.

    Temporal retries a call's attempts within its retry policy and timeouts; a failure
    reaches the workflow once they are spent, or when it is not retryable. It then ends the
    step as it would without the ledger, except in two cases that are the ledger's to settle:

    * The ledger kept the attempt from acting (another attempt holds the key's claim, or the
      ledger could not be reached): the call was not tried, so it is asked again after a wait
      (the delay the ledger named, else 1 second doubling to a minute).
    * An attempt timed out: it may have acted, and only the ledger knows (unless no attempt
      ever started: a schedule-to-start or schedule-to-close timeout with no attempt started
      nor failed before ends the step as Temporal gave it).
      One more attempt is scheduled that only asks (``ASK_ONLY_HEADER``, with options of its
      own: see ``_scheduling.ask_only_options``). The ledger answers it with a recorded
      outcome (the step gets it), an unknown effect (the step parks) or a live claim (asked
      again); where it would let the call act (nothing was recorded, or a retry-safe call's
      outcome is unknown) the attempt neither acts nor records anything, and fails with
      ``ATTEMPTS_SPENT``; the step fails with the timed-out attempt's error.

    Shared by ``run_tool`` and the interceptor's ledgered activities of other libraries.

    Args:
        calls_inside: The call's code makes calls of its own through the ledger (a
            LangGraph node listed with ``per_call``), so it runs on the ask-only attempt,
            each call inside only asking: that attempt timing out, as the lost one did,
            ends the step instead of being asked again.
    """

    def __init__(self, *, calls_inside: bool = False) -> None:
        #: Whether the call's code runs on the ask-only attempt (see the class).
        self.calls_inside = calls_inside
        self._wait = _FIRST_WAIT
        #: The attempt that timed out once the user's bounds were spent, while its
        #: outcome is asked of the ledger.
        self._lost: ActivityError | None = None

    @property
    def ask_only(self) -> bool:
        """Whether the next attempt only asks the ledger (and never acts)."""
        return self._lost is not None

    def answered(self) -> None:
        """A person answered for the call (an approval, a verdict): the next attempt is
        the call's own again, under the options it was scheduled with."""
        self._lost = None
        self._wait = _FIRST_WAIT

    async def retry_after(self, err: ActivityError) -> None:
        """Wait, if the ledger asked for a wait, before the call is tried (or asked) again
        after an attempt's failure that no person is to answer; or end the step.

        Args:
            err: The attempt's failure, as the workflow received it.

        Raises:
            ActivityError: The step ends with it: ``err``, or the timed-out attempt's
                own error where the ledger had no outcome of it. Raised as it is, its
                cause the one Temporal gave.
        """
        cause = err.cause
        kind = cause.type if isinstance(cause, ApplicationError) else None
        lost = self._lost
        if lost is not None and kind == ErrorType.ATTEMPTS_SPENT:
            raise lost
        if kind in _LEDGER_WAITS:
            await self._pause(cause)
            return
        # After any timeout an attempt may have acted, unless no attempt ever started
        # (``_never_started``): the last attempt may not have reached a worker (a
        # schedule-to-start timeout) after an earlier one that did.
        if not isinstance(cause, TimeoutError):
            raise err
        if lost is None and _never_started(err, cause):
            raise err  # nothing reached a worker, so nothing acted: nothing to ask
        if lost is None:
            self._lost = err  # ask now: the ledger's answer does not need a wait
            return
        if self.calls_inside:
            raise lost
        # The ask-only attempt timed out (its worker died, or the ledger was slow).
        await self._pause(cause)

    async def _pause(self, cause: BaseException | None) -> None:
        named = cause.next_retry_delay if isinstance(cause, ApplicationError) else None
        await workflow.sleep(named or self._wait)
        self._wait = min(self._wait * 2, _LONGEST_WAIT)


def _never_started(err: ActivityError, timeout: TimeoutError) -> bool:
    """Whether no attempt of the call ever started: it timed out waiting for a worker (no
    worker polled its task queue in time, say) with its last attempt not started (Temporal
    records the started event of an attempt that ran, even one that then timed out) and
    no earlier attempt's failure (which the timeout carries as its cause). A doubt
    counts as started: asking costs a wait, a duplicate cannot be undone."""
    return (
        timeout.type in (TimeoutType.SCHEDULE_TO_START, TimeoutType.SCHEDULE_TO_CLOSE)
        and not err.started_event_id
        and timeout.__cause__ is None
    )
