"""The rule as a pure decision: given a key's recorded state and a request, which events
to append, what the key holds next, and what to answer.

Every function of the rule runs inside one storage transaction (:class:`Transaction`): it
reads ``tx.record`` and ``tx.now``, appends events and saves the record, and does nothing
else: no I/O of its own, no clock, no asyncio. This module admits a call (:func:`admit`)
or records one that acted first (:func:`record_acted`); :mod:`._completion` carries a
claim to its outcome, :mod:`._decisions` records people's decisions, and :mod:`._answers`
says what a key answers. ``Ledger`` (the async shell, :mod:`._ledger`) loads the state, runs
these in transactions, and runs the adapter between them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ._answers import result_of
from ._canonical import DIMENSIONS, FINGERPRINT_VERSION, combine, fingerprint_dimensions
from ._completion import append_started, is_expired, keep_as_evidence, recover_expired, settle
from ._errors import ActionInProgressError, IdempotencyConflictError
from ._models import (
    ActionRequest,
    ActionResult,
    Approval,
    ApprovalState,
    Authority,
    EffectState,
    EventType,
    FailureType,
)
from ._transaction import KeyRecord, Outcome, Phase, Transaction


# What the admission transaction decided (beside its answer or its conflict); raised or
# acted on after it committed.
@dataclasses.dataclass
class Busy:
    holder_action_id: str
    remaining: float
    recorded: bool


@dataclasses.dataclass
class Claimed:
    token: int
    started: bool
    #: The key's record as this claim committed it (with its started marker), and the
    #: storage's clock then: what a completion may expect to find if nothing intervenes.
    committed: KeyRecord | None = None
    now: float = 0.0
    #: When the caller heard of the claim, on its monotonic clock (set by the shell).
    decided: float = 0.0


#: What :func:`admit` decides: an answer, or a conflict raised once its refusal committed.
Admission = ActionResult | IdempotencyConflictError | Busy | Claimed


def answered(
    decision: ActionResult | IdempotencyConflictError | Busy, request: ActionRequest
) -> ActionResult:
    """The result a decision answers ``request`` with; its conflict or deferral raised."""
    if isinstance(decision, ActionResult):
        return decision
    if isinstance(decision, IdempotencyConflictError):
        raise decision
    raise ActionInProgressError(
        key=request.key,
        holder_action_id=decision.holder_action_id,
        lease_remaining=decision.remaining,
        action_id=request.action_id,
    )


@dataclasses.dataclass(frozen=True)
class Ask:
    """What one call asks of its key, decided on once per call and passed to every step of
    the rule that decides it: the request, who asks, its identity and how it may act.

    ``lease``: seconds a claim holds the key; ``sync_replays``: a transaction that records
    only a replay waits for the disk.
    """

    request: ActionRequest
    authority: Authority
    dimensions: dict[str, str]
    fingerprint: str
    retry_safe: bool = False
    requires_approval: bool = False
    lease: float = 30.0
    sync_replays: bool = True

    @classmethod
    def of(cls, request: ActionRequest, authority: Authority, **how: Any) -> Ask:
        """The ask of ``request`` by ``authority``, its identity fingerprinted."""
        dimensions = fingerprint_dimensions(request.identity())
        return cls(request, authority, dimensions, combine(dimensions), **how)


def admit(
    tx: Transaction, ask: Ask, *, first: bool, give_up: bool, resubmitted: bool = False
) -> Admission:
    """Decide a request's admission under its key: ``first`` records the request;
    ``resubmitted`` admits again a request recorded before and never answered (deferred,
    or holding a claim), as a new submission would be but without a second request;
    ``give_up`` records a deferral instead of leaving the caller to wait.

    The steps, in order: the request is recorded; an authority without the capability is
    refused before any lookup; a key bound to another request refuses it, a live claim
    defers it, an expired one is recovered, a settled outcome replays; a call that needs
    an approval waits for one; else the request claims the key.
    """
    request = ask.request
    record = tx.record or KeyRecord(key=request.key)
    if resubmitted:
        if (own := own_claim(tx, record, request.action_id)) is not None:
            return own
    if first:
        _record_request(tx, ask)
    authority = ask.authority
    if (first or resubmitted) and not authority.allows(request.capability):
        # Refused before any lookup: the answer has the same shape whatever the key holds.
        refused = {
            "principal": authority.principal,
            "capability": request.capability,
            "granted": list(authority.capabilities),
        }
        tx.append(EventType.AUTHORIZATION_REFUSED, request.action_id, refused)
        error = f"{authority.principal!r} may not use capability {request.capability!r}"
        return _deny(tx, record, request, error=error, error_type=FailureType.DENIED)
    if (answered := _bind_or_answer(tx, record, ask, first=first, give_up=give_up)) is not None:
        return answered
    if ask.requires_approval:
        # Only an approval of this exact request, consumed by this execution alone
        # (another one under the key needs a new approval).
        approval = record.approval
        if (
            approval is None
            or approval.state != ApprovalState.APPROVED
            or approval.fingerprint != ask.fingerprint
        ):
            return await_approval(tx, record, ask)
        consumed = {"state": ApprovalState.CONSUMED, "consumed_by": request.action_id}
        record.approval = approval.model_copy(update=consumed)
    return _claim(tx, record, ask)


def _record_request(tx: Transaction, ask: Ask) -> None:
    request = ask.request
    tx.append(
        EventType.REQUESTED,
        request.action_id,
        {
            **request.identity(),
            "context": request.context,
            **({"output_schema": request.output_schema} if request.output_schema else {}),
            **({"requires_approval": True} if ask.requires_approval else {}),
            "principal": ask.authority.principal,
            "retry_safe": ask.retry_safe,
            "fingerprint": ask.fingerprint,
            "fingerprint_version": FINGERPRINT_VERSION,
            "dimensions": ask.dimensions,
        },
    )


def _deny(
    tx: Transaction,
    record: KeyRecord,
    request: ActionRequest,
    *,
    error: str,
    error_type: FailureType,
    fingerprint: str | None = None,
) -> ActionResult:
    """Answer the request DENIED, with no effect; the key's outcome stays as it was."""
    outcome = Outcome(
        action_id=request.action_id,
        status="denied",
        effect=EffectState.NONE,
        recorded_at=tx.recorded_at,
        error=error,
        error_type=error_type,
        fingerprint=fingerprint,
    )
    tx.append(EventType.COMPLETED, request.action_id, outcome.body())
    tx.save(record)
    return result_of(outcome, key=request.key, action_id=request.action_id, replayed=False)


def _bind_or_answer(
    tx: Transaction, record: KeyRecord, ask: Ask, *, first: bool, give_up: bool
) -> Admission | None:
    """Bind a vacant key to the request, or answer from the request the key is bound to:
    a conflict, a deferral or a replay; ``None`` when the request may act (after
    recovering an expired claim)."""
    request = ask.request
    if record.phase == Phase.VACANT:
        # The key's first admitted request: from now on the key holds this request alone.
        record.fingerprint = ask.fingerprint
        record.fingerprint_version = FINGERPRINT_VERSION
        record.dimensions = ask.dimensions
        record.capability = request.capability
        record.performer = request.performer
        record.original_action_id = request.action_id
        return None
    if record.fingerprint != ask.fingerprint:
        return _refuse_conflict(tx, record, ask)
    recovered = record.phase in (Phase.CLAIMED, Phase.RUNNING)  # once it is not live
    if recovered:
        if not is_expired(record, tx.now):
            return _defer(tx, record, request, first=first, give_up=give_up)
        recover_expired(tx, record)
    # Both this request and the attempt that left the outcome must be retry-safe:
    # a caller cannot declare an unknown effect of an unguarded attempt safe.
    if record.phase == Phase.SETTLED:
        assert record.outcome is not None  # a settled key has its outcome
        if not record.outcome.may_act_again(ask.retry_safe and record.retry_safe):
            # A recovery settles the crash gap: a decision, durable like every other.
            tx.durable = ask.sync_replays or recovered
            return _replay(tx, record, request)
    return None


def _refuse_conflict(tx: Transaction, record: KeyRecord, ask: Ask) -> IdempotencyConflictError:
    request = ask.request
    # The dimensions whose hashes differ, in identity order.
    names = [name for name in DIMENSIONS if record.dimensions.get(name) != ask.dimensions[name]]
    tx.append(
        EventType.REPLAY_REFUSED,
        request.action_id,
        {
            "key": request.key,
            "original_action_id": record.original_action_id,
            "fingerprint_version": record.fingerprint_version,
            "dimensions": names,
            "fingerprint": ask.fingerprint,
            "original_fingerprint": record.fingerprint,
        },
    )
    tx.save(record)
    return IdempotencyConflictError(
        key=request.key,
        original_action_id=record.original_action_id or "",
        dimensions=names,
        fingerprint_version=record.fingerprint_version or FINGERPRINT_VERSION,
        action_id=request.action_id,
    )


def _defer(
    tx: Transaction, record: KeyRecord, request: ActionRequest, *, first: bool, give_up: bool
) -> Busy:
    """A live claim holds the key: the caller waits, or (giving up) the deferral is recorded."""
    remaining = (record.lease_expires or 0) - tx.now
    holder = record.holder_action_id or ""
    if give_up:
        tx.append(
            EventType.DEFERRED,
            request.action_id,
            {"holder_action_id": holder, "lease_remaining": round(remaining, 3)},
        )
    if give_up or first:
        tx.save(record)
    return Busy(holder, remaining, recorded=give_up)


def _replay(tx: Transaction, record: KeyRecord, request: ActionRequest) -> ActionResult:
    outcome = record.outcome
    assert outcome is not None
    tx.append(
        EventType.COMPLETED,
        request.action_id,
        {
            **outcome.body(),
            "action_id": request.action_id,
            "replayed": True,
            "reused_from_action_id": outcome.action_id,
            "recorded_at": tx.recorded_at,
        },
    )
    tx.save(record)
    return result_of(outcome, key=request.key, action_id=request.action_id, replayed=True)


def _claim(tx: Transaction, record: KeyRecord, ask: Ask) -> Claimed:
    """Take the key under a new fencing token; without a precondition to check first, the
    started marker is written in the same transaction."""
    request = ask.request
    record.token += 1
    record.holder_action_id = request.action_id
    record.lease_expires = tx.now + ask.lease
    record.retry_safe = ask.retry_safe
    record.output_schema = request.output_schema
    started = request.precondition is None
    record.phase = Phase.RUNNING if started else Phase.CLAIMED
    if started:
        append_started(tx, record, request.action_id)
    tx.save(record)
    # The transaction's record is the caller's once it commits: no copy needed.
    return Claimed(record.token, started, committed=record if started else None, now=tx.now)


def own_claim(tx: Transaction, record: KeyRecord, action_id: str) -> Admission | None:
    """A resubmitted request that holds the key itself, or whose claim already settled:
    its own answer, never a replay of itself. ``None`` for any other key."""
    if record.holder_action_id == action_id and record.phase in (Phase.CLAIMED, Phase.RUNNING):
        if not is_expired(record, tx.now):
            return Busy(action_id, (record.lease_expires or 0) - tx.now, recorded=False)
        recover_expired(tx, record)  # the crash gap of its own claim: settled once, here
        tx.save(record)  # its outcome, below, is its own: the recovery settles the holder's
    if (outcome := record.outcome) is not None and outcome.action_id == action_id:
        # Its claim settled: just now, or between the lookup of its history and this
        # transaction.
        return result_of(outcome, key=tx.key, action_id=action_id, replayed=False)
    return None


def await_approval(tx: Transaction, record: KeyRecord, ask: Ask) -> ActionResult:
    """Answer a call that needs an approval it does not hold: DENIED, no effect, and the
    key bound to the request's fingerprint so that the approval names exactly this call."""
    request, fingerprint = ask.request, ask.fingerprint
    approval = record.approval
    if (
        approval is not None
        and approval.state == ApprovalState.REJECTED
        and approval.fingerprint == fingerprint
    ):
        error = f"the call was rejected by {approval.actor!r}: {approval.basis}"
        error_type = FailureType.APPROVAL_REJECTED
    else:
        record.approval = Approval(
            state=ApprovalState.REQUESTED,
            fingerprint=fingerprint,
            capability=request.capability,
            performer=request.performer,
        )
        error = f"the call needs an approval of fingerprint {fingerprint} before it may act"
        error_type = FailureType.APPROVAL_REQUIRED
    if record.phase == Phase.VACANT:
        record.phase = Phase.AWAITING_APPROVAL
    return _deny(tx, record, request, error=error, error_type=error_type, fingerprint=fingerprint)


def record_acted(tx: Transaction, ask: Ask, *, fields: dict[str, Any]) -> Admission:
    """Record a retry-safe call that acted before anything of it was recorded: its
    request and its outcome, in one transaction (the design's "retry-safe calls" skip
    the claim and the started marker).

    The first recorded outcome wins. A key that another attempt settled for good
    replays that outcome; a key bound to another request refuses this one; a live claim
    defers it. Either way this attempt's report is kept beside them as late evidence,
    never as the outcome. A key that may act again (a vacant one, a retryable failure,
    an unknown effect of a retry-safe call) takes this attempt's outcome. ``ask`` is
    retry-safe and needs no approval.
    """
    request = ask.request
    record = tx.record or KeyRecord(key=request.key)
    _record_request(tx, ask)
    answer = _bind_or_answer(tx, record, ask, first=True, give_up=True)
    if answer is not None:
        # Appended after the answer's events; the record is saved again with it.
        keep_as_evidence(tx, record, action_id=request.action_id, token=None, fields=fields)
        tx.durable = True  # what the attempt did is evidence: never lost to a power cut
        tx.save(record)
        return answer
    record.token += 1
    record.retry_safe = True
    record.output_schema = request.output_schema
    outcome = Outcome(
        action_id=request.action_id, recorded_at=tx.recorded_at, token=record.token, **fields
    )
    settle(tx, record, outcome)
    tx.save(record)
    return result_of(outcome, key=request.key, action_id=request.action_id, replayed=False)
