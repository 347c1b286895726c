"""Activities the ledger's workflow side schedules itself, told apart from the workflow's own.

The plugin's workflow interceptor numbers the activities a workflow schedules, and a
ledgered activity's key holds that number. The ledger's own activities (``run_tool``
attempts, recording a verdict or an approval, probes, another attempt of a parked call)
exist in some runs and not in others: a run that parked schedules a reconcile activity
that its reset run, answered from the ledger, does not. Counted, they would shift the
number, and so the key, of every later call. They are started here, marked for the
interceptor, and not counted.
"""

from __future__ import annotations

import contextvars
from typing import Any

from temporalio import workflow

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
