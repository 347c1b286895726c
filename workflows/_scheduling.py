"""How the ledger's workflow side schedules its activities: with the options the plugin
gave the run, and told apart from the workflow's own activities.

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

from ._options import LedgerOptions, activity_config, merged
from ._protocol import FINAL_ERROR_TYPES, ErrorType

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
    given: dict[str, Any], *, run: LedgerOptions = _DEFAULTS, calls_inside: bool = False
) -> dict[str, Any]:
    """The options of an attempt that only asks the ledger, for a call scheduled with
    ``given`` (``start_activity``'s keyword arguments, or a ``StartActivityInput``'s fields).

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
            start_to_close_timeout=given.get("start_to_close_timeout")
            or given.get("schedule_to_close_timeout"),
            heartbeat_timeout=given.get("heartbeat_timeout"),
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
