"""The rule's transactions after a claim: the started marker (after the precondition
was read), the completion, lease renewal, and the releases of a claim whose adapter never
ran. Pure, like the rest of the rule (:mod:`._rule`): each runs inside one storage
transaction, and a stale fencing token only ever records late evidence."""

from __future__ import annotations

from typing import Any

from ._answers import Stop, result_of
from ._errors import ActionInProgressError
from ._models import ActionResult, EffectState, EventType, FailureType
from ._transaction import KeyRecord, Outcome, Phase, Transaction, iso


def mark_started(
    tx: Transaction, *, action_id: str, token: int, failure: Stop | None, lease: float
) -> ActionResult | ActionInProgressError | None:
    record = tx.record
    if record is None or record.token != token or record.phase != Phase.CLAIMED:
        # The claim expired while the state was read and another request took over;
        # that takeover already gave this request its completion.
        return late_answer(tx, record, action_id)
    if failure is not None:
        outcome = release_without_effect(tx, record, *failure)
        tx.save(record)
        return result_of(outcome, key=tx.key, action_id=action_id, replayed=False)
    record.phase = Phase.RUNNING
    record.lease_expires = tx.now + lease
    append_started(tx, record, action_id, precondition_checked=True)
    tx.save(record)
    return None


def append_started(tx: Transaction, record: KeyRecord, action_id: str, **more: Any) -> None:
    """Append the started marker of the claim ``action_id`` holds, naming the approval it
    consumed: no durable marker, no effect."""
    started = {"token": record.token, "lease_expires_at": iso(record.lease_expires or 0)}
    if (approval := record.approval) is not None and approval.consumed_by == action_id:
        started["approval_id"] = approval.approval_id
    tx.append(EventType.STARTED, action_id, {**started, **more})


def complete(
    tx: Transaction, *, action_id: str, token: int, fields: dict[str, Any]
) -> ActionResult | ActionInProgressError:
    record = tx.record
    outcome = None if record is None else record.outcome
    # An earlier try committed and its answer was lost: answer what it recorded rather
    # than resolve the action a second time. The one other outcome ever recorded under a
    # started attempt's action id and token is the interruption a recovery writes once
    # its lease expired: not the attempt's report.
    if (
        outcome is not None
        and (outcome.action_id, outcome.token) == (action_id, token)
        and not outcome.interrupted
    ):
        return result_of(outcome, key=tx.key, action_id=action_id, replayed=False)
    if record is None or record.token != token or record.phase != Phase.RUNNING:
        # A stale fencing token: the lease was lost and the key moved on. Keep what
        # this attempt saw as evidence for the operator; it is not the outcome.
        keep_as_evidence(tx, record, action_id=action_id, token=token, fields=fields)
        if record is not None:
            tx.save(record)
        return late_answer(tx, record, action_id)
    outcome = Outcome(action_id=action_id, recorded_at=tx.recorded_at, token=token, **fields)
    settle(tx, record, outcome)
    tx.save(record)
    return result_of(outcome, key=tx.key, action_id=action_id, replayed=False)


def keep_as_evidence(
    tx: Transaction,
    record: KeyRecord | None,
    *,
    action_id: str,
    token: int | None,
    fields: dict[str, Any],
) -> None:
    """Record an attempt's report that is not the key's outcome (``action.late_completion``)."""
    tokens = {"token": token, "current_token": record.token if record else None}
    reported = {k: (v.value if hasattr(v, "value") else v) for k, v in fields.items()}
    tx.append(EventType.LATE_COMPLETION, action_id, {**tokens, **reported})


def late_answer(
    tx: Transaction, record: KeyRecord | None, action_id: str
) -> ActionResult | ActionInProgressError:
    """The key's outcome for an attempt that lost its claim, or the error to raise
    once the transaction has committed (raising inside it would roll back the
    late evidence just recorded)."""
    if record is None or record.outcome is None or record.phase != Phase.SETTLED:
        return ActionInProgressError(
            key=tx.key,
            holder_action_id=(record.holder_action_id or "") if record else "",
            lease_remaining=max(0.0, ((record.lease_expires or 0) if record else 0) - tx.now),
            action_id=action_id,
        )
    return result_of(record.outcome, key=record.key, action_id=action_id, replayed=True)


def extend_lease(tx: Transaction, *, token: int, lease: float) -> bool:
    """Renew a live lease held under ``token``; an expired one is lost for good, since a
    new claimer may already have recovered the key."""
    record = tx.record
    if (
        record is None
        or record.token != token
        or record.phase not in (Phase.CLAIMED, Phase.RUNNING)
        or (record.lease_expires or 0) <= tx.now
    ):
        return False
    record.lease_expires = tx.now + lease
    tx.save(record)
    return True


def stopped_waiting(tx: Transaction, *, action_id: str) -> None:
    record = tx.record
    assert record is not None  # the request it waits for was recorded under this key
    deferred = {"holder_action_id": record.holder_action_id, "stopped_waiting": True}
    tx.append(EventType.DEFERRED, action_id, deferred)
    tx.save(record)


def release_unused_claim(tx: Transaction, *, action_id: str) -> None:
    """After a lost connection, settle a claim ``action_id`` may hold as no effect: the
    commit that claimed the key may have landed though its answer was lost, and the
    adapter has not run. Any other key is left as it is."""
    record = tx.record
    if (
        record is None
        or record.holder_action_id != action_id
        or record.phase not in (Phase.CLAIMED, Phase.RUNNING)
    ):
        return
    lost = "the ledger connection was lost before the adapter ran; nothing was executed"
    release_without_effect(tx, record, lost, FailureType.LEDGER_UNAVAILABLE)
    tx.save(record)


def recover_expired(tx: Transaction, record: KeyRecord) -> None:
    """Settle a claim whose lease expired: the crash gap, or an abandoned claim.

    A claim that never reached its started marker caused nothing; an execution that
    started and never reported may have. Either way the holder's request gets its
    one completion here, so nobody waits on a dead worker again.
    """
    if record.phase == Phase.CLAIMED:
        abandoned = "abandoned before the started marker (lease expired); nothing was executed"
        release_without_effect(tx, record, abandoned, FailureType.ABANDONED)
        return
    interrupted = (
        "interrupted: the execution started and never reported before its lease expired; the "
        "effect may or may not have happened"
    )
    _fail(
        tx,
        record,
        EffectState.UNKNOWN,
        error=interrupted,
        error_type=FailureType.INTERRUPTED,
        interrupted=True,
    )


def settle(tx: Transaction, record: KeyRecord, outcome: Outcome) -> None:
    """Record an original completion as the key's outcome and release the claim."""
    tx.append(EventType.COMPLETED, outcome.action_id, outcome.body())
    record.phase = Phase.SETTLED
    record.outcome = outcome
    record.holder_action_id = None
    record.lease_expires = None


def release_without_effect(
    tx: Transaction, record: KeyRecord, error: str, error_type: str, retryable: bool = True
) -> Outcome:
    """Settle a claim whose adapter never ran: no effect, and (``retryable``) the key may
    act again. ``error``, ``error_type`` and ``retryable`` are a :data:`Stop`'s, in its
    order."""
    return _fail(
        tx, record, EffectState.NONE, error=error, error_type=error_type, retryable=retryable
    )


def _fail(tx: Transaction, record: KeyRecord, effect: EffectState, **failure: Any) -> Outcome:
    """Settle the holder's execution as FAILED with ``effect`` and ``failure`` (its error,
    error type...), under its claim's token."""
    assert record.holder_action_id is not None
    holder = record.holder_action_id
    outcome = Outcome(holder, "failed", effect, tx.recorded_at, token=record.token, **failure)
    settle(tx, record, outcome)
    return outcome


def is_expired(record: KeyRecord, now: float) -> bool:
    return record.phase in (Phase.CLAIMED, Phase.RUNNING) and (record.lease_expires or 0) <= now
