"""Asking a tool's probe about an unknown effect before the call parks for a person."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

from ..activities import PROBE_ACTIVITY, ErrorType, ProbeInput, ProbeResult, UnknownEffect
from ._inbox import cause_message
from ._scheduling import start_own_activity
from ._tracing import decided

#: A probe only reads; a few tries, then the call parks for a person as it would without one.
PROBE_TIMEOUT = timedelta(seconds=30)
PROBE_RETRY_POLICY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_attempts=3,
    non_retryable_error_types=[ErrorType.PROBE_UNAVAILABLE, ErrorType.RECONCILE_REFUSED],
)


async def ask_probe(
    tool: str, unknown: UnknownEffect, arg: Any, *, task_queue: str | None
) -> ProbeResult | None:
    """Ask ``tool``'s probe about the unknown effect; ``None`` if it could not answer.

    ``present`` comes back with the output the ledger recorded for the verdict; ``absent``
    (where conclusive) means the call may act again under its key; ``resolved`` that the
    key was settled meanwhile and the call should run again to read it.
    """
    try:
        found: ProbeResult = await start_own_activity(
            PROBE_ACTIVITY,
            ProbeInput(key=unknown.key, tool=tool, action_id=unknown.action_id, arg=arg),
            result_type=ProbeResult,
            start_to_close_timeout=PROBE_TIMEOUT,
            retry_policy=PROBE_RETRY_POLICY,
            task_queue=task_queue,
        )
    except ActivityError as err:
        workflow.logger.warning(
            "the probe of %s for key %r failed (%s); the call parks for an operator",
            tool,
            unknown.key,
            cause_message(err),
        )
        return None
    if found.verdict is not None:
        decided("verdict", unknown.key, verdict=found.verdict.value, actor=f"probe:{tool}")
    return found
