"""The activities that record a person's answer in the ledger: an operator's verdict on
an unknown effect, a probe's finding, an approver's decision."""

from __future__ import annotations

import asyncio
import fnmatch
import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel
from temporalio import activity
from temporalio.exceptions import ApplicationError

from ..ledger import (
    ActionState,
    DecisionRefused,
    InvalidRequest,
    Ledger,
    LedgerUnavailable,
)
from ..ledger._seam import Signers, Verdict, model_json
from ..workflows._seam import (
    APPROVE_ACTIVITY,
    PROBE_ACTIVITY,
    RECONCILE_ACTIVITY,
    ApproveInput,
    ApproveResult,
    ErrorType,
    ProbeInput,
    ProbeOutcome,
    ProbeResult,
    ReconcileInput,
    ReconcileResult,
)
from ._policy import Policy
from ._probe import Finding, ProbeAnswer
from ._runtime import Runtime, current_runtime, final
from ._tool import argument_of

logger = logging.getLogger(__name__)

_Recorded = TypeVar("_Recorded")


@activity.defn(name=RECONCILE_ACTIVITY)
async def reconcile_effect(verdict: ReconcileInput) -> ReconcileResult:
    """Check the actor and its signature against the policy, then append the verdict
    beside the key's history.

    A key somebody reconciled first (``temporal-ledger reconcile``) fails with
    ``RECONCILE_ALREADY_RESOLVED``, its details the :class:`ReconcileResult` that stands:
    the workflow answers the sender with it and the step goes on."""
    try:
        state = await _record_answer(verdict, _VERDICTS)
    except ApplicationError as err:
        if err.type != ErrorType.RECONCILE_ALREADY_RESOLVED:
            raise
        state = await asyncio.to_thread(current_runtime().ledger.state, verdict.key)
        if not state.reconciliations:
            raise
        standing = _result(state, state.reconciliations[-1].verdict)
        raise final(err.message, err.type, standing.model_dump(mode="json")) from None
    count_reconciliation(verdict.verdict, actor="operator")
    return _result(state, verdict.verdict)


def _result(state: ActionState, verdict: Verdict) -> ReconcileResult:
    return ReconcileResult(
        key=state.key, verdict=verdict, effect=state.effect, next_operation=state.next_operation
    )


@dataclass(frozen=True)
class _AnswerKind(Generic[_Recorded]):
    """What a person's answer of one kind does, and the error types that end it."""

    #: Whether the policy lets an actor give this answer.
    allowed: Callable[[Policy, str], bool]
    doing: str
    not_allowed: ErrorType
    refused: ErrorType
    #: Somebody else answered first; that answer stands.
    first: ErrorType
    #: The ``Signers`` check of the answer's fields and signature.
    signature_problem: Callable[..., str | None]
    #: Records the answer: the ``Ledger`` method whose parameters are the input's fields.
    record: Callable[..., Awaitable[_Recorded]]


_VERDICTS = _AnswerKind(
    Policy.may_reconcile,
    "reconcile effects",
    ErrorType.RECONCILE_NOT_ALLOWED,
    ErrorType.RECONCILE_REFUSED,
    ErrorType.RECONCILE_ALREADY_RESOLVED,
    Signers.verdict_problem,
    Ledger.reconcile,
)
_DECISIONS = _AnswerKind(
    Policy.may_approve,
    "approve calls",
    ErrorType.APPROVE_NOT_ALLOWED,
    ErrorType.APPROVE_REFUSED,
    ErrorType.APPROVE_ALREADY_DECIDED,
    Signers.decision_problem,
    Ledger.approve,
)


async def _record_answer(
    given: ReconcileInput | ApproveInput, kind: _AnswerKind[_Recorded]
) -> _Recorded:
    """Check the person, then record their answer, with the ledger's refusals as
    non-retryable errors: ``first`` when somebody else answered first (that answer
    stands), ``refused`` for the rest and for bad input; an unreachable ledger is retried.

    The person is checked against this worker's policy: may they do this, and does the
    signature (where one is given or required) prove them, for the run Temporal says the
    input came from. The workflow's validator checked both already; this holds an input
    that reached the activity some other way (an older workflow worker) to the policy too.
    """
    # One heartbeat at once: the workflow's short heartbeat timeout then notices a worker
    # that died here within seconds instead of at the start-to-close timeout.
    activity.heartbeat()
    runtime = current_runtime()
    if not kind.allowed(runtime.policy, given.actor):
        raise final(
            f"actor {given.actor!r} may not {kind.doing} under this worker's policy",
            kind.not_allowed,
        )
    info = activity.info()
    problem = kind.signature_problem(
        runtime.policy.signers(),
        **dict(given),
        workflow_id=info.workflow_id,
        namespace=info.workflow_namespace,
    )
    if problem is not None:
        raise final(problem, kind.not_allowed)
    try:
        return await kind.record(runtime.ledger, **dict(given))
    except DecisionRefused as exc:
        raise final(str(exc), kind.refused if exc.decided is None else kind.first) from None
    except InvalidRequest as exc:
        raise final(str(exc), kind.refused) from None
    except LedgerUnavailable as exc:
        raise ApplicationError(str(exc), type=ErrorType.LEDGER_UNAVAILABLE) from None


@activity.defn(name=APPROVE_ACTIVITY)
async def approve_call(decision: ApproveInput) -> ApproveResult:
    """Check the approver and its signature against the policy, then record the decision
    under the key."""
    approval = await _record_answer(decision, _DECISIONS)
    activity.metric_meter().create_counter(
        "ledger_approvals", "approvers' decisions recorded in the ledger"
    ).add(1, {"decision": decision.decision.value})
    return ApproveResult(
        key=decision.key,
        fingerprint=approval.fingerprint,
        decision=decision.decision,
        state=approval.state,
        actor=decision.actor,
        approval_id=approval.approval_id,
    )


@activity.defn(name=PROBE_ACTIVITY)
async def probe_effect(probe: ProbeInput) -> ProbeResult:
    """Run the tool's probe on an unknown effect and record what it found as a verdict.

    ``present`` confirms the effect with the probe's output; ``absent`` confirms no
    effect where the tool declares the far side's answer conclusive; anything else is
    recorded as ``still_unknown``, and the step parks. A probe that raises is retried by
    Temporal, and the step parks once the retries are spent.
    """
    activity.heartbeat()
    runtime = current_runtime()
    found = _probe_for(runtime, probe)
    if found is None:
        raise final(
            f"no probe for tool {probe.tool!r} on this worker: register the @tool with probe= "
            "(or the ledgered activity's rule with probe=) on the workers of its task queue",
            ErrorType.PROBE_UNAVAILABLE,
        )
    if not runtime.policy.may_probe(probe.tool):
        raise final(
            f"the policy names no probe for tool {probe.tool!r}, so its probe may not give a "
            "verdict: add the tool to [reconcile] probes in the policy file (Policy(probes=[...]))",
            ErrorType.PROBE_UNAVAILABLE,
        )
    run, arg, conclusive, check_output = found
    answer = await run(probe.key, arg)
    if not isinstance(answer, ProbeAnswer):
        raise final(
            f"{probe.tool}'s probe returned {type(answer).__name__}; it must return "
            "ProbeAnswer.present(...), .absent(...) or .inconclusive(...)",
            ErrorType.PROBE_UNAVAILABLE,
        )
    # The verdict the probe's answer is recorded as, what it rests on, and the output.
    verdict: Verdict = {
        Finding.PRESENT: "effect_confirmed",
        Finding.ABSENT: ("no_effect_confirmed" if conclusive else "still_unknown"),
        Finding.INCONCLUSIVE: "still_unknown",
    }[answer.finding]
    basis = answer.basis
    if answer.finding is Finding.ABSENT and verdict == "still_unknown":
        basis += " (not conclusive for this tool: declare probe_absence_conclusive=True)"
    output: Any = answer.output if verdict == "effect_confirmed" else None
    if isinstance(output, BaseModel):
        output = model_json(output)
    if verdict != "still_unknown" and not answer.evidence:
        # A finding that settles the effect rests on what the far side answered.
        verdict, output = "still_unknown", None
        basis = f"the probe answered {answer.finding.value} without evidence: {basis}"
    if verdict == "effect_confirmed":
        try:
            check_output(output)
        except ValueError as exc:
            raise final(
                f"{probe.tool}'s probe found the operation, but its output is not one: {exc}",
                ErrorType.PROBE_UNAVAILABLE,
            ) from None
    actor = f"probe:{probe.tool}"
    record = functools.partial(runtime.ledger.reconcile, probe.key, actor=actor)
    try:
        try:
            await record(verdict, basis=basis, evidence=answer.evidence, output=output)
        except InvalidRequest as exc:
            # An output that does not fit the tool's: the finding cannot settle the step.
            logger.warning(
                "%s: the probe's finding for %r was not usable: %s", actor, probe.key, exc
            )
            verdict, output = "still_unknown", None
            basis = f"the probe found the operation, but its output was unusable: {exc}"
            await record(verdict, basis=basis, evidence=answer.evidence, output=None)
    except DecisionRefused as exc:
        if exc.decided is None:
            raise final(str(exc), ErrorType.RECONCILE_REFUSED) from None
        # Settled meanwhile: that outcome stands.
        return ProbeResult(finding=ProbeOutcome.RESOLVED)
    except LedgerUnavailable as exc:
        raise ApplicationError(str(exc), type=ErrorType.LEDGER_UNAVAILABLE) from None
    count_reconciliation(verdict, actor=actor)
    return ProbeResult(finding=_RECORDED[verdict], verdict=verdict, output=output)


#: What the workflow is told, by the verdict recorded for the probe's answer.
_RECORDED = {
    "effect_confirmed": ProbeOutcome.PRESENT,
    "no_effect_confirmed": ProbeOutcome.ABSENT,
    "still_unknown": ProbeOutcome.INCONCLUSIVE,
}


def _probe_for(
    runtime: Runtime, probe: ProbeInput
) -> tuple[Callable[[str, Any], Any], Any, bool, Callable[[Any], Any]] | None:
    """The probe for ``probe.tool``: a ``@tool``'s, or the rule's of a ledgered activity
    (its argument then is the activity's arguments as JSON). With the argument, whether
    ``absent`` is conclusive, and a check that raises ``ValueError`` for a found output
    that cannot be the tool's (recorded as the tool's own output, as an operator's is)."""
    tool = runtime.tools.get(probe.tool)
    run = getattr(tool, "__ledger_probe__", None)
    if tool is not None and run is not None:
        spec = tool.__ledger_tool__
        arg = argument_of(spec, probe.arg, refused=ErrorType.PROBE_UNAVAILABLE)
        return run, arg, spec.probe_absence_conclusive, lambda output: None
    for rule in runtime.rules:
        if rule.probe is not None and fnmatch.fnmatchcase(probe.tool, rule.pattern):
            args = (probe.arg or {}).get("args", [])
            return rule.probe, args, rule.probe_absence_conclusive, rule.output.result
    return None


def count_reconciliation(verdict: Verdict, *, actor: str) -> None:
    """One verdict recorded, by verdict and by who gave it (``operator`` or ``probe:<tool>``)."""
    activity.metric_meter().create_counter(
        "ledger_reconciliations", "verdicts on unknown effects recorded in the ledger"
    ).add(1, {"verdict": verdict, "actor": actor})
