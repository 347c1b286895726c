"""The rule as a pure decision: given a key's recorded state and a request, which events
to append, what the key holds next, and what to answer.

Every function here runs inside one storage transaction (:class:`Transaction`): it reads
``tx.record`` and ``tx.now``, appends events and saves the record, and does nothing else:
no I/O of its own, no clock, no asyncio. ``Ledger`` (the async shell in ``_ledger.py``)
loads the state, runs these in transactions, and runs the adapter between them.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from pydantic import BaseModel

from ._canonical import (
    FINGERPRINT_VERSION,
    canonical_json,
    check_json,
    combine,
    differing,
    fingerprint_dimensions,
    model_json,
    recordable_text,
    value_digest,
)
from ._errors import ActionInProgressError, IdempotencyConflictError, InvalidRequest, NoEffect
from ._models import (
    ActionRequest,
    ActionResult,
    ActionState,
    ActionStatus,
    Approval,
    ApprovalState,
    Authority,
    Decision,
    EffectState,
    EventType,
    FailureType,
    LedgerEvent,
    NextOperation,
    Reconciliation,
    Verdict,
    may_act_again,
)
from ._schema import output_misfit
from ._transaction import KeyRecord, Outcome, Phase, Transaction, iso


# What the admission transaction decided; raised or acted on after it committed.
@dataclasses.dataclass
class Answer:
    result: ActionResult


@dataclasses.dataclass
class Conflict:
    error: IdempotencyConflictError


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


#: What :func:`admit` decides.
Admission = Answer | Conflict | Busy | Claimed


def result_of(outcome: Outcome, *, key: str, action_id: str, replayed: bool) -> ActionResult:
    """The answer of the key's outcome to ``action_id``: its own, or a replay of it."""
    return _result(
        outcome,
        key=key,
        action_id=action_id,
        replayed=replayed,
        reused_from_action_id=outcome.action_id if replayed else None,
        compacted=outcome.compacted,
    )


def answer_of(body: dict[str, Any], *, key: str, action_id: str, compacted: bool) -> ActionResult:
    """The answer an ``action.completed`` event (its ``body``) gave its own submission."""
    return _result(
        Outcome.of(body),
        key=key,
        action_id=action_id,
        replayed=bool(body.get("replayed")),
        reused_from_action_id=body.get("reused_from_action_id"),
        compacted=compacted,
    )


def _result(
    outcome: Outcome,
    *,
    key: str,
    action_id: str,
    replayed: bool,
    reused_from_action_id: str | None,
    compacted: bool,
) -> ActionResult:
    return ActionResult(
        action_id=action_id,
        key=key,
        status=outcome.status,
        effect=outcome.effect,
        output=outcome.output,
        error=outcome.error,
        error_type=outcome.error_type,
        replayed=replayed,
        reused_from_action_id=reused_from_action_id,
        retryable=outcome.retryable,
        retry_after=outcome.retry_after,
        verdict=None if outcome.verdict is None else Verdict(outcome.verdict),
        compacted=compacted,
    )


def resubmission_answer(
    events: list[LedgerEvent], record: KeyRecord | None, *, request: ActionRequest, fingerprint: str
) -> ActionResult | None:
    """The same submission (``action_id``) again, decided from its key's log: its recorded
    answer, or ``None`` when none was recorded (it was deferred, or it holds the key), to
    admit it again.

    Raises:
        InvalidRequest: The ``action_id`` was submitted for another request or key.
        IdempotencyConflictError: Its first submission was refused as a conflict.
    """
    own = [e for e in events if e.action_id == request.action_id]
    requested = next((e for e in own if e.type == EventType.REQUESTED), None)
    recorded_fingerprint = (
        None
        if requested is None
        else record.fingerprint
        if requested.compacted and record is not None
        else requested.payload.get("fingerprint")
    )
    if recorded_fingerprint != fingerprint:
        where = "under another key" if requested is None else "for a different request"
        raise InvalidRequest(
            f"action_id {request.action_id} was already submitted {where}: every "
            "submission of a different request needs its own action_id"
        )
    for event in own:
        if event.type == EventType.COMPLETED:
            body = event.payload
            if event.compacted and record is not None and record.outcome is not None:
                body = {**record.outcome.body(), "replayed": True}
            return answer_of(
                body, key=request.key, action_id=request.action_id, compacted=event.compacted
            )
        if event.type == EventType.REPLAY_REFUSED:
            raise IdempotencyConflictError(
                key=request.key,
                original_action_id=event.payload["original_action_id"],
                dimensions=event.payload["dimensions"],
                fingerprint_version=event.payload["fingerprint_version"],
                action_id=request.action_id,
            )
    return None


def may_act_again_after(outcome: Outcome, retry_safe: bool) -> bool:
    return may_act_again(
        status=outcome.status,
        effect=outcome.effect,
        retryable=outcome.retryable,
        retry_safe=retry_safe,
    )


def next_operation(record: KeyRecord | None, now: float) -> NextOperation:
    if record is None or record.phase == Phase.VACANT:
        return NextOperation.START_ACTION
    if record.phase == Phase.AWAITING_APPROVAL:
        return NextOperation.AWAIT_APPROVAL
    if record.phase in (Phase.CLAIMED, Phase.RUNNING):
        if (record.lease_expires or 0) > now:
            return NextOperation.WAIT
        return (
            NextOperation.START_ACTION
            if record.phase == Phase.CLAIMED
            else NextOperation.RECONCILE_EFFECT
        )
    outcome = record.outcome
    assert outcome is not None  # settled
    if outcome.retryable:
        # Free to act again, unless its next execution waits for a person's approval.
        approval = record.approval
        if approval is not None and approval.state == ApprovalState.REQUESTED:
            return NextOperation.AWAIT_APPROVAL
        return NextOperation.START_ACTION
    if outcome.effect == EffectState.UNKNOWN:
        return NextOperation.RECONCILE_EFFECT
    if outcome.status == ActionStatus.FAILED and outcome.effect == EffectState.NONE:
        return NextOperation.FIX_INPUTS
    return NextOperation.NONE


def recover_expired(tx: Transaction, record: KeyRecord) -> None:
    """Settle a claim whose lease expired: the crash gap, or an abandoned claim.

    A claim that never reached its started marker caused nothing; an execution that
    started and never reported may have. Either way the holder's request gets its
    one completion here, so nobody waits on a dead worker again.
    """
    holder = record.holder_action_id
    assert holder is not None
    if record.phase == Phase.CLAIMED:
        release_without_effect(
            tx,
            record,
            error="abandoned before the started marker (lease expired); nothing was executed",
            error_type=FailureType.ABANDONED,
        )
        return
    outcome = Outcome(
        action_id=holder,
        status=ActionStatus.FAILED,
        effect=EffectState.UNKNOWN,
        recorded_at=tx.recorded_at,
        error="interrupted: the execution started and never reported before its lease "
        "expired; the effect may or may not have happened",
        error_type=FailureType.INTERRUPTED,
        token=record.token,
        interrupted=True,
    )
    settle(tx, record, outcome)


def settle(tx: Transaction, record: KeyRecord, outcome: Outcome) -> None:
    """Record an original completion as the key's outcome and release the claim."""
    tx.append(EventType.COMPLETED, outcome.action_id, outcome.body())
    record.phase = Phase.SETTLED
    record.outcome = outcome
    record.holder_action_id = None
    record.lease_expires = None


def release_without_effect(
    tx: Transaction, record: KeyRecord, *, error: str, error_type: str, retryable: bool = True
) -> Outcome:
    """Settle a claim whose adapter never ran: no effect, and (``retryable``) the key may
    act again."""
    assert record.holder_action_id is not None
    outcome = Outcome(
        action_id=record.holder_action_id,
        status=ActionStatus.FAILED,
        effect=EffectState.NONE,
        recorded_at=tx.recorded_at,
        error=error,
        error_type=error_type,
        retryable=retryable,
        token=record.token,
    )
    settle(tx, record, outcome)
    return outcome


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
    release_without_effect(
        tx,
        record,
        error="the ledger connection was lost before the adapter ran; nothing was executed",
        error_type=FailureType.LEDGER_UNAVAILABLE,
    )
    tx.save(record)


#: Why an execution stops before its started marker: error, error type, retryable.
Stop = tuple[str, str, bool]


def precondition_failure(precondition: Any, current: Any) -> Stop | None:
    """Whether the state read now differs from the one the operation was planned against
    (or cannot be compared with it): ``None`` when the execution may start."""
    try:
        check_json(current, where="current state")
        if canonical_json(current) == canonical_json(precondition):
            return None
    except Exception as exc:  # a state the ledger cannot read is a failed read
        return unreadable_state(exc)
    return (
        "precondition drift: the current state differs from the precondition the "
        "operation was planned against",
        FailureType.PRECONDITION_DRIFT,
        False,
    )


def unreadable_state(exc: Exception) -> Stop:
    """The state resolver failed. Nothing ran; only an I/O failure is worth reading again."""
    return f"state resolver failed: {exc!r}", type(exc).__name__, isinstance(exc, OSError)


def stopped_waiting(tx: Transaction, *, action_id: str) -> None:
    record = tx.record
    assert record is not None  # the request it waits for was recorded under this key
    tx.append(
        EventType.DEFERRED,
        action_id,
        {"holder_action_id": record.holder_action_id, "stopped_waiting": True},
    )
    tx.save(record)


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


def holds_own_completion(record: KeyRecord, *, action_id: str, token: int) -> bool:
    """Whether the key's outcome is already this attempt's report.

    A retried completion finds it when an earlier try committed but its answer was lost.
    The one other outcome ever recorded under a started attempt's action id and token is
    the interruption a recovery writes once its lease expired: not the attempt's report.
    """
    outcome = record.outcome
    return (
        outcome is not None
        and outcome.action_id == action_id
        and outcome.token == token
        and not outcome.interrupted
    )


def is_expired(record: KeyRecord, now: float) -> bool:
    return record.phase in (Phase.CLAIMED, Phase.RUNNING) and (record.lease_expires or 0) <= now


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


def failure_fields(exc: BaseException) -> dict[str, Any]:
    """The completion of an adapter that raised: whatever it did may have reached the world,
    unless it raised :class:`NoEffect` because it knows nothing happened."""
    if isinstance(exc, NoEffect):
        retry_after = exc.retry_after
        return dict(
            status=ActionStatus.FAILED,
            effect=EffectState.NONE,
            error=_message(exc),
            error_type=FailureType.NO_EFFECT,
            retryable=exc.retryable,
            retry_after=retry_after if _finite_number(retry_after) else None,
        )
    return dict(
        status=ActionStatus.FAILED,
        effect=EffectState.UNKNOWN,
        error=f"{type(exc).__name__}: {_message(exc)}",
        error_type=type(exc).__name__,
    )


def _message(exc: BaseException) -> str:
    """An exception's message as the ledger can record it, whatever the far side put in it."""
    try:
        text = str(exc)
    except Exception:  # a message that cannot even be built is still an outcome
        text = f"<{type(exc).__name__} whose message could not be read>"
    return recordable_text(text)


def _finite_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def success_fields(output: Any) -> dict[str, Any]:
    """The completion of an adapter that returned ``output``. It acted, so an output the
    ledger cannot record (not JSON, too deep, too long) is recorded as what it is: an
    observed effect whose report is unusable, identified by its hash, never as nothing."""
    try:
        if isinstance(output, BaseModel):
            output = model_json(output)  # sets in canonical order, a NaN kept to be named
        check_json(output, where="output")
    except Exception as exc:
        return unrecordable_output(output, exc)
    return dict(status=ActionStatus.SUCCEEDED, effect=EffectState.OBSERVED, output=output)


def unrecordable_output(output: Any, reason: BaseException | str) -> dict[str, Any]:
    """The completion of an adapter whose output cannot be recorded: FAILED with its effect
    observed (error type ``UnrecordableOutput``), and the output's :func:`value_digest`."""
    digest = value_digest(output)
    why = reason if isinstance(reason, str) else _message(reason)
    return dict(
        status=ActionStatus.FAILED,
        effect=EffectState.OBSERVED,
        error=f"the adapter returned output that cannot be recorded (sha256 {digest}): {why}",
        error_type=FailureType.UNRECORDABLE_OUTPUT,
        output_sha256=digest,
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
        own = own_claim(tx, record, request.action_id)
        if own is not None:
            return own
    if first:
        _record_request(tx, ask)
    if (first or resubmitted) and not ask.authority.allows(request.capability):
        # Refused before any lookup: the answer has the same shape whatever the key holds.
        return _refuse_authority(tx, record, ask)
    answered = _bind_or_answer(tx, record, ask, first=first, give_up=give_up)
    if answered is not None:
        return answered
    approval_id: str | None = None
    if ask.requires_approval:
        approval_id = _consume_approval(record, ask)
        if approval_id is None:
            return await_approval(tx, record, ask)
    return _claim(tx, record, ask, approval_id=approval_id)


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


def _refuse_authority(tx: Transaction, record: KeyRecord, ask: Ask) -> Answer:
    authority, capability = ask.authority, ask.request.capability
    tx.append(
        EventType.AUTHORIZATION_REFUSED,
        ask.request.action_id,
        {
            "principal": authority.principal,
            "capability": capability,
            "granted": list(authority.capabilities),
        },
    )
    return _deny(
        tx,
        record,
        ask.request,
        error=f"{authority.principal!r} may not use capability {capability!r}",
        error_type=FailureType.DENIED,
    )


def _deny(
    tx: Transaction,
    record: KeyRecord,
    request: ActionRequest,
    *,
    error: str,
    error_type: FailureType,
    fingerprint: str | None = None,
) -> Answer:
    """Answer the request DENIED, with no effect; the key's outcome stays as it was."""
    outcome = Outcome(
        action_id=request.action_id,
        status=ActionStatus.DENIED,
        effect=EffectState.NONE,
        recorded_at=tx.recorded_at,
        error=error,
        error_type=error_type,
        fingerprint=fingerprint,
    )
    tx.append(EventType.COMPLETED, request.action_id, outcome.body())
    tx.save(record)
    return Answer(result_of(outcome, key=request.key, action_id=request.action_id, replayed=False))


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
    recovered = False
    if record.fingerprint != ask.fingerprint:
        return _refuse_conflict(tx, record, ask)
    if record.phase in (Phase.CLAIMED, Phase.RUNNING):
        if not is_expired(record, tx.now):
            return _defer(tx, record, request, first=first, give_up=give_up)
        recover_expired(tx, record)
        recovered = True
    # Both this request and the attempt that left the outcome must be retry-safe:
    # a caller cannot declare an unknown effect of an unguarded attempt safe.
    if record.phase == Phase.SETTLED:
        assert record.outcome is not None  # a settled key has its outcome
        if not may_act_again_after(record.outcome, ask.retry_safe and record.retry_safe):
            # A recovery settles the crash gap: a decision, durable like every other.
            tx.durable = ask.sync_replays or recovered
            return _replay(tx, record, request)
    return None


def _refuse_conflict(tx: Transaction, record: KeyRecord, ask: Ask) -> Conflict:
    request = ask.request
    names = differing(record.dimensions, ask.dimensions)
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
    return Conflict(
        IdempotencyConflictError(
            key=request.key,
            original_action_id=record.original_action_id or "",
            dimensions=names,
            fingerprint_version=record.fingerprint_version or FINGERPRINT_VERSION,
            action_id=request.action_id,
        )
    )


def _defer(
    tx: Transaction, record: KeyRecord, request: ActionRequest, *, first: bool, give_up: bool
) -> Busy:
    """A live claim holds the key: the caller waits, or (giving up) the deferral is recorded."""
    remaining = (record.lease_expires or 0) - tx.now
    holder = record.holder_action_id or ""
    if not give_up:
        if first:
            tx.save(record)
        return Busy(holder, remaining, recorded=False)
    tx.append(
        EventType.DEFERRED,
        request.action_id,
        {"holder_action_id": holder, "lease_remaining": round(remaining, 3)},
    )
    tx.save(record)
    return Busy(holder, remaining, recorded=True)


def _replay(tx: Transaction, record: KeyRecord, request: ActionRequest) -> Answer:
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
    return Answer(result_of(outcome, key=request.key, action_id=request.action_id, replayed=True))


def _consume_approval(record: KeyRecord, ask: Ask) -> str | None:
    """The id of the approval of this exact request, now consumed by this execution alone
    (another one under the key needs a new approval); ``None`` when there is none."""
    approval = record.approval
    if (
        approval is None
        or approval.state != ApprovalState.APPROVED
        or approval.fingerprint != ask.fingerprint
    ):
        return None
    record.approval = approval.model_copy(
        update={"state": ApprovalState.CONSUMED, "consumed_by": ask.request.action_id}
    )
    return approval.approval_id


def _claim(tx: Transaction, record: KeyRecord, ask: Ask, *, approval_id: str | None) -> Claimed:
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
        tx.append(
            EventType.STARTED,
            request.action_id,
            {
                "token": record.token,
                "lease_expires_at": iso(record.lease_expires),
                **({"approval_id": approval_id} if approval_id else {}),
            },
        )
    tx.save(record)
    # The transaction's record is the caller's once it commits: no copy needed.
    return Claimed(record.token, started, committed=record if started else None, now=tx.now)


def own_claim(tx: Transaction, record: KeyRecord, action_id: str) -> Admission | None:
    """A resubmitted request that holds the key itself, or whose claim already settled:
    its own answer, never a replay of itself. ``None`` for any other key."""
    outcome = record.outcome
    if record.holder_action_id == action_id and record.phase in (Phase.CLAIMED, Phase.RUNNING):
        if not is_expired(record, tx.now):
            remaining = (record.lease_expires or 0) - tx.now
            return Busy(action_id, remaining, recorded=False)
        recover_expired(tx, record)  # the crash gap of its own claim: settled once, here
        tx.save(record)
        outcome = record.outcome
        assert outcome is not None
        return Answer(result_of(outcome, key=tx.key, action_id=action_id, replayed=False))
    if outcome is not None and outcome.action_id == action_id:
        # Its claim settled between the lookup of its history and this transaction.
        return Answer(result_of(outcome, key=tx.key, action_id=action_id, replayed=False))
    return None


def await_approval(tx: Transaction, record: KeyRecord, ask: Ask) -> Answer:
    """Answer a call that needs an approval it does not hold: DENIED, no effect, and the
    key bound to the request's fingerprint so that the approval names exactly this call."""
    request, fingerprint = ask.request, ask.fingerprint
    approval = record.approval
    rejected = (
        approval is not None
        and approval.state == ApprovalState.REJECTED
        and approval.fingerprint == fingerprint
    )
    if rejected:
        assert approval is not None
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
    body: dict[str, Any] = {
        "fingerprint": fingerprint,
        "decision": decision.value,
        "actor": actor,
        "basis": basis,
    }
    if signature is not None:
        body["signature"] = signature
    if reason is not None:
        tx.append(EventType.APPROVAL_REFUSED, None, {**body, "reason": reason})
        tx.save(record or KeyRecord(key=tx.key))
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


def mark_started(
    tx: Transaction,
    *,
    action_id: str,
    token: int,
    failure: Stop | None,
    lease: float,
) -> ActionResult | ActionInProgressError | None:
    record = tx.record
    if record is None or record.token != token or record.phase != Phase.CLAIMED:
        # The claim expired while the state was read and another request took over;
        # that takeover already gave this request its completion.
        return late_answer(tx, record, action_id)
    if failure is not None:
        error, error_type, retryable = failure
        outcome = release_without_effect(
            tx, record, error=error, error_type=error_type, retryable=retryable
        )
        tx.save(record)
        return result_of(outcome, key=tx.key, action_id=action_id, replayed=False)
    record.phase = Phase.RUNNING
    record.lease_expires = tx.now + lease
    approval = record.approval
    consumed = approval is not None and approval.consumed_by == action_id
    tx.append(
        EventType.STARTED,
        action_id,
        {
            "token": token,
            "lease_expires_at": iso(record.lease_expires),
            "precondition_checked": True,
            **({"approval_id": approval.approval_id} if consumed and approval else {}),
        },
    )
    tx.save(record)
    return None


def complete(
    tx: Transaction, *, action_id: str, token: int, fields: dict[str, Any]
) -> ActionResult | ActionInProgressError:
    record = tx.record
    if record is not None and holds_own_completion(record, action_id=action_id, token=token):
        # An earlier try committed and its answer was lost: answer what it recorded
        # rather than resolve the action a second time.
        assert record.outcome is not None
        return result_of(record.outcome, key=tx.key, action_id=action_id, replayed=False)
    if record is None or record.token != token or record.phase != Phase.RUNNING:
        # A stale fencing token: the lease was lost and the key moved on. Keep what
        # this attempt saw as evidence for the operator; it is not the outcome.
        _keep_as_evidence(tx, record, action_id=action_id, token=token, fields=fields)
        if record is not None:
            tx.save(record)
        return late_answer(tx, record, action_id)
    outcome = Outcome(action_id=action_id, recorded_at=tx.recorded_at, token=token, **fields)
    settle(tx, record, outcome)
    tx.save(record)
    return result_of(outcome, key=tx.key, action_id=action_id, replayed=False)


def _keep_as_evidence(
    tx: Transaction,
    record: KeyRecord | None,
    *,
    action_id: str,
    token: int | None,
    fields: dict[str, Any],
) -> None:
    """Record an attempt's report that is not the key's outcome (``action.late_completion``)."""
    tx.append(
        EventType.LATE_COMPLETION,
        action_id,
        {
            "token": token,
            "current_token": record.token if record else None,
            **{k: (v.value if hasattr(v, "value") else v) for k, v in fields.items()},
        },
    )


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
        _keep_as_evidence(tx, record, action_id=request.action_id, token=None, fields=fields)
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
    return Answer(result_of(outcome, key=request.key, action_id=request.action_id, replayed=False))


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
    body: dict[str, Any] = {"verdict": verdict.value, "actor": actor, "basis": basis}
    if signature is not None:
        body["signature"] = signature
    if reason is None and verdict is Verdict.EFFECT_CONFIRMED:
        assert record is not None
        misfit = (
            None if record.output_schema is None else output_misfit(record.output_schema, output)
        )
        if misfit:
            # Bad input, not a refusal: raising rolls the transaction back, nothing kept.
            raise InvalidRequest(misfit)
    if reason is not None:
        tx.append(EventType.RECONCILE_REFUSED, None, {**body, "reason": reason})
        tx.save(record or KeyRecord(key=tx.key))
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


def project(key: str, record: KeyRecord | None, now: float) -> ActionState:
    if record is None:
        return ActionState(key=key)
    outcome = record.outcome
    status = None if outcome is None else outcome.status
    effect = EffectState.NONE if outcome is None else outcome.effect
    error = None if outcome is None else outcome.error
    if record.phase == Phase.RUNNING:
        status, error = None, None
        effect = EffectState.UNKNOWN
        if (record.lease_expires or 0) <= now:
            error = "the execution started and its lease expired without a report"
    elif record.phase in (Phase.CLAIMED, Phase.AWAITING_APPROVAL):
        status, effect, error = None, EffectState.NONE, None
    return ActionState(
        key=key,
        status=status,
        effect=effect,
        next_operation=next_operation(record, now),
        capability=record.capability,
        performer=record.performer,
        fingerprint=record.fingerprint,
        fingerprint_version=record.fingerprint_version,
        original_action_id=record.original_action_id,
        outcome_action_id=None if outcome is None else outcome.action_id,
        holder_action_id=record.holder_action_id,
        lease_expires_at=record.lease_expires,
        error=error,
        output=None if outcome is None else outcome.output,
        since=record.settled_at or record.updated_at,
        retry_safe=record.retry_safe,
        output_schema=record.output_schema,
        reconciliations=record.reconciliations,
        approval=record.approval,
        events=record.events,
    )
