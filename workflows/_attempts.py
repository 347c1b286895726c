"""Whether a ledgered call is tried again after a failed attempt: within the retry policy
and timeouts the user gave it, and past them only to ask the ledger what the call did.

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
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, TimeoutError, TimeoutType

from ._protocol import ErrorType

#: Waits between asking the ledger again about a call it kept from acting.
_FIRST_WAIT = timedelta(seconds=1)
_LONGEST_WAIT = timedelta(seconds=60)

#: Timeouts after which an attempt may have acted: every one, unless no attempt ever
#: started (``_never_started``). The last attempt may not have reached a worker (a
#: schedule-to-start timeout) after an earlier one that did.
_LOST = (
    TimeoutType.START_TO_CLOSE,
    TimeoutType.HEARTBEAT,
    TimeoutType.SCHEDULE_TO_CLOSE,
    TimeoutType.SCHEDULE_TO_START,
)

#: The ledger kept the attempt from acting.
_LEDGER_WAITS = (ErrorType.IN_PROGRESS, ErrorType.LEDGER_UNAVAILABLE)


class Attempts:
    """The attempts of one ledgered call after its first, as the user's retry bounds and
    the ledger allow them.

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
        if not (isinstance(cause, TimeoutError) and cause.type in _LOST):
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
