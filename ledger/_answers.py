"""What a key answers, decided from what it holds: a submission's result, the
completion an adapter's return or exception records, a failed precondition, and the key's
state as an operator reads it. Pure functions, like the rest of the rule (:mod:`._rule`)."""

from __future__ import annotations

import math
from typing import Any, cast

from pydantic import BaseModel

from ._canonical import canonical_json, check_json, model_json, value_digest
from ._errors import IdempotencyConflictError, InvalidRequest, NoEffect
from ._models import (
    ActionRequest,
    ActionResult,
    ActionState,
    ApprovalState,
    EffectState,
    EventType,
    FailureType,
    LedgerEvent,
    NextOperation,
    Verdict,
)
from ._transaction import KeyRecord, Outcome, Phase


def result_of(outcome: Outcome, *, key: str, action_id: str, replayed: bool) -> ActionResult:
    """The answer of the key's outcome to ``action_id``: its own, or a replay of it."""
    # Spelled out, not copied by a list of names as project() does: every call answers
    # through here, and the keywords measured 1 to 3 us faster (timeit, issue 42).
    return ActionResult(
        action_id=action_id,
        key=key,
        status=outcome.status,
        effect=outcome.effect,
        output=outcome.output,
        error=outcome.error,
        error_type=outcome.error_type,
        replayed=replayed,
        reused_from_action_id=outcome.action_id if replayed else None,
        retryable=outcome.retryable,
        retry_after=outcome.retry_after,
        # Validated as a verdict by ActionResult.
        verdict=cast("Verdict | None", outcome.verdict),
        compacted=outcome.compacted,
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
    recorded_fingerprint = None if requested is None else requested.payload.get("fingerprint")
    if requested is not None and requested.compacted and record is not None:
        recorded_fingerprint = record.fingerprint
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
            answer = result_of(
                Outcome.of(body), key=request.key, action_id=request.action_id, replayed=False
            )
            # A replay's body names the action it reused; the event, whether it was compacted.
            update = {"replayed": bool(body.get("replayed")), "compacted": event.compacted}
            return answer.model_copy(
                update={**update, "reused_from_action_id": body.get("reused_from_action_id")}
            )
        if event.type == EventType.REPLAY_REFUSED:
            refused = {name: event.payload[name] for name in _CONFLICT}
            raise IdempotencyConflictError(key=request.key, action_id=request.action_id, **refused)
    return None


#: What a refused request's record says of the conflict, as IdempotencyConflictError names it.
_CONFLICT = ("original_action_id", "dimensions", "fingerprint_version")


def next_operation(record: KeyRecord | None, now: float) -> NextOperation:
    if record is None or record.phase == Phase.VACANT:
        return NextOperation.START_ACTION
    if record.phase == Phase.AWAITING_APPROVAL:
        return NextOperation.AWAIT_APPROVAL
    if record.phase in (Phase.CLAIMED, Phase.RUNNING):
        if (record.lease_expires or 0) > now:
            return NextOperation.WAIT
        claimed = record.phase == Phase.CLAIMED
        return NextOperation.START_ACTION if claimed else NextOperation.RECONCILE_EFFECT
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
    if outcome.status == "failed" and outcome.effect == EffectState.NONE:
        return NextOperation.FIX_INPUTS
    return NextOperation.NONE


#: The fields of a key's state that are its record's, by the same name.
_STATE_OF_RECORD = """capability performer fingerprint fingerprint_version original_action_id
    holder_action_id retry_safe output_schema reconciliations approval events""".split()


def project(key: str, record: KeyRecord | None, now: float) -> ActionState:
    if record is None:
        return ActionState(key=key)
    outcome = record.outcome
    status, effect, error = None, EffectState.NONE, None
    if record.phase == Phase.RUNNING:
        effect = EffectState.UNKNOWN
        if (record.lease_expires or 0) <= now:
            error = "the execution started and its lease expired without a report"
    elif outcome is not None and record.phase not in (Phase.CLAIMED, Phase.AWAITING_APPROVAL):
        status, effect, error = outcome.status, outcome.effect, outcome.error
    return ActionState(
        key=key,
        status=status,
        effect=effect,
        next_operation=next_operation(record, now),
        outcome_action_id=None if outcome is None else outcome.action_id,
        lease_expires_at=record.lease_expires,
        error=error,
        output=None if outcome is None else outcome.output,
        since=record.settled_at or record.updated_at,
        **{name: getattr(record, name) for name in _STATE_OF_RECORD},
    )


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


def failure_fields(exc: BaseException) -> dict[str, Any]:
    """The completion of an adapter that raised: whatever it did may have reached the world,
    unless it raised :class:`NoEffect` because it knows nothing happened."""
    if isinstance(exc, NoEffect):
        return dict(
            status="failed",
            effect=EffectState.NONE,
            error=_message(exc),
            error_type=FailureType.NO_EFFECT,
            retryable=exc.retryable,
            retry_after=exc.retry_after if _finite_number(exc.retry_after) else None,
        )
    return dict(
        status="failed",
        effect=EffectState.UNKNOWN,
        error=f"{type(exc).__name__}: {_message(exc)}",
        error_type=type(exc).__name__,
    )


def _message(exc: BaseException) -> str:
    """An exception's message as the ledger can record it, whatever the far side put in it:
    a lone surrogate as its escape, and at most :data:`_MESSAGE_LIMIT` characters."""
    try:
        text = str(exc)
    except Exception:  # a message that cannot even be built is still an outcome
        text = f"<{type(exc).__name__} whose message could not be read>"
    if not text.isascii():
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    if len(text) > _MESSAGE_LIMIT:
        text = f"{text[:_MESSAGE_LIMIT]}... ({len(text) - _MESSAGE_LIMIT:,} more characters)"
    return text


_MESSAGE_LIMIT = 64 * 1024


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
    return dict(status="succeeded", effect=EffectState.OBSERVED, output=output)


def unrecordable_output(output: Any, reason: BaseException | str) -> dict[str, Any]:
    """The completion of an adapter whose output cannot be recorded: FAILED with its effect
    observed (error type ``UnrecordableOutput``), and the output's :func:`value_digest`."""
    digest = value_digest(output)
    why = reason if isinstance(reason, str) else _message(reason)
    return dict(
        status="failed",
        effect=EffectState.OBSERVED,
        error=f"the adapter returned output that cannot be recorded (sha256 {digest}): {why}",
        error_type=FailureType.UNRECORDABLE_OUTPUT,
        output_sha256=digest,
    )
