"""What the activity side counts, through the worker runtime's metric meter: tool calls by
outcome, verdicts recorded, approvers' decisions."""

from __future__ import annotations

from enum import StrEnum

from temporalio import activity

from ..ledger import ActionResult, ActionStatus, Verdict
from ..ledger._seam import Decision, EffectState, FailureType
from ._tracing import current_call


class CallOutcome(StrEnum):
    """What a ledgered tool call came to, as counted by the ``ledger_tool_calls`` metric."""

    ACTED = "acted"
    REPLAYED = "replayed"
    REFUSED = "refused"
    DENIED = "denied"
    FAILED = "failed"
    UNKNOWN = "unknown"
    AWAITING_APPROVAL = "awaiting_approval"

    @classmethod
    def of(cls, result: ActionResult) -> CallOutcome:
        """What the ledger's answer to a call counts as."""
        if result.replayed:
            return cls.REPLAYED
        if (
            result.status is ActionStatus.DENIED
            and result.error_type == FailureType.APPROVAL_REQUIRED
        ):
            return cls.AWAITING_APPROVAL
        if result.status is ActionStatus.DENIED:
            return cls.DENIED
        if result.effect is EffectState.UNKNOWN:
            return cls.UNKNOWN
        if result.status is ActionStatus.SUCCEEDED:
            return cls.ACTED
        return cls.FAILED


def count_call(tool: str, outcome: CallOutcome) -> None:
    """One tool call by outcome: the metric, and the call's span."""
    activity.metric_meter().create_counter(
        "ledger_tool_calls", "ledgered tool calls by outcome"
    ).add(1, {"tool": tool, "outcome": outcome.value})
    current_call().set("outcome", outcome.value)


def count_reconciliation(verdict: Verdict, *, actor: str) -> None:
    """One verdict recorded, by verdict and by who gave it (``operator`` or ``probe:<tool>``)."""
    activity.metric_meter().create_counter(
        "ledger_reconciliations", "verdicts on unknown effects recorded in the ledger"
    ).add(1, {"verdict": verdict.value, "actor": actor})


def count_approval(decision: Decision) -> None:
    """One approver's decision recorded."""
    activity.metric_meter().create_counter(
        "ledger_approvals", "approvers' decisions recorded in the ledger"
    ).add(1, {"decision": decision.value})
