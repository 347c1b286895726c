"""The rule's transactions for people's decisions on a key: an approval or rejection of
the call that waits for one, a verdict on an unknown effect, and compaction of an outcome
past its retention. Pure, like the rest of the rule (:mod:`._rule`): each runs inside one
storage transaction."""

from __future__ import annotations

import dataclasses
from typing import Any

from ._completion import is_expired, recover_expired
from ._errors import InvalidRequest
from ._models import (
    Approval,
    ApprovalState,
    Decision,
    EffectState,
    EventType,
    Reconciliation,
    Verdict,
)
from ._schema import output_misfit
from ._transaction import KeyRecord, Phase, Transaction


def compact_key(tx: Transaction, *, cutoff: str) -> int:
    record = tx.record
    if (
        record is None
        or record.phase != Phase.SETTLED
        or record.outcome is None
        or record.outcome.compacted
        or record.outcome.effect == EffectState.UNKNOWN
        or (record.settled_at or "") >= cutoff
    ):
        return 0
    bodies = tx.compact_bodies(through_seq=2**62)
    outcome = dataclasses.replace(record.outcome, output=None, error=None, compacted=True)
    record.outcome = outcome
    record.reconciliations = [
        r.model_copy(update={"evidence": [], "output": None}) for r in record.reconciliations
    ]
    tx.append(
        EventType.COMPACTED,
        None,
        {
            "fingerprint": record.fingerprint,
            "status": outcome.status,
            "effect": outcome.effect,
            "events_compacted": bodies,
        },
    )
    tx.save(record)
    return 1


def decide_approval(
    tx: Transaction,
    *,
    fingerprint: str,
    decision: Decision,
    actor: str,
    basis: str,
    approval_id: str,
    signature: dict[str, Any] | None = None,
) -> tuple[str | None, Approval | None]:
    """Record a person's decision on the call awaiting approval under the key.

    Returns ``(None, approval)``, or for a refusal (recorded as
    ``action.approval_refused``) the reason and the approval if somebody decided it
    already. The same decision by the same actor again (a retried activity) is
    answered with what was recorded, and records nothing. ``signature`` (its author's
    proof, see ``_signatures``) is recorded with the decision.
    """
    record = tx.record
    approval = record.approval if record is not None else None
    decided = ApprovalState.APPROVED if decision is Decision.APPROVE else ApprovalState.REJECTED
    reason: str | None = None
    if record is None or approval is None:
        reason = "no call under this key awaits approval"
    elif approval.fingerprint != fingerprint:
        reason = (
            f"the decision names fingerprint {fingerprint}, but the call under this key has "
            f"fingerprint {approval.fingerprint}: a decision holds only for the exact request "
            "it was shown"
        )
    elif actor == approval.performer:
        reason = f"{actor!r} is the call's performer, and a performer never approves its own call"
    elif approval.state == decided and approval.actor == actor:
        return None, approval
    elif approval.state != ApprovalState.REQUESTED:
        by = f" by {approval.actor!r}" if approval.actor else ""
        reason = f"the call's approval is already {approval.state}{by}"
    body = _signed(
        signature, fingerprint=fingerprint, decision=decision.value, actor=actor, basis=basis
    )
    if reason is not None:
        _refuse(tx, EventType.APPROVAL_REFUSED, body, reason)
        settled = approval is not None and approval.state != ApprovalState.REQUESTED
        return reason, approval if settled else None
    assert record is not None and approval is not None
    approval = approval.model_copy(
        update={
            "state": decided,
            "approval_id": approval_id,
            "actor": actor,
            "basis": basis,
            "decided_at": tx.recorded_at,
            **({"signature": signature} if signature is not None else {}),
        }
    )
    tx.append(
        EventType.APPROVED if decision is Decision.APPROVE else EventType.APPROVAL_REJECTED,
        None,
        {
            **body,
            "approval_id": approval_id,
            "capability": approval.capability,
            "performer": approval.performer,
        },
    )
    record.approval = approval
    tx.save(record)
    return None, approval


def reconcile_key(
    tx: Transaction,
    *,
    verdict: Verdict,
    actor: str,
    basis: str,
    evidence: list[Any],
    output: Any,
    action_id: str | None = None,
    signature: dict[str, Any] | None = None,
) -> tuple[str, str | None] | None:
    """Append a verdict on the key's unknown effect; the refusal's reason (recorded as
    ``action.reconcile_refused``) and the effect if it is known. ``action_id``: the
    action the verdict is about, refused if the unknown effect is another's;
    ``signature`` (its author's proof) is recorded with the verdict."""
    record = tx.record
    reason, known_effect = _unknown_effect_of(tx, record, action_id=action_id)
    body = _signed(signature, verdict=verdict.value, actor=actor, basis=basis)
    if reason is None and verdict is Verdict.EFFECT_CONFIRMED:
        assert record is not None
        misfit = (
            None if record.output_schema is None else output_misfit(record.output_schema, output)
        )
        if misfit:
            # Bad input, not a refusal: raising rolls the transaction back, nothing kept.
            raise InvalidRequest(misfit)
    if reason is not None:
        _refuse(tx, EventType.RECONCILE_REFUSED, body, reason)
        return reason, known_effect
    assert record is not None and record.outcome is not None
    outcome = dataclasses.replace(record.outcome, verdict=verdict.value)
    if verdict is Verdict.EFFECT_CONFIRMED:
        outcome = dataclasses.replace(outcome, effect=EffectState.OBSERVED, output=output)
    elif verdict is Verdict.NO_EFFECT_CONFIRMED:
        outcome = dataclasses.replace(outcome, effect=EffectState.NONE, retryable=True)
    tx.append(
        EventType.RECONCILED,
        outcome.action_id,
        {**body, "evidence": evidence, "output": output, "effect": outcome.effect},
    )
    record.outcome = outcome
    record.reconciliations.append(
        Reconciliation(
            verdict=verdict,
            actor=actor,
            basis=basis,
            evidence=evidence,
            output=output,
            recorded_at=tx.recorded_at,
            signature=signature,
        )
    )
    tx.save(record)
    return None


def _signed(signature: dict[str, Any] | None, **body: Any) -> dict[str, Any]:
    """A decision's recorded body, with its author's proof when it was signed."""
    return body if signature is None else {**body, "signature": signature}


def _refuse(tx: Transaction, refusal: EventType, body: dict[str, Any], reason: str) -> None:
    """Record a decision that was not taken, and why; the key's state stays as it was."""
    tx.append(refusal, None, {**body, "reason": reason})
    tx.save(tx.record or KeyRecord(key=tx.key))


def _unknown_effect_of(
    tx: Transaction, record: KeyRecord | None, *, action_id: str | None
) -> tuple[str | None, EffectState | None]:
    """Why a verdict cannot be about the key's effect (and the effect, when it is known),
    or ``(None, None)`` when the key's effect is unknown; an expired claim is recovered
    first, so its interruption is what the verdict settles."""
    if record is None or record.phase in (Phase.VACANT, Phase.AWAITING_APPROVAL):
        return "no execution is recorded for this key", None
    if record.phase in (Phase.CLAIMED, Phase.RUNNING):
        if not is_expired(record, tx.now):
            return "an execution holds the key and is still running; wait for it", None
        recover_expired(tx, record)
    outcome = record.outcome
    assert outcome is not None
    if outcome.effect != EffectState.UNKNOWN:
        return f"its effect is {outcome.effect}, not unknown", outcome.effect
    if action_id is not None and outcome.action_id != action_id:
        # The action the verdict is about was settled; the key moved on to another.
        return (
            f"the verdict is about action {action_id}, but the unknown effect of this key "
            f"is action {outcome.action_id}'s",
            outcome.effect,
        )
    return None, None
