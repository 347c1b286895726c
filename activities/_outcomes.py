"""What the ledger answered a call, as the activity's result or as the typed error that
tells the workflow what to do: go on, wait for a person, retry, or end the step; counted
through the worker runtime's metric meter, by outcome."""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum
from typing import Any

from pydantic import BaseModel
from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from ..ledger import ActionRequest, ActionResult
from ..ledger._seam import EffectState, FailureType, may_act_again
from ..workflows._seam import ApprovalNeeded, ErrorType, Tool, ToolOutcome, UnknownEffect
from ._runtime import Runtime, final
from ._tracing import current_call, describe_result


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
        if result.status == "denied":
            waits = result.error_type == FailureType.APPROVAL_REQUIRED
            return cls.AWAITING_APPROVAL if waits else cls.DENIED
        if result.effect is EffectState.UNKNOWN:
            return cls.UNKNOWN
        return cls.ACTED if result.status == "succeeded" else cls.FAILED


def count_call(tool: str, outcome: CallOutcome) -> None:
    """One tool call by outcome: the metric, and the call's span."""
    activity.metric_meter().create_counter(
        "ledger_tool_calls", "ledgered tool calls by outcome"
    ).add(1, {"tool": tool, "outcome": outcome.value})
    current_call().set("outcome", outcome.value)


def record_outcome(spec: Tool[Any, Any], result: ActionResult) -> None:
    """What the ledger answered a call: counted, and described on the call's span."""
    count_call(spec.name, CallOutcome.of(result))
    describe_result(current_call(), result)


def outcome_or_raise(
    spec: Tool[Any, Any], result: ActionResult, runtime: Runtime, *, request: dict[str, Any]
) -> ToolOutcome:
    """The step's outcome if the ledger's answer ends it with an output; otherwise the
    ``ApplicationError`` whose type tells the workflow what comes next."""
    record_outcome(spec, result)
    if result.status == "denied":
        if result.error_type == FailureType.APPROVAL_REQUIRED:
            policy = runtime.policy
            needed = ApprovalNeeded(
                key=result.key,
                fingerprint=ActionRequest.parse(request).fingerprint(),
                capability=spec.capability,
                performer=request["performer"],
                arguments=request["payload"],
                approvers=policy.approvers,
                keys=policy.keys,
                signature_required=policy.signed_decisions,
                address=runtime.address,
                awaiting_approval_attribute=runtime.awaiting_approval_attribute,
            )
            raise _hand_over(f"{spec.name}: {result.error}", needed, ErrorType.AWAITING_APPROVAL)
        if result.error_type == FailureType.APPROVAL_REJECTED:
            raise final(f"{spec.name}: {result.error}", ErrorType.REJECTED)
        # The key is not used up, but the policy that denied this performer still stands.
        raise final(result.error or "denied", ErrorType.DENIED)
    if result.compacted and spec.output_type is not None:
        # The step happened long ago and its output is gone: answer, never act again,
        # and say so instead of handing the workflow an output that is not there.
        raise final(
            f"{spec.name}: the outcome of {result.key!r} ({result.status}) was compacted; "
            "its output is no longer recorded",
            ErrorType.OUTPUT_COMPACTED,
        )
    confirmed = result.verdict == "effect_confirmed"
    if result.status == "succeeded" or confirmed:
        reconciled = confirmed and result.status != "succeeded"
        outcome = ToolOutcome.model_validate(result, from_attributes=True)
        return outcome.model_copy(update={"reconciled": reconciled})
    status, effect, retryable = result.status, result.effect, result.retryable
    if may_act_again(status=status, effect=effect, retryable=retryable, retry_safe=spec.retry_safe):
        # Temporal's retry policy schedules the attempt (for an unknown effect, because the
        # far side deduplicates by key).
        unknown = effect is EffectState.UNKNOWN
        delay = None if unknown or not result.retry_after else timedelta(seconds=result.retry_after)
        raise ApplicationError(
            result.error or ("effect unknown" if unknown else "no effect"),
            type=ErrorType.EFFECT_UNKNOWN_RETRY_SAFE if unknown else ErrorType.NO_EFFECT_RETRYABLE,
            next_retry_delay=delay,
            category=ApplicationErrorCategory.BENIGN,
        )
    if result.effect is EffectState.UNKNOWN:
        policy = runtime.policy
        details = UnknownEffect(
            key=result.key,
            action_id=result.reused_from_action_id or result.action_id,
            capability=spec.capability,
            error=result.error,
            reconcilers=policy.reconcilers,
            keys=policy.keys,
            signature_required=policy.signed_verdicts,
            address=runtime.address,
            open_effects_attribute=runtime.open_effects_attribute,
            probe=spec.has_probe,
            output_schema=request.get("output_schema"),
        )
        message = f"{spec.name}: the effect of {result.key!r} is unknown: {result.error}"
        raise _hand_over(message, details, ErrorType.EFFECT_UNKNOWN)
    raise final(f"{spec.name}: {result.error or 'failed'}", ErrorType.FAILED)


def _hand_over(message: str, details: BaseModel, kind: ErrorType) -> ApplicationError:
    """The call waits for a person: the workflow (run_tool, or the plugin's interceptor
    for a ledger_activities call) waits for the answer and says so once. The activity's
    failure is that expected hand-over, not an error to log with a traceback."""
    return final(message, kind, details.model_dump(), category=ApplicationErrorCategory.BENIGN)
