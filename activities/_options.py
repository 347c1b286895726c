"""How the ledger's activities are scheduled: an options object for each kind, and the
plugin's options that carry them to every run of its workers."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from temporalio.common import RetryPolicy


@dataclasses.dataclass(frozen=True)
class ActivityOptions:
    """How a workflow schedules one kind of the ledger's activities.

    Pass one to ``run_tool(..., options=...)`` for a tool call, or to
    :class:`LedgerOptions` for every run of the plugin's workers. A field left ``None``
    takes the next default: ``run_tool``'s options, then the plugin's, then the ledger's
    (see :class:`LedgerOptions`).

    Attributes:
        start_to_close_timeout: How long one attempt may run.
        heartbeat_timeout: How long an attempt may go without a heartbeat before
            Temporal gives it up, so a dead worker is noticed this soon (the ledger
            heartbeats while a tool runs). ``timedelta(0)``: no heartbeat timeout.
        retry_policy: How Temporal retries the activity. Whatever is given, the ledger
            adds the error types that must end the step to its non-retryable ones: the
            ledger, not the retry policy, decides whether a tool may act again.
        task_queue: The task queue of the workers that run the activity.
    """

    start_to_close_timeout: timedelta | None = None
    heartbeat_timeout: timedelta | None = None
    retry_policy: RetryPolicy | None = None
    task_queue: str | None = None

    def over(self, defaults: ActivityOptions) -> ActivityOptions:
        """These options, with ``defaults``' value for every field left ``None``.

        Args:
            defaults: The options that apply where these say nothing.

        Returns:
            The combined options.
        """
        return ActivityOptions(
            **{
                field.name: getattr(self, field.name)
                if getattr(self, field.name) is not None
                else getattr(defaults, field.name)
                for field in dataclasses.fields(self)
            }
        )


#: The activities that record a person's answer: short, and retried until recorded.
_RECORDING = ActivityOptions(
    start_to_close_timeout=timedelta(seconds=10),
    heartbeat_timeout=timedelta(seconds=3),
    retry_policy=RetryPolicy(
        initial_interval=timedelta(seconds=0.5),
        maximum_interval=timedelta(seconds=5),
        maximum_attempts=0,
    ),
)


@dataclasses.dataclass(frozen=True)
class LedgerOptions:
    """The plugin's options: the ledger's lease, and how every run of its workers
    schedules the ledger's activities.

    Attributes:
        lease: Seconds a started execution holds its key before another attempt may find
            it interrupted (renewed while the tool runs); for a ledger the plugin opens
            from a URL.
        tool: The tool calls of ``run_tool`` that pass no options of their own: 5 minutes
            to close, a 30 second heartbeat timeout, retries from 1 second doubling up to
            a minute, without limit (only what the ledger marks retryable is retried).
        reconcile: The activity that records an operator's verdict: 10 seconds to close
            and a 3 second heartbeat timeout (a worker that dies during it is noticed
            within seconds, and the verdict is retried on another, never dropped),
            retries from half a second up to 5 seconds, without limit.
        approve: The activity that records an approver's decision; as ``reconcile``.
        probe: A tool's probe of an unknown effect: 30 seconds to close, 3 attempts from
            1 second, then the step parks for a person; on the tool's task queue unless
            ``task_queue`` is given.
    """

    lease: float = 30.0
    tool: ActivityOptions = ActivityOptions(
        start_to_close_timeout=timedelta(minutes=5),
        heartbeat_timeout=timedelta(seconds=30),
        retry_policy=RetryPolicy(
            initial_interval=timedelta(seconds=1),
            backoff_coefficient=2.0,
            maximum_interval=timedelta(seconds=60),
            maximum_attempts=0,
        ),
    )
    reconcile: ActivityOptions = _RECORDING
    approve: ActivityOptions = _RECORDING
    probe: ActivityOptions = ActivityOptions(
        start_to_close_timeout=timedelta(seconds=30),
        retry_policy=RetryPolicy(
            initial_interval=timedelta(seconds=1),
            backoff_coefficient=2.0,
            maximum_attempts=3,
        ),
    )
