"""What every crash-matrix worker shares (``tests.crash_tools`` for the main matrix,
``tests.crash_tools_strands`` for Strands' rows, which run in .venv-strands): the
timings, the policy, and ``CrashPoints``, the interceptor that stops a tool call before
the ledger and after its record. Temporal and the ledger, no agent framework.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from temporal_ledger.activities import Policy
from temporalio import activity
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

from tests.crash_points import AFTER_RECORD, BEFORE_CLAIM, cell_of_workflow, hold

#: Seconds a started call holds its key, and how soon Temporal gives up an attempt whose
#: worker stopped heartbeating: a dead worker's call is found out within seconds. Not
#: shorter: on a busy machine a worker that just took over two dozen runs stalls for
#: seconds, a live call of its own then loses its lease or its attempt, and the matrix
#: would show that instead of the crash.
LEASE = 10.0
HEARTBEAT = timedelta(seconds=10)
#: Longer than the matrix holds any call: the first cell held waits for the last of the
#: 40 to reach its point before the kill (25 to 33 s on a loaded 2-core machine), and a
#: live attempt that Temporal times out meanwhile would show a retry, not the crash. A
#: dead worker's call is found out by HEARTBEAT, not by this.
START_TO_CLOSE = timedelta(seconds=90)
POLICY = Policy(
    performers={"crash-matrix": ["files.*"], "Crash*Workflow": ["activity.*"]},
    reconcilers=["ops-*"],
)
#: A dead worker's cached runs go to another worker after this long.
STICKY_TIMEOUT = timedelta(seconds=1)
#: How often a live attempt's heartbeats reach Temporal at most. The SDK's default sends
#: them every 0.8 heartbeat timeouts (8 of HEARTBEAT's 10 s): a dev server slowed for
#: 2 s by a loaded machine then times out a call held at its crash point, and the next
#: attempt replays what the held one records (CI once saw run_tool_safe.e and
#: oai_tool.e end so). The matrix tests crashes, not that margin.
HEARTBEAT_THROTTLE = timedelta(seconds=1)


class CrashPoints(Interceptor):
    """Stops a tool call before the ledger claims its key, or after the ledger recorded
    its outcome and before Temporal hears of it (where ``CRASH_ARM`` says). Put first in
    ``Worker(interceptors=...)``: the ledger's plugin appends its own after it, inside.

    Args:
        tool_activities: Patterns (``fnmatch``) of the activity types that call a tool,
            one per way (not the model calls, not tool lists).
    """

    def __init__(self, tool_activities: Iterable[str]) -> None:
        self.tool_activities = tuple(tool_activities)

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _Stops(next, self.tool_activities)


class _Stops(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, tool_activities: tuple[str, ...]):
        super().__init__(next)
        self.tool_activities = tool_activities

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        info = activity.info()
        calls_a_tool = any(fnmatch.fnmatchcase(info.activity_type, p) for p in self.tool_activities)
        cell = cell_of_workflow(info.workflow_id) if calls_a_tool else None
        if cell is not None:
            await hold(cell, BEFORE_CLAIM, heartbeat=activity.heartbeat)
        result = await self.next.execute_activity(input)
        if cell is not None:
            await hold(cell, AFTER_RECORD, heartbeat=activity.heartbeat)
        return result
