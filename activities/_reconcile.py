"""The activity that records an operator's verdict in the ledger."""

from __future__ import annotations

from temporalio import activity
from temporalio.exceptions import ApplicationError

from ..ledger import InvalidRequest, LedgerUnavailable, ReconciliationRefused
from . import _payloads as p
from ._runtime import current_runtime

RECONCILE_ACTIVITY = "ledger.reconcile"


@activity.defn(name=RECONCILE_ACTIVITY)
async def reconcile_effect(verdict: p.ReconcileInput) -> p.ReconcileResult:
    """Check the actor against the policy, then append the verdict beside the key's history."""
    # One heartbeat at once: the workflow's short heartbeat timeout then notices a worker
    # that died here within seconds instead of at the start-to-close timeout.
    activity.heartbeat()
    runtime = current_runtime()
    if not runtime.policy.may_reconcile(verdict.actor):
        raise ApplicationError(
            f"actor {verdict.actor!r} may not reconcile effects under this worker's policy",
            type=p.ErrorType.RECONCILE_NOT_ALLOWED,
            non_retryable=True,
        )
    try:
        state = await runtime.ledger.reconcile(
            verdict.key,
            verdict.verdict,
            verdict.actor,
            verdict.basis,
            evidence=verdict.evidence,
            output=verdict.output,
        )
    except ReconciliationRefused as exc:
        kind = (
            p.ErrorType.RECONCILE_ALREADY_RESOLVED
            if exc.effect is not None
            else p.ErrorType.RECONCILE_REFUSED
        )
        raise ApplicationError(str(exc), type=kind, non_retryable=True) from None
    except InvalidRequest as exc:
        raise ApplicationError(
            str(exc), type=p.ErrorType.RECONCILE_REFUSED, non_retryable=True
        ) from None
    except LedgerUnavailable as exc:
        raise ApplicationError(str(exc), type=p.ErrorType.LEDGER_UNAVAILABLE) from None
    activity.metric_meter().create_counter(
        "ledger_reconciliations", "operators' verdicts recorded in the ledger"
    ).add(1, {"verdict": verdict.verdict.value})
    return p.ReconcileResult(
        key=state.key,
        verdict=verdict.verdict,
        effect=state.effect,
        next_operation=state.next_operation,
    )
