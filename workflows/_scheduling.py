"""How the ledger's workflow side schedules its activities: temporalio's ``ActivityConfig``
for each kind, the plugin's options that carry them to every run of its workers, and the
ledger's own activities told apart from the workflow's.

The plugin's workflow interceptor numbers the activities a workflow schedules, and a
ledgered activity's key holds that number. The ledger's own activities (recording a
verdict or an approval, probes, another attempt of a call) exist in some runs and not in
others: a run that parked schedules a reconcile activity that its reset run, answered
from the ledger, does not. Counted, they would shift the number, and so the key, of
every later call. They are started here, marked for the interceptor, and not counted
(another attempt of a call goes past the numbering: ``_ledgered``).
"""

from __future__ import annotations

import contextvars
import dataclasses
from datetime import timedelta
from typing import Any, Literal

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.worker import StartActivityInput
from temporalio.workflow import ActivityConfig

from ._protocol import FINAL_ERROR_TYPES, ErrorType


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
    for config in reversed(configs):
        chosen |= {name: value for name, value in config.items() if value is not None}
    return chosen


def _tool_default() -> ActivityConfig:
    return ActivityConfig(
        start_to_close_timeout=timedelta(minutes=5),
        heartbeat_timeout=timedelta(seconds=30),
        # From 1 second doubling, without limit (RetryPolicy's defaults), up to a minute.
        retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=60)),
    )


def _recording_default() -> ActivityConfig:
    """The activities that record a person's answer: short, and retried until recorded."""
    return ActivityConfig(
        start_to_close_timeout=timedelta(seconds=10),
        heartbeat_timeout=timedelta(seconds=3),
        retry_policy=RetryPolicy(
            initial_interval=timedelta(seconds=0.5), maximum_interval=timedelta(seconds=5)
        ),
    )


def _probe_default() -> ActivityConfig:
    return ActivityConfig(
        start_to_close_timeout=timedelta(seconds=30), retry_policy=RetryPolicy(maximum_attempts=3)
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


#: The ledger's activities, as :class:`LedgerOptions` names them.
Kind = Literal["tool", "reconcile", "approve", "probe"]

#: The error types that end each of them at once: another attempt cannot help.
_FINAL: dict[Kind, tuple[ErrorType, ...]] = {
    "tool": FINAL_ERROR_TYPES,
    "reconcile": (ErrorType.RECONCILE_REFUSED, ErrorType.RECONCILE_NOT_ALLOWED),
    "approve": (
        ErrorType.APPROVE_REFUSED,
        ErrorType.APPROVE_NOT_ALLOWED,
        ErrorType.APPROVE_ALREADY_DECIDED,
    ),
    "probe": (ErrorType.PROBE_UNAVAILABLE, ErrorType.RECONCILE_REFUSED),
}
_DEFAULTS = LedgerOptions()


def scheduling(
    kind: Kind,
    given: workflow.ActivityConfig | None = None,
    *,
    run: LedgerOptions = _DEFAULTS,
    task_queue: str | None = None,
) -> dict[str, Any]:
    """The keyword arguments of ``start_activity`` for one of the ledger's activities.

    Each field comes from ``given``, else from ``run``'s options for ``kind``, else from
    the ledger's defaults; ``task_queue`` applies where none of them names one. The error
    types that end the activity at once are added to its retry policy's non-retryable
    ones, whatever the options say.
    """
    chosen = merged(activity_config(given), getattr(run, kind), getattr(_DEFAULTS, kind))
    policy = chosen.get("retry_policy") or RetryPolicy()
    final = list(policy.non_retryable_error_types or [])
    final += [error for error in _FINAL[kind] if error not in final]
    chosen["retry_policy"] = dataclasses.replace(policy, non_retryable_error_types=final)
    if chosen.get("heartbeat_timeout") == timedelta(0):
        del chosen["heartbeat_timeout"]  # timedelta(0) says: no heartbeat timeout
    chosen["task_queue"] = chosen.get("task_queue") or task_queue
    return chosen


def ask_only_options(
    given: StartActivityInput, *, run: LedgerOptions = _DEFAULTS, calls_inside: bool = False
) -> dict[str, Any]:
    """The options of an attempt that only asks the ledger, for a call scheduled as
    ``given``.

    The user's bounds are spent, so none of them applies: no schedule-to-close or
    schedule-to-start timeout (it is scheduled only after an attempt that may have acted,
    so it waits for a worker as long as it takes: a wait is better than a duplicate),
    and the timeouts and retries of the activity that records a
    verdict (``run.reconcile``: short, retried without limit, since the attempt
    does not act and waits only for the ledger). A call whose code runs to ask its calls
    inside (a LangGraph node listed with ``per_call``) keeps its own start-to-close and
    heartbeat timeouts and runs once: it may hang again as it did.
    """
    recording = merged(run.reconcile, _DEFAULTS.reconcile)
    chosen: dict[str, Any] = {
        "schedule_to_close_timeout": None,
        "schedule_to_start_timeout": None,
        "start_to_close_timeout": recording["start_to_close_timeout"],
        "heartbeat_timeout": recording.get("heartbeat_timeout"),
        "retry_policy": recording.get("retry_policy") or RetryPolicy(),
    }
    if calls_inside:
        chosen.update(
            start_to_close_timeout=given.start_to_close_timeout or given.schedule_to_close_timeout,
            heartbeat_timeout=given.heartbeat_timeout,
            retry_policy=RetryPolicy(maximum_attempts=1),
        )
    if chosen["heartbeat_timeout"] == timedelta(0):
        chosen["heartbeat_timeout"] = None
    return chosen


#: Set only for the synchronous span of scheduling one of the ledger's own activities.
_OWN: contextvars.ContextVar[bool] = contextvars.ContextVar("temporal_ledger_own", default=False)


def start_own_activity(activity: str, arg: Any, **options: Any) -> workflow.ActivityHandle[Any]:
    """``workflow.start_activity``, marked as the ledger's own: the interceptor does not
    number it, nor ledger it as another library's activity."""
    token = _OWN.set(True)
    try:
        return workflow.start_activity(activity, arg, **options)
    finally:
        _OWN.reset(token)


def scheduling_own() -> bool:
    """Whether the activity being scheduled now is one of the ledger's own."""
    return _OWN.get()
