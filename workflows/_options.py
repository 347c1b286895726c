"""How the ledger's activities are scheduled: temporalio's ``ActivityConfig`` for each kind,
and the plugin's options that carry them to every run of its workers."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

from temporalio.common import RetryPolicy
from temporalio.workflow import ActivityConfig


def activity_config(given: ActivityConfig | None) -> ActivityConfig:
    """``given``, checked to be an ``ActivityConfig`` (an empty one for ``None``).

    Raises:
        TypeError: ``given`` is neither.
    """
    if given is None:
        return ActivityConfig()
    if not isinstance(given, dict):
        raise TypeError(f"activity options are a temporalio.workflow.ActivityConfig, not {given!r}")
    unknown = sorted(set(given) - set(ActivityConfig.__annotations__))
    if unknown:
        raise TypeError(f"ActivityConfig has no field {', '.join(map(repr, unknown))}")
    return given


def merged(*configs: ActivityConfig) -> dict[str, Any]:
    """Every field of ``configs``, each from the first of them that sets it (not ``None``)."""
    chosen: dict[str, Any] = {}
    for config in configs:
        for name, value in config.items():
            if value is not None and name not in chosen:
                chosen[name] = value
    return chosen


def _tool_default() -> ActivityConfig:
    return ActivityConfig(
        start_to_close_timeout=timedelta(minutes=5),
        heartbeat_timeout=timedelta(seconds=30),
        retry_policy=RetryPolicy(
            initial_interval=timedelta(seconds=1),
            backoff_coefficient=2.0,
            maximum_interval=timedelta(seconds=60),
            maximum_attempts=0,
        ),
    )


def _recording_default() -> ActivityConfig:
    """The activities that record a person's answer: short, and retried until recorded."""
    return ActivityConfig(
        start_to_close_timeout=timedelta(seconds=10),
        heartbeat_timeout=timedelta(seconds=3),
        retry_policy=RetryPolicy(
            initial_interval=timedelta(seconds=0.5),
            maximum_interval=timedelta(seconds=5),
            maximum_attempts=0,
        ),
    )


def _probe_default() -> ActivityConfig:
    return ActivityConfig(
        start_to_close_timeout=timedelta(seconds=30),
        retry_policy=RetryPolicy(
            initial_interval=timedelta(seconds=1),
            backoff_coefficient=2.0,
            maximum_attempts=3,
        ),
    )


@dataclasses.dataclass(frozen=True)
class LedgerOptions:
    """The plugin's options: the ledger's lease, and how every run of its workers
    schedules the ledger's activities.

    Each activity kind takes temporalio's ``ActivityConfig``. A field it leaves out takes
    the ledger's default below; ``run_tool(..., options=...)`` sets fields for one call.
    ``heartbeat_timeout=timedelta(0)`` means no heartbeat timeout. Whatever retry policy
    is given, the ledger adds the error types that must end the step to its
    non-retryable ones: the ledger, not the retry policy, decides whether a tool may act
    again.

    Attributes:
        lease: Seconds a started execution holds its key before another attempt may find
            it interrupted (renewed while the tool runs); for a ledger the plugin opens
            from a URL.
        tool: The tool calls of ``run_tool``: 5 minutes to close, a 30 second heartbeat
            timeout, retries from 1 second doubling up to a minute, without limit (only
            what the ledger marks retryable is retried).
        reconcile: The activity that records an operator's verdict: 10 seconds to close
            and a 3 second heartbeat timeout (a worker that dies during it is noticed
            within seconds, and the verdict is retried on another, never dropped),
            retries from half a second up to 5 seconds, without limit. Its timeouts and
            retries are also those of the attempt that only asks the ledger what a call
            did, once the call's own retry policy was spent on an attempt that timed out.
        approve: The activity that records an approver's decision; as ``reconcile``.
        probe: A tool's probe of an unknown effect: 30 seconds to close, 3 attempts from
            1 second, then the step parks for a person; on the tool's task queue unless
            ``task_queue`` is given.
        heartbeat_timeout: The heartbeat timeout given to a ledgered activity of another
            library (``ledger_activities``: an agent framework's tool, MCP or model call)
            that its framework schedules without one; one it sets is kept. The worker
            heartbeats the call every third of it while it runs, and the call's claim in
            the ledger lasts no longer than it, so a worker killed during the call is
            noticed within this time and its call parks (or, retry-safe, runs again)
            then, not after the start-to-close timeout. 5 seconds; ``None`` or
            ``timedelta(0)``: none is added.
    """

    lease: float = 30.0
    tool: ActivityConfig = dataclasses.field(default_factory=_tool_default)
    reconcile: ActivityConfig = dataclasses.field(default_factory=_recording_default)
    approve: ActivityConfig = dataclasses.field(default_factory=_recording_default)
    probe: ActivityConfig = dataclasses.field(default_factory=_probe_default)
    heartbeat_timeout: timedelta | None = timedelta(seconds=5)

    def __post_init__(self) -> None:
        # A TypedDict is not checked at run time: refuse what is not an ActivityConfig here,
        # not when the first call is scheduled.
        for kind in ("tool", "reconcile", "approve", "probe"):
            object.__setattr__(self, kind, activity_config(getattr(self, kind)))
        beat = self.heartbeat_timeout
        if beat is not None and not (isinstance(beat, timedelta) and beat >= timedelta(0)):
            raise TypeError(
                f"heartbeat_timeout is a timedelta of 0 or more (or None), not {beat!r}"
            )
