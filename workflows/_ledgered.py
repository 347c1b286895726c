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
* any other failure: ``_attempts`` says whether the call is tried (or asked) again.

What differs between the two kinds of call is told by a :class:`Face`: how the call
shows in the inbox and how a confirmed output becomes the attempt's result.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, Protocol, cast

from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.worker import StartActivityInput, WorkflowOutboundInterceptor

from ..ledger import Verdict
from ..ledger._seam import Decision
from ._attempts import Attempts
from ._inbox import Inbox, cause_message
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
from ._scheduling import ask_only_options, scheduling, start_own_activity
from ._tracing import decided
from ._waiting import Call

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
                cause = err.cause
                kind = cause.type if isinstance(cause, ApplicationError) else None
                if kind == ErrorType.AWAITING_APPROVAL:
                    assert isinstance(cause, ApplicationError)
                    needed = ApprovalNeeded.model_validate(cause.details[0])
                    decision = await inbox.await_approval(face.shown(needed), needed)
                    if decision is Decision.REJECT:
                        rejected = _rejected(err, needed.key)
                        raise rejected from rejected.cause
                    waited_on = needed.key
                    attempts.answered()
                elif kind == ErrorType.EFFECT_UNKNOWN:
                    assert isinstance(cause, ApplicationError)
                    unknown = UnknownEffect.model_validate(cause.details[0])
                    call = face.shown(unknown)
                    confirmed, output = await self._settle_unknown(call, unknown)
                    waited_on = unknown.key
                    if confirmed and unknown.inner is None:
                        return face.confirmed(call, unknown, output)
                    # A call inside the activity: whatever the verdict, the activity runs
                    # again, and that call replays it (its other calls, their outcomes).
                    attempts.answered()
                else:
                    # Within the user's retry bounds, or asking what a timed-out attempt
                    # did; else the call ends with the error it raises.
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
        if verdict is not None and verdict.verdict is Verdict.EFFECT_CONFIRMED:
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
            decided("verdict", unknown.key, verdict=found.verdict.value, actor=f"probe:{tool}")
        return found

    def _again(self) -> None:
        again = dataclasses.replace(self._input)
        if self._attempts.ask_only:
            given = {f.name: getattr(again, f.name) for f in dataclasses.fields(again)}
            again = dataclasses.replace(
                again,
                headers={**again.headers, ASK_ONLY_HEADER: _ASK_ONLY},
                **ask_only_options(
                    given, run=self._inbox.options, calls_inside=self._attempts.calls_inside
                ),
            )
        self._attempt = self._next.start_activity(again)


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
