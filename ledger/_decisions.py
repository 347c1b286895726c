"""People's decisions on a key, and the ledger's face for them and for reading it: an
approval or rejection of the call that waits for one, a verdict on an unknown effect,
compaction of an outcome past its retention, a key's state, the log and its verification.
The transactions are pure, like the rest of the rule (:mod:`._rule`): each runs inside
one storage transaction; :class:`Decisions` checks the input and runs them."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any, cast

from pydantic import BaseModel

from ._answers import project
from ._canonical import check_json, check_text, model_json
from ._completion import is_expired, recover_expired
from ._errors import DecisionRefused, InvalidRequest
from ._keys import KeySpellings
from ._models import (
    VERDICTS,
    ActionState,
    Approval,
    ApprovalState,
    Decision,
    EffectState,
    EventType,
    LedgerEvent,
    NextOperation,
    Reconciliation,
    Verdict,
    new_action_id,
    validate_key,
)
from ._open import Opened
from ._schema import output_misfit
from ._signatures import PROBE_ACTOR_PREFIX, DecisionSignature, Signers, recorded_problems
from ._template_text import refuse_placeholders
from ._transaction import KeyRecord, Phase, Transaction, iso
from ._verify import VerifyReport, verify_ledger


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
    bodies = tx.compact_bodies()
    outcome = dataclasses.replace(record.outcome, output=None, error=None, compacted=True)
    record.outcome = outcome
    record.reconciliations = [
        r.model_copy(update={"evidence": [], "output": None}) for r in record.reconciliations
    ]
    kept = {"fingerprint": record.fingerprint, "status": outcome.status, "effect": outcome.effect}
    tx.append(EventType.COMPACTED, None, {**kept, "events_compacted": bodies})
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
) -> Approval | DecisionRefused:
    """Record a person's decision on the call awaiting approval under the key.

    Returns the approval, or the refusal to raise (recorded as
    ``action.approval_refused``). The same decision by the same actor again (a retried activity) is
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
        return approval
    elif approval.state != ApprovalState.REQUESTED:
        by = f" by {approval.actor!r}" if approval.actor else ""
        reason = f"the call's approval is already {approval.state}{by}"
    body = _signed(
        signature, fingerprint=fingerprint, decision=decision.value, actor=actor, basis=basis
    )
    if reason is not None:
        _refuse(tx, EventType.APPROVAL_REFUSED, body, reason)
        standing = None if approval is None else approval.state
        first = None if standing == ApprovalState.REQUESTED else standing
        return DecisionRefused(tx.key, reason, decided=first)
    assert record is not None and approval is not None
    update = {"state": decided, "approval_id": approval_id, "actor": actor, "basis": basis}
    update = _signed(signature, **update, decided_at=tx.recorded_at)
    approval = approval.model_copy(update=update)
    call = {"capability": approval.capability, "performer": approval.performer}
    kind = EventType.APPROVED if decision is Decision.APPROVE else EventType.APPROVAL_REJECTED
    tx.append(kind, None, {**body, "approval_id": approval_id, **call})
    record.approval = approval
    tx.save(record)
    return approval


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
) -> DecisionRefused | None:
    """Append a verdict on the key's unknown effect, or return the refusal to raise
    (recorded as ``action.reconcile_refused``). ``action_id``: the action the verdict is
    about, refused if the unknown effect is another's; ``signature`` (its author's
    proof) is recorded with the verdict."""
    record = tx.record
    reason, known_effect = _unknown_effect_of(tx, record, action_id=action_id)
    body = _signed(signature, verdict=verdict, actor=actor, basis=basis)
    if reason is not None:
        _refuse(tx, EventType.RECONCILE_REFUSED, body, reason)
        return DecisionRefused(tx.key, reason, decided=known_effect)
    assert record is not None and record.outcome is not None
    if verdict == "effect_confirmed" and record.output_schema is not None:
        misfit = output_misfit(record.output_schema, output)
        if misfit:
            # Bad input, not a refusal: raising rolls the transaction back, nothing kept.
            raise InvalidRequest(misfit)
    outcome = dataclasses.replace(record.outcome, verdict=verdict)
    if verdict == "effect_confirmed":
        outcome = dataclasses.replace(outcome, effect=EffectState.OBSERVED, output=output)
    elif verdict == "no_effect_confirmed":
        outcome = dataclasses.replace(outcome, effect=EffectState.NONE, retryable=True)
    tx.append(
        EventType.RECONCILED,
        outcome.action_id,
        {**body, "evidence": evidence, "output": output, "effect": outcome.effect},
    )
    record.outcome = outcome
    record.reconciliations.append(
        Reconciliation(**body, evidence=evidence, output=output, recorded_at=tx.recorded_at)
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


class Decisions(Opened, KeySpellings):
    """The part of :class:`~temporal_ledger.ledger.Ledger` that people use: a key's state,
    its unknown effects, verdicts and approvals, the log, its verification and compaction."""

    def state(self, key: str) -> ActionState:
        """The key's history projected: status, effect, next operation.

        Args:
            key: The idempotency key.

        Returns:
            The key's state (status ``none`` for a key with no records).
        """
        validate_key(key)
        return project(key, self._recorder.get(key), self._recorder.now())

    def open_effects(self) -> list[ActionState]:
        """Every key whose effect is unknown and unresolved (including expired executions).

        Returns:
            Their states.
        """
        now = self._recorder.now()
        states = [project(r.key, r, now) for r in self._recorder.candidate_open_effects()]
        return [s for s in states if s.next_operation is NextOperation.RECONCILE_EFFECT]

    async def reconcile(
        self,
        key: str,
        verdict: Verdict,
        actor: str,
        basis: str,
        evidence: Sequence[Any] = (),
        output: Any = None,
        *,
        action_id: str | None = None,
        signature: DecisionSignature | dict[str, Any] | None = None,
    ) -> ActionState:
        """Append an operator's verdict beside the key's history; never rewrite it.

        Args:
            key: The key whose effect is unknown.
            verdict: ``effect_confirmed``, ``no_effect_confirmed`` (the key may act
                once more) or ``still_unknown``.
            actor: Who inspected the world.
            basis: What the verdict rests on.
            evidence: What was seen (JSON values).
            output: With ``effect_confirmed``: the observed output, which later
                requests get; it must fit the recorded output schema.
            action_id: The action the verdict is about, optional; refused if it is not
                the one whose effect is unknown.
            signature: Its author's proof, recorded with the verdict; the ledger does
                not judge it (it holds no keys): the caller checks it, and
                ``verify(signers=...)`` checks it again.

        Returns:
            The key's state after the verdict.

        Raises:
            InvalidRequest: Bad input, a placeholder of a printed template left in
                ``actor``, ``basis`` or ``evidence`` (``YOUR-NAME``, ``WHY``, ``<...>``),
                or a ``probe:`` verdict that settles the effect without evidence;
                nothing is recorded.
            DecisionRefused: The key has no execution, its effect is not unknown,
                or ``action_id`` is another action's (the refusal is recorded).
        """
        validate_key(key)
        verdict = cast("Verdict", _one_of("verdict", verdict, VERDICTS))
        _non_empty(actor=actor, basis=basis)
        evidence = list(evidence) if isinstance(evidence, (list, tuple)) else evidence
        if not isinstance(evidence, list):
            raise InvalidRequest("evidence must be a list")
        check_json(evidence, where="evidence")
        probe = actor.startswith(PROBE_ACTOR_PREFIX)
        # A probe's evidence is the far side's answer as it came (HTML included).
        refuse_placeholders(actor=actor, basis=basis, **({} if probe else {"evidence": evidence}))
        if probe and verdict != "still_unknown" and not evidence:
            raise InvalidRequest(
                f"{actor}: a probe's verdict that settles an effect rests on evidence "
                "(the far side's answer); none was given"
            )
        if isinstance(output, BaseModel):
            output = model_json(output)
        check_json(output, where="output")
        if action_id is not None:
            _non_empty(action_id=action_id)
        reconcile = functools.partial(
            reconcile_key,
            verdict=verdict,
            actor=actor,
            basis=basis,
            evidence=evidence,
            output=output,
            action_id=action_id,
            signature=_proof(signature),
        )
        refused = await self._transact(key, reconcile)
        if refused is not None:
            raise refused
        return await self._run(self.state, key)

    async def approve(
        self,
        key: str,
        *,
        fingerprint: str,
        actor: str,
        basis: str,
        decision: Decision | str = Decision.APPROVE,
        signature: DecisionSignature | dict[str, Any] | None = None,
    ) -> Approval:
        """Record a person's decision on the call that awaits approval under ``key``.

        The decision holds for the exact request it names only, and an approval lets
        exactly one execution start. The same decision by the same actor again records
        nothing.

        Args:
            key: The key of the call that awaits approval.
            fingerprint: The fingerprint of the request that was shown (see
                ``ActionState.approval``).
            actor: Who decides (never the call's own performer).
            basis: What the decision rests on.
            decision: ``approve`` or ``reject``.
            signature: Its author's proof, recorded with the decision; as with
                :meth:`reconcile`, the caller checks it against the actor's keys and
                ``verify(signers=...)`` checks it again.

        Returns:
            The approval as recorded.

        Raises:
            InvalidRequest: Bad input, or a placeholder of a printed template left in
                ``actor`` or ``basis`` (``YOUR-NAME``, ``WHY``, ``<...>``); nothing is
                recorded.
            DecisionRefused: No call awaits approval under the key, the fingerprint is
                another request's, the actor is the performer, or the call was already
                decided (the refusal is recorded).
        """
        validate_key(key)
        decision = Decision(_one_of("decision", decision, tuple(Decision)))
        _non_empty(fingerprint=fingerprint, actor=actor, basis=basis)
        refuse_placeholders(actor=actor, basis=basis)
        decide = functools.partial(
            decide_approval,
            fingerprint=fingerprint,
            decision=decision,
            actor=actor,
            basis=basis,
            approval_id=new_action_id(),
            signature=_proof(signature),
        )
        approval = await self._transact(key, decide)
        if isinstance(approval, DecisionRefused):
            raise approval
        return approval

    # -- reading, integrity, retention ------------------------------------------

    def events(
        self, key: str | None = None, *, after: int = 0, limit: int | None = None
    ) -> list[LedgerEvent]:
        """The log in order, optionally for one key.

        Args:
            key: Only this key's events.
            after: Only events after this sequence number.
            limit: At most this many.

        Returns:
            The events.
        """
        if key is not None:
            validate_key(key)
        return self._recorder.events(key, after=after, limit=limit)

    def verify(self, *, gated: Sequence[str] = (), signers: Signers | None = None) -> VerifyReport:
        """Recompute the hash chains and the invariants; name every problem found.

        Every execution of a call that needed approval must hold exactly one approval of
        its fingerprint, recorded before its started marker.

        Args:
            gated: Capability glob patterns whose every execution is held to that,
                whatever its caller declared.
            signers: The policy's keys: re-checks the signature of every recorded
                decision and person's verdict. The hash chain proves order and
                integrity, a signature proves who decided, even against somebody who
                wrote the tables and recomputed the chain.

        Returns:
            The report: ``ok``, and every problem found.

        Raises:
            InvalidRequest: ``gated`` or ``signers`` is not what it should be.
        """
        if isinstance(gated, str) or not all(isinstance(g, str) and g for g in gated):
            raise InvalidRequest("gated must be a list of capability patterns")
        if signers is not None and not isinstance(signers, Signers):
            raise InvalidRequest(f"signers must be Signers, not {type(signers).__name__}")
        report = verify_ledger(self._recorder, gated=tuple(gated))
        if signers is None:
            return report
        problems = report.problems + recorded_problems(self._recorder.events(), signers)
        return report.model_copy(update={"ok": not problems, "problems": problems})

    async def compact(self, *, older_than: float) -> int:
        """Drop the bodies of final outcomes settled more than ``older_than`` seconds ago.

        A tombstone (key, fingerprint, status) stays, so a late identical request is
        answered and a late different one refused, never executed again. Unknown effects
        are never compacted.

        Args:
            older_than: Seconds since the outcome was settled.

        Returns:
            The number of keys compacted.

        Raises:
            InvalidRequest: ``older_than`` is negative or not a number.
        """
        if not (isinstance(older_than, (int, float)) and older_than >= 0):
            raise InvalidRequest(f"older_than must be >= 0 seconds, got {older_than!r}")
        cutoff = iso(await self._run(self._recorder.now) - older_than)
        keys = await self._run(self._recorder.compactable, cutoff)
        compact = functools.partial(compact_key, cutoff=cutoff)
        return sum([await self._transact(key, compact) for key in keys])  # one at a time


def _proof(signature: DecisionSignature | dict[str, Any] | None) -> dict[str, Any] | None:
    """A signature as recorded; :class:`InvalidRequest` naming what is wrong with it."""
    signed = DecisionSignature.parse(signature)
    return None if signed is None else signed.model_dump()


def _one_of(name: str, value: Any, choices: Sequence[str]) -> str:
    """``value`` as one of ``choices`` (a plain ``str``), or bad input naming them."""
    if not isinstance(value, str) or value not in choices:
        raise InvalidRequest(f"unknown {name} {value!r}: use one of {', '.join(choices)}")
    return str(value)


def _non_empty(**values: Any) -> None:
    """Bad input naming the first of ``values`` that is not a non-empty string the ledger
    can record."""
    for name, value in values.items():
        check_text(value, where=name, required=True)
