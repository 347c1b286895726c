"""The ledger: it validates a request, carries out the rule's decisions (:mod:`._rule`) in
transactions, and runs the adapter between them."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Sequence
from typing import Any, Literal, TypeAlias, TypeVar

from pydantic import BaseModel

from ._answers import project
from ._call import Adapter, CallPath, StateResolver, check_arguments, lease_seconds
from ._canonical import check_json, check_text, model_json
from ._decisions import compact_key, decide_approval, reconcile_key
from ._errors import DecisionRefused, InvalidRequest
from ._models import (
    ActionRequest,
    ActionResult,
    ActionState,
    Approval,
    Authority,
    Decision,
    LedgerEvent,
    NextOperation,
    Verdict,
    new_action_id,
    validate_key,
)
from ._open import opener
from ._recorder import Recorder
from ._rule import Ask
from ._signatures import PROBE_ACTOR_PREFIX, DecisionSignature, Signers, recorded_problems
from ._template_text import refuse_placeholders
from ._transaction import iso
from ._verify import VerifyReport, verify_ledger

logger = logging.getLogger(__name__)

#: How a replay's audit record is written before it answers: on disk, committed without
#: waiting for the disk, or with the next batch.
ReplayAudit: TypeAlias = Literal["durable", "committed", "batched"]
_REPLAY_AUDITS = ("durable", "committed", "batched")


class Ledger(CallPath):
    """A durable action ledger: ``execute`` runs an adapter at most once per key and identity.

    Open one with :meth:`Ledger.open`; use it as ``async with`` (or ``with``), or close it.

    Args:
        recorder: The backend that stores the log (``Ledger.open`` picks it by URL).
        lease: Seconds a live execution holds its key without renewal.
        url: Where the ledger is, as shown to people.
        replay_audit: ``"committed"``, ``"durable"`` or ``"batched"`` (see :meth:`open`).

    Raises:
        InvalidRequest: ``lease`` or ``replay_audit`` is not one the ledger takes.
    """

    def __init__(
        self,
        recorder: Recorder,
        *,
        lease: float = 30.0,
        url: str = "",
        replay_audit: ReplayAudit = "committed",
    ) -> None:
        seconds = lease_seconds(lease)
        if replay_audit not in _REPLAY_AUDITS:
            raise InvalidRequest(
                f"replay_audit must be 'committed', 'durable' or 'batched', got {replay_audit!r}"
            )
        super().__init__(recorder)
        self.replay_audit = replay_audit
        self.lease = seconds
        self.url = url

    @classmethod
    def open(
        cls, url: str, *, lease: float = 30.0, replay_audit: ReplayAudit = "committed"
    ) -> Ledger:
        """Open (creating if needed) the ledger at ``url``.

        Args:
            url: ``sqlite:///path`` for the embedded file, ``postgresql://...`` for a
                shared server (extra ``[postgres]``).
            lease: How long, in seconds, a live execution holds its key without renewal.
            replay_audit: How a replay's audit record (the request and the relabelled
                completion) is written. ``"committed"`` (the default) answers once it
                is committed, without waiting for the disk (SQLite
                ``synchronous=NORMAL``, PostgreSQL ``synchronous_commit = off`` for that
                transaction alone): a replay changes nothing in the world, so a power cut
                may lose its record, never an effect or a decision, and the next durable
                commit carries it to the disk. ``"durable"`` answers once it is on disk.
                ``"batched"`` answers from what is recorded and appends that audit
                record, atomically, with a later commit (handed to the writer at
                the event loop's next turn, with every other replay's of that turn;
                written before the ledger closes). A replay's answer is decided by the
                record either way; denials, conflicts and everything that acts stay
                durable before they answer.

        Returns:
            The open ledger.

        Raises:
            InvalidRequest: The URL is not one the ledger opens (an unknown scheme, a
                SQLite URL without its three slashes, a folder that does not exist), or
                an option is wrong; the message names the URL and the fix.
            ImportError: A ``postgresql://`` URL without the ``[postgres]`` extra
                installed; the message names the URL and the extra.
            LedgerUnavailable: The database cannot be reached.
        """
        recorder = opener(url)()
        return cls(recorder, lease=lease, url=url, replay_audit=replay_audit)

    # -- lifecycle -----------------------------------------------------------------

    def close(self) -> None:
        """Write what is pending (batched replays' audit records) and close the backend."""
        if self._closed:
            return
        self._closed = True
        self._write_batch_now()
        self._executor.shutdown(wait=True)
        self._recorder.close()

    async def aclose(self) -> None:
        """:meth:`close` from the event loop, after the pending audit records are written."""
        self._submit_audits()
        if self._audits:  # the batched replays' audit records are written before closing
            await asyncio.gather(*self._audits, return_exceptions=True)
        if not self._closed:
            await self._recorder.close_on_loop()
        await asyncio.get_running_loop().run_in_executor(None, self.close)

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Ledger:
        await self._recorder.open_on_loop()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- the rule ------------------------------------------------------------------

    async def execute(
        self,
        request: ActionRequest | dict[str, Any],
        *,
        authority: Authority,
        adapter: Adapter,
        state: StateResolver | None = None,
        retry_safe: bool = False,
        wait: float = 0.0,
        requires_approval: bool = False,
        lease: float | None = None,
    ) -> ActionResult:
        """Run ``adapter`` for ``request`` at most once for its key and identity.

        Args:
            request: The request (or its fields as a dict).
            authority: Who acts, with the capabilities they hold now.
            adapter: ``adapter(request, ctx)``, sync or async: the effect; ``ctx`` holds
                the key for a far side that dedupes. It raises ``NoEffect`` when it knows
                nothing happened.
            state: ``state(request)``, sync or async: the current state a precondition
                is compared with.
            retry_safe: The call may repeat: it has no effect in the world (a model
                call), or the far side dedupes by the key. It acts first and records its
                request and outcome after, in one durable write; the first outcome
                recorded under the key wins, and a later attempt replays it. Two
                attempts may both act; an unknown effect may act again. A call with a
                precondition or an approval to wait for claims the key first, as every
                other call does.
            wait: Seconds to wait for a live execution of the key to end before refusing.
            requires_approval: The adapter runs only under an approval of this exact
                request (:meth:`approve`), and each approval lets one execution start.
                Without one the answer is DENIED with ``error_type``
                ``ApprovalRequired`` (or ``ApprovalRejected``), no effect, and the key
                waits for the decision. A replay of a recorded outcome needs no approval.
            lease: Seconds this execution holds its key without renewal (renewed every
                third of it while the adapter runs), instead of the ledger's ``lease``:
                shorter where whoever runs it notices a dead holder sooner (a Temporal
                activity's heartbeat timeout), so that the next attempt finds the claim
                expired when it comes.

        Returns:
            The fresh or replayed result.

        Raises:
            InvalidRequest: Bad input; nothing is recorded.
            IdempotencyConflictError: The key holds a different request (refusal
                recorded).
            ActionInProgressError: A live execution holds the key (deferral recorded).
            LedgerUnavailable: The database could not be reached.
        """
        request = ActionRequest.parse(request)
        check_arguments(request, authority=authority, adapter=adapter, state=state, wait=wait)
        ask = Ask.of(
            request,
            authority,
            retry_safe=retry_safe,
            requires_approval=requires_approval,
            lease=self.lease if lease is None else lease_seconds(lease),
            sync_replays=self.replay_audit == "durable",
        )
        return await self._decide_and_act(ask, adapter, state, wait=wait)

    # -- recovery ------------------------------------------------------------------

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
        verdict: Verdict | str,
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
        verdict = _one_of(Verdict, verdict, "verdict")
        _non_empty(actor=actor, basis=basis)
        evidence = list(evidence) if isinstance(evidence, (list, tuple)) else evidence
        if not isinstance(evidence, list):
            raise InvalidRequest("evidence must be a list")
        check_json(evidence, where="evidence")
        probe = actor.startswith(PROBE_ACTOR_PREFIX)
        # A probe's evidence is the far side's answer as it came (HTML included).
        refuse_placeholders(actor=actor, basis=basis, **({} if probe else {"evidence": evidence}))
        if probe and verdict is not Verdict.STILL_UNKNOWN and not evidence:
            raise InvalidRequest(
                f"{actor}: a probe's verdict that settles an effect rests on evidence "
                "(the far side's answer); none was given"
            )
        if isinstance(output, BaseModel):
            output = model_json(output)
        check_json(output, where="output")
        if action_id is not None:
            _non_empty(action_id=action_id)
        signed = DecisionSignature.parse(signature)
        refused = await self._transact(
            key,
            functools.partial(
                reconcile_key,
                verdict=verdict,
                actor=actor,
                basis=basis,
                evidence=evidence,
                output=output,
                action_id=action_id,
                signature=None if signed is None else signed.model_dump(),
            ),
        )
        if refused is not None:
            raise DecisionRefused(key, refused[0], decided=refused[1])
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
        decision = _one_of(Decision, decision, "decision")
        _non_empty(fingerprint=fingerprint, actor=actor, basis=basis)
        refuse_placeholders(actor=actor, basis=basis)
        signed = DecisionSignature.parse(signature)
        reason, approval = await self._transact(
            key,
            functools.partial(
                decide_approval,
                fingerprint=fingerprint,
                decision=decision,
                actor=actor,
                basis=basis,
                approval_id=new_action_id(),
                signature=None if signed is None else signed.model_dump(),
            ),
        )
        if reason is not None:
            raise DecisionRefused(key, reason, decided=approval.state if approval else None)
        assert approval is not None
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
        done = 0
        for key in keys:
            done += await self._transact(key, functools.partial(compact_key, cutoff=cutoff))
        return done


E = TypeVar("E", Verdict, Decision)


def _one_of(kind: type[E], value: Any, name: str) -> E:
    """``value`` as a member of ``kind``, or bad input naming the choices."""
    try:
        return kind(value)
    except ValueError:
        choices = ", ".join(member.value for member in kind)
        raise InvalidRequest(f"unknown {name} {value!r}: use one of {choices}") from None


def _non_empty(**values: Any) -> None:
    """Bad input naming the first of ``values`` that is not a non-empty string the ledger
    can record."""
    for name, value in values.items():
        if not isinstance(value, str) or not value.strip():
            raise InvalidRequest(f"{name} must be a non-empty string")
        check_text(value, where=name)
