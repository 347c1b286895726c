"""How a call's unknown effect is settled: the tool's probe asks the far side first, and
the call parks for a person only if the probe cannot tell."""

from __future__ import annotations

import dataclasses
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError

from ..ledger import Verdict
from ._inbox import Inbox, cause_message
from ._options import LedgerOptions
from ._protocol import PROBE_ACTIVITY, ProbeInput, ProbeOutcome, ProbeResult, UnknownEffect
from ._scheduling import scheduling, start_own_activity
from ._tracing import decided
from ._waiting import Call


@dataclasses.dataclass(frozen=True)
class Confirmed:
    """The effect happened, with this output (the tool's own, as recorded in the ledger)."""

    output: Any


async def settle_unknown(
    inbox: Inbox,
    call: Call,
    unknown: UnknownEffect,
    *,
    activity: str,
    arg: Any,
    task_queue: str | None,
) -> Confirmed | None:
    """Wait until the unknown effect of ``call`` is settled: by the probe of the tool
    ``activity``, if it has one, else by a person's verdict in the run's ``inbox``.

    Returns the confirmed effect, or ``None`` when the call should run again under its key
    (no effect confirmed, or the key settled elsewhere: the ledger answers the next try).
    """
    if unknown.probe:
        found = await ask_probe(activity, unknown, arg, run=inbox.options, task_queue=task_queue)
        if found is not None and found.finding is ProbeOutcome.PRESENT:
            return Confirmed(found.output)
        if found is not None and found.runs_again:
            return None
    verdict = await inbox.park(call, unknown)
    if verdict is not None and verdict.verdict is Verdict.EFFECT_CONFIRMED:
        return Confirmed(verdict.output)
    return None


async def ask_probe(
    tool: str, unknown: UnknownEffect, arg: Any, *, run: LedgerOptions, task_queue: str | None
) -> ProbeResult | None:
    """Ask ``tool``'s probe about the unknown effect; ``None`` if it could not answer.

    ``present`` comes back with the output the ledger recorded for the verdict; ``absent``
    (where conclusive) means the call may act again under its key; ``resolved`` that the
    key was settled meanwhile and the call should run again to read it. A probe only
    reads: a few tries, then the call parks for a person as it would without one.
    """
    try:
        found: ProbeResult = await start_own_activity(
            PROBE_ACTIVITY,
            ProbeInput(key=unknown.key, tool=tool, action_id=unknown.action_id, arg=arg),
            result_type=ProbeResult,
            **scheduling("probe", run=run, task_queue=task_queue),
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
