"""The ledger: its face, and the one path of a call through it. It validates a request,
carries out the rule's decisions (:mod:`._rule`) in transactions off the event loop, and
runs the adapter between them under a renewed lease."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import time
from collections.abc import Callable
from typing import Any, TypeAlias, TypeVar

from ._answers import (
    failure_fields,
    precondition_failure,
    resubmission_answer,
    success_fields,
    unreadable_state,
    unrecordable_output,
)
from ._completion import complete, extend_lease, mark_started, release_unused_claim, stopped_waiting
from ._decisions import Decisions
from ._errors import (
    ActionInProgressError,
    DuplicateActionId,
    InvalidRequest,
    LedgerError,
    LedgerUnavailable,
)
from ._models import ActionRequest, ActionResult, Authority, ExecutionContext
from ._open import _RETRY_FIRST_DELAY, _RETRY_MAX_DELAY, lease_seconds
from ._rule import Admission, Ask, Busy, Claimed, admit, answered, record_acted
from ._transaction import Draft, Phase, Transaction

logger = logging.getLogger(__name__)
T = TypeVar("T")

#: An adapter performs the effect. It may be sync or async.
Adapter: TypeAlias = Callable[[ActionRequest, ExecutionContext], Any]
#: A state resolver reads the current state the precondition is compared with.
StateResolver: TypeAlias = Callable[[ActionRequest], Any]


class Ledger(Decisions):
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
            IdempotencyConflictError: The key holds a different request (refusal recorded).
            ActionInProgressError: A live execution holds the key (deferral recorded).
            LedgerUnavailable: The database could not be reached.
        """
        request = ActionRequest.parse(request)
        _check_arguments(request, authority, adapter, state, wait)
        ask = Ask.of(
            request,
            authority,
            retry_safe=retry_safe,
            requires_approval=requires_approval,
            lease=self.lease if lease is None else lease_seconds(lease),
            sync_replays=self.replay_audit == "durable",
        )
        # A replay from a read, acting first, or the admission and the adapter under a claim.
        if self.replay_audit == "batched" or (
            self.replay_audit == "committed" and self._recorder.reads_now
        ):
            if (replay := await self._replay_from_the_record(ask)) is not None:
                return replay
        if (
            retry_safe
            and request.precondition is None
            and not requires_approval
            and authority.allows(request.capability)
        ):
            if (acted := await self._act_first(ask, adapter)) is not None:
                return acted
        decided = await self._admit(ask, wait=wait)
        if isinstance(decided, ActionResult):
            return decided
        return await self._perform(ask, decided, adapter, state)

    # -- one call ------------------------------------------------------------------

    async def _replay_from_the_record(self, ask: Ask) -> ActionResult | None:
        """A replay decided from a read, its audit record committed without waiting for
        the disk before it answers (``"committed"``), or queued (``"batched"``); ``None``
        if the rule would do anything but replay (that goes the usual way)."""
        key = ask.request.key
        read = self._recorder.read_now(key)
        record, now = read if read is not None else await self._run(self._read_key, key)
        if record is None or record.phase != Phase.SETTLED:
            return None
        draft = Draft(key, record, now)
        decision = admit(draft, ask, first=True, give_up=True)
        if not (isinstance(decision, ActionResult) and decision.replayed):
            return None
        if self.replay_audit == "committed":
            try:
                await self._transact(key, draft.write, durable=False, expected=record)
            except DuplicateActionId:
                return None  # the same submission again: the usual way answers it
            return decision
        # Handed to the writer once per turn of the event loop, all together: a caller
        # replaying in a loop that never yields would otherwise wake the writer thread
        # for every replay, and the two would contend for the GIL on each record.
        if not self._audit_batch:
            asyncio.get_running_loop().call_soon(self._submit_audits)
        self._audit_batch.append((key, draft.write))
        return decision

    async def _act_first(self, ask: Ask, adapter: Adapter) -> ActionResult | None:
        """A retry-safe call: act, then record the request and its outcome in one write
        (:func:`record_acted`). ``None`` when the key is known to hold something the
        usual admission answers from (an outcome to replay, a claim, another request)."""
        request = ask.request
        key = request.key
        seen = self._recorder.read_now(key) or self._recorder.expect(key)
        if seen is None:
            seen = await self._run(self._read_key, key)
        record = seen[0]
        # Open to act first, as far as the record read now tells: the key holds no request
        # yet, or the same request's outcome that lets it act again. The write after the
        # act decides again on what the key then holds.
        if record is not None and record.phase != Phase.VACANT:
            if not (
                record.phase == Phase.SETTLED
                and record.fingerprint == ask.fingerprint
                and record.outcome is not None
                and record.outcome.may_act_again(record.retry_safe)
            ):
                return None
        ctx = ExecutionContext(key=key, action_id=request.action_id, fencing_token=0)
        try:
            output = await _call(adapter, request, ctx)
        except Exception as exc:
            fields = failure_fields(exc)
        else:
            fields = success_fields(output)
        try:
            try:
                decision = await self._record_acted(ask, fields)
            except InvalidRequest as exc:
                decision = await self._record_acted(ask, _recordable_instead(key, fields, exc))
        except DuplicateActionId:
            # The same submission landed before (its answer lost, or another process's
            # try): what it recorded is the answer.
            if (resubmitted := await self._answer_resubmission(ask)) is None:
                raise
            return resubmitted
        assert not isinstance(decision, Claimed)  # never what acting first decides
        return answered(decision, request)

    async def _record_acted(self, ask: Ask, fields: dict[str, Any]) -> Admission:
        """One write of what a retry-safe call did: in one exchange against the record this
        process expects, or else the durable way (the effect happened: its report must not
        be lost to a dropped connection)."""
        fn = functools.partial(record_acted, ask=ask, fields=fields)
        try:
            done = await self._recorder.transact_expected(ask.request.key, fn)
        except LedgerUnavailable:
            done = None  # the durable way finds out whether that try landed
        if done is not None:
            return done[1]
        return await self._transact_durably(
            ask.request.key, fn, what="the outcome of a retry-safe call"
        )

    async def _admit(self, ask: Ask, *, wait: float) -> ActionResult | Claimed:
        """The rule's admission, written: an answer, or the claim to act under. Raises the
        conflict or the deferral it decided; waits up to ``wait`` for a live holder."""
        request = ask.request
        key, action_id = request.key, request.action_id
        deadline = time.monotonic() + wait
        first, resubmitted = True, False
        delay = 0.02
        while True:
            give_up = time.monotonic() >= deadline
            decide = functools.partial(
                admit, ask=ask, first=first, give_up=give_up, resubmitted=resubmitted
            )
            try:
                # The first try may go in one exchange, against the record this process
                # expects the key to have; the usual transaction decides otherwise.
                done = await self._recorder.transact_expected(key, decide) if first else None
                decision = done[1] if done is not None else await self._transact(key, decide)
            except DuplicateActionId:
                if not first:
                    raise
                if (resubmitted_answer := await self._answer_resubmission(ask)) is not None:
                    return resubmitted_answer
                # Recorded before and never answered (it was deferred, or its claim is
                # still the key's): admitted as a new submission whose request is recorded.
                first, resubmitted = False, True
                continue
            except LedgerUnavailable as exc:
                if exc.maybe_committed:
                    await self._release_unused_claim(key, action_id)
                raise
            except asyncio.CancelledError:
                # The caller stopped waiting. A claim sent before it did may land all the
                # same, and its adapter will never run: released as no effect.
                self._in_background(self._release_unused_claim(key, action_id))
                raise
            first = False
            if isinstance(decision, Claimed):
                decision.decided = time.monotonic()
                return decision
            if not isinstance(decision, Busy) or decision.recorded or give_up:
                return answered(decision, request)
            try:
                await asyncio.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            except asyncio.CancelledError:
                # The request is recorded; a caller that stops waiting still gets its one
                # resolution, or verify would call it dropped.
                stopped = functools.partial(stopped_waiting, action_id=action_id)
                with contextlib.suppress(Exception):
                    await asyncio.shield(self._transact(key, stopped))
                raise
            delay = min(delay * 2, 0.5)

    async def _answer_resubmission(self, ask: Ask) -> ActionResult | None:
        """The same submission (``action_id``) again: its recorded answer, or ``None`` when
        none was recorded (it was deferred, or it holds the key), to admit it again."""
        key = ask.request.key
        events, record = await self._run(
            lambda: (self._recorder.events(key), self._recorder.get(key))
        )
        return resubmission_answer(events, record, request=ask.request, fingerprint=ask.fingerprint)

    async def _perform(
        self, ask: Ask, claim: Claimed, adapter: Adapter, state: StateResolver | None
    ) -> ActionResult:
        request, lease = ask.request, ask.lease
        key, action_id, token = request.key, request.action_id, claim.token
        if not claim.started:
            assert state is not None
            try:
                failure = precondition_failure(request.precondition, await _call(state, request))
            except Exception as exc:
                failure = unreadable_state(exc)
            start = functools.partial(
                mark_started, action_id=action_id, token=token, failure=failure, lease=lease
            )
            try:
                outcome = await self._transact(key, start)
            except LedgerUnavailable as exc:
                if exc.maybe_committed:
                    await self._release_unused_claim(key, action_id)
                raise
            if isinstance(outcome, ActionInProgressError):
                raise outcome
            if outcome is not None:
                return outcome

        ctx = ExecutionContext(key=key, action_id=action_id, fencing_token=token)
        # Renewed until the completion is durable, not merely until the adapter returns:
        # a completion retried across a lost connection must not let the key be taken
        # over meanwhile, or an observed effect would be settled as an interruption.
        # The renewal task starts from a timer a third into the lease: an adapter that
        # returns sooner (most) costs a timer, not a task to create and cancel.
        renewal: asyncio.Task[None] | None = None

        def start_renewal() -> None:
            nonlocal renewal
            renewal = asyncio.ensure_future(self._keep_lease(key, token, lease))

        timer = asyncio.get_running_loop().call_later(lease / 3, start_renewal)
        try:
            try:
                output = await _call(adapter, request, ctx)
            except BaseException as exc:
                fields = failure_fields(exc)
                if not isinstance(exc, Exception):
                    with contextlib.suppress(BaseException):
                        await asyncio.shield(self._complete_now(ask, claim, fields))
                    raise
            else:
                fields = success_fields(output)
            try:
                return await self._complete_now(ask, claim, fields, after_claim=True)
            except asyncio.CancelledError:
                # The caller stopped waiting while its completion was written (and may have
                # been cancelled on the server): the adapter acted, so it is written all
                # the same, the durable way.
                self._in_background(self._complete_now(ask, claim, fields))
                raise
        finally:
            timer.cancel()
            if renewal is not None:
                renewal.cancel()
                with contextlib.suppress(BaseException):
                    await renewal

    async def _release_unused_claim(self, key: str, action_id: str) -> None:
        """After a lost connection, settle a claim this request may hold as a retryable
        no-effect failure (:func:`release_unused_claim`). Retried like a completion: a
        claim that landed and is never released would expire into an unknown effect,
        parking a step whose adapter never ran; if the ledger stays unreachable, that
        conservative expiry is what settles it."""
        with contextlib.suppress(LedgerError):
            await self._transact_durably(
                key,
                functools.partial(release_unused_claim, action_id=action_id),
                what="the release of an unused claim",
            )

    async def _complete_now(
        self, ask: Ask, claim: Claimed, fields: dict[str, Any], *, after_claim: bool = False
    ) -> ActionResult:
        """Record the outcome ``fields`` under ``claim``. With ``after_claim`` (the first
        try, nothing written since the claim), the recorder may write it in one exchange
        after the claim's committed record (``Recorder.transact_after``); a retry, a
        fallback or a write in the background goes the durable way."""
        key, action_id, token = ask.request.key, ask.request.action_id, claim.token
        completion = functools.partial(complete, action_id=action_id, token=token, fields=fields)
        try:
            done = None
            if after_claim and claim.committed is not None:
                # The rule's completion reads the record but not the clock, except for the
                # record's timestamp: the storage's clock at the claim plus the time
                # elapsed here since, so it never runs ahead of the storage's.
                now = claim.now + (time.monotonic() - claim.decided)
                done = await self._recorder.transact_after(key, claim.committed, now, completion)
            result = (
                done[1]
                if done is not None
                else await self._transact_durably(key, completion, what="the completion")
            )
        except InvalidRequest as exc:
            unrecordable = _recordable_instead(key, fields, exc)
            return await self._complete_now(ask, claim, unrecordable)
        if isinstance(result, ActionInProgressError):
            raise result
        return result

    async def _transact(self, key: str, fn: Callable[[Transaction], T], **submit: Any) -> T:
        """One write transaction, off the event loop: a durable commit waits for the
        disk or the network. A recorder that groups commits takes it in its queue, with
        ``submit``'s options (:meth:`Recorder.submit_on_loop`). Here, not in ``Opened``: it
        is on every call's path, which should cross few modules."""
        if self._closed:
            raise LedgerError("the ledger is closed")
        queued = self._recorder.submit_on_loop(key, fn, asyncio.get_running_loop(), **submit)
        if queued is None:
            return await self._run(self._recorder.transact, key, fn)
        return await queued

    async def _keep_lease(self, key: str, token: int, lease: float) -> None:
        """Renew the lease now, then every third of it (started a third into the lease)."""
        interval = lease / 3
        delay, backoff = 0.0, _RETRY_FIRST_DELAY
        renew = functools.partial(extend_lease, token=token, lease=lease)
        while True:
            await asyncio.sleep(delay)
            try:
                renewed = await self._transact(key, renew)
            except Exception as exc:  # keep trying: the lease still covers us for a while
                if backoff == _RETRY_FIRST_DELAY:
                    logger.warning("lease renewal for %r failed: %s", key, exc)
                # Soon, not a whole interval later: an outage that ends before the lease
                # does must not cost the key.
                delay = min(backoff, interval)
                backoff = min(backoff * 2, _RETRY_MAX_DELAY)
                continue
            delay, backoff = interval, _RETRY_FIRST_DELAY
            if not renewed:
                logger.warning("lease for %r (token %d) was lost", key, token)
                return


def _check_arguments(
    request: ActionRequest, authority: Any, adapter: Any, state: Any, wait: Any
) -> None:
    if not isinstance(authority, Authority):
        raise InvalidRequest(f"authority must be an Authority, not {type(authority).__name__}")
    if not callable(adapter):
        raise InvalidRequest("adapter must be callable")
    if state is not None and not callable(state):
        raise InvalidRequest("state must be a callable that reads the current state")
    if request.precondition is not None and state is None:
        raise InvalidRequest(
            "the request has a precondition but no state resolver: a precondition that "
            "cannot be checked is refused, not skipped"
        )
    if not (isinstance(wait, (int, float)) and wait >= 0):
        raise InvalidRequest(f"wait must be >= 0 seconds, got {wait!r}")


def _recordable_instead(
    key: str, fields: dict[str, Any], refused: InvalidRequest
) -> dict[str, Any]:
    """What to record when the storage refused the outcome of an adapter that acted: its
    output, as an output that cannot be recorded, so the key still answers. The refusal
    is raised again when it was not of an output (a failure's report, or a submission
    recorded before)."""
    if "output" not in fields or isinstance(refused, DuplicateActionId):
        raise refused
    logger.error("the outcome of %r was refused by the storage: %s", key, refused)
    return unrecordable_output(fields["output"], refused)


async def _call(fn: Callable[..., Any], *args: Any) -> Any:
    """Call a sync or async function without blocking the event loop."""
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - async callables
    ):
        return await fn(*args)
    result = await asyncio.to_thread(fn, *args)
    if inspect.isawaitable(result):
        result = await result
    return result
