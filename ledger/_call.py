"""One call through the rule: the transactions :mod:`._rule` decides, and the adapter run
between them under a renewed lease."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import math
import time
from collections.abc import Callable
from typing import Any, TypeAlias

from ._answers import (
    Stop,
    failure_fields,
    precondition_failure,
    resubmission_answer,
    success_fields,
    unreadable_state,
    unrecordable_output,
)
from ._completion import complete, extend_lease, mark_started, release_unused_claim, stopped_waiting
from ._errors import (
    ActionInProgressError,
    DuplicateActionId,
    InvalidRequest,
    LedgerError,
    LedgerUnavailable,
)
from ._models import ActionRequest, ActionResult, Authority, ExecutionContext
from ._rule import (
    Admission,
    Answer,
    Ask,
    Busy,
    Claimed,
    admit,
    answered,
    may_act_again_after,
    record_acted,
)
from ._transaction import Draft, KeyRecord, Phase
from ._writes import _RETRY_FIRST_DELAY, _RETRY_MAX_DELAY, Writes

logger = logging.getLogger(__name__)

#: An adapter performs the effect. It may be sync or async.
Adapter: TypeAlias = Callable[[ActionRequest, ExecutionContext], Any]
#: A state resolver reads the current state the precondition is compared with.
StateResolver: TypeAlias = Callable[[ActionRequest], Any]


class CallPath(Writes):
    """How :meth:`Ledger.execute <temporal_ledger.ledger.Ledger.execute>` carries out one
    call: replay from a read, act first, admit, perform, complete."""

    replay_audit: str

    async def _decide_and_act(
        self, ask: Ask, adapter: Adapter, state: StateResolver | None, *, wait: float
    ) -> ActionResult:
        """A replay from a read where the ledger answers replays so, acting first where the
        call is retry-safe, else the admission and then the adapter under the claim."""
        request, authority = ask.request, ask.authority
        if self.replay_audit == "batched" or (
            self.replay_audit == "committed" and self._recorder.reads_now
        ):
            replay = await self._replay_from_the_record(ask)
            if replay is not None:
                return replay
        if (
            ask.retry_safe
            and request.precondition is None
            and not ask.requires_approval
            and authority.allows(request.capability)
        ):
            acted = await self._act_first(ask, adapter)
            if acted is not None:
                return acted
        decided = await self._admit(ask, wait=wait)
        if isinstance(decided, ActionResult):
            return decided
        return await self._perform(ask, decided, adapter, state)

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
        if record is not None and not _open_to_act_first(record, ask.fingerprint):
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
                decision = await self._record_acted(key, ask, fields)
            except InvalidRequest as exc:
                unrecordable = _recordable_instead(key, fields, exc)
                if unrecordable is None:
                    raise
                decision = await self._record_acted(key, ask, unrecordable)
        except DuplicateActionId:
            # The same submission landed before (its answer lost, or another process's
            # try): what it recorded is the answer.
            resubmitted = await self._answer_resubmission(ask)
            if resubmitted is None:
                raise
            return resubmitted
        assert not isinstance(decision, Claimed)  # never what acting first decides
        return answered(decision, request)

    async def _record_acted(self, key: str, ask: Ask, fields: dict[str, Any]) -> Admission:
        """One write of what a retry-safe call did (:func:`record_acted`): in one exchange
        against the record this process expects, or else the durable way (the effect
        happened: its report must not be lost to a dropped connection)."""
        fn = functools.partial(record_acted, ask=ask, fields=fields)
        try:
            done = await self._recorder.transact_expected(key, fn)
        except LedgerUnavailable:
            done = None  # the durable way finds out whether that try landed
        if done is not None:
            return done[1]
        return await self._transact_durably(key, fn, what="the outcome of a retry-safe call")

    async def _admit(self, ask: Ask, *, wait: float) -> ActionResult | Claimed:
        """The rule's admission, written: an answer, or the claim to act under. Raises the
        conflict or the deferral it decided; waits up to ``wait`` for a live holder."""
        request = ask.request
        deadline = time.monotonic() + wait
        first = True
        resubmitted = False
        delay = 0.02
        while True:
            give_up = time.monotonic() >= deadline
            decide = functools.partial(
                admit, ask=ask, first=first, give_up=give_up, resubmitted=resubmitted
            )
            try:
                # The first try may go in one exchange, against the record this process
                # expects the key to have; the usual transaction decides otherwise.
                done = (
                    await self._recorder.transact_expected(request.key, decide) if first else None
                )
                decision = (
                    done[1] if done is not None else await self._transact(request.key, decide)
                )
            except DuplicateActionId:
                if not first:
                    raise
                resubmitted_answer = await self._answer_resubmission(ask)
                if resubmitted_answer is not None:
                    return resubmitted_answer
                # Recorded before and never answered (it was deferred, or its claim is
                # still the key's): admitted as a new submission whose request is recorded.
                first, resubmitted = False, True
                continue
            except LedgerUnavailable as exc:
                if exc.maybe_committed:
                    await self._release_unused_claim(request.key, request.action_id)
                raise
            except asyncio.CancelledError:
                # The caller stopped waiting. A claim sent before it did may land all the
                # same, and its adapter will never run: released as no effect.
                self._in_background(self._release_unused_claim(request.key, request.action_id))
                raise
            first = False
            if isinstance(decision, Claimed):
                decision.decided = time.monotonic()
                return decision
            if not isinstance(decision, Busy) or decision.recorded or give_up:
                return answered(decision, request)
            await self._wait_for_the_holder(
                request, min(delay, max(0.0, deadline - time.monotonic()))
            )
            delay = min(delay * 2, 0.5)

    async def _wait_for_the_holder(self, request: ActionRequest, delay: float) -> None:
        try:
            await asyncio.sleep(delay)
        except asyncio.CancelledError:
            # The request is recorded; a caller that stops waiting still gets its one
            # resolution, or verify would call it dropped.
            with contextlib.suppress(Exception):
                await asyncio.shield(
                    self._transact(
                        request.key,
                        functools.partial(stopped_waiting, action_id=request.action_id),
                    )
                )
            raise

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
        if not (isinstance(decision, Answer) and decision.result.replayed):
            return None
        if self.replay_audit == "committed":
            try:
                await self._write_replay(key, draft.write, record)
            except DuplicateActionId:
                return None  # the same submission again: the usual way answers it
            return decision.result
        # Handed to the writer once per turn of the event loop, all together: a caller
        # replaying in a loop that never yields would otherwise wake the writer thread
        # for every replay, and the two would contend for the GIL on each record.
        if not self._audit_batch:
            asyncio.get_running_loop().call_soon(self._submit_audits)
        self._audit_batch.append((key, draft.write))
        return decision.result

    async def _answer_resubmission(self, ask: Ask) -> ActionResult | None:
        """The same submission (``action_id``) again: its recorded answer, or ``None`` when
        none was recorded (it was deferred, or it holds the key), to admit it again."""
        events, record = await self._run(self._key_history, ask.request.key)
        return resubmission_answer(events, record, request=ask.request, fingerprint=ask.fingerprint)

    async def _perform(
        self, ask: Ask, claim: Claimed, adapter: Adapter, state: StateResolver | None
    ) -> ActionResult:
        request, lease = ask.request, ask.lease
        key, action_id, token = request.key, request.action_id, claim.token
        if not claim.started:
            assert state is not None
            failure: Stop | None
            try:
                current = await _call(state, request)
            except Exception as exc:
                failure = unreadable_state(exc)
            else:
                failure = precondition_failure(request.precondition, current)
            try:
                outcome = await self._transact(
                    key,
                    functools.partial(
                        mark_started,
                        action_id=action_id,
                        token=token,
                        failure=failure,
                        lease=lease,
                    ),
                )
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
                        await asyncio.shield(self._complete_now(key, action_id, token, fields))
                    raise
            else:
                fields = success_fields(output)
            try:
                return await self._complete_now(key, action_id, token, fields, claim=claim)
            except asyncio.CancelledError:
                # The caller stopped waiting while its completion was written (and may have
                # been cancelled on the server): the adapter acted, so it is written all
                # the same, the durable way.
                self._in_background(self._complete_now(key, action_id, token, fields))
                raise
        finally:
            timer.cancel()
            if renewal is not None:
                renewal.cancel()
                with contextlib.suppress(BaseException):
                    await renewal

    async def _release_unused_claim(self, key: str, action_id: str) -> None:
        """After a lost connection, settle a claim this request may hold as no effect
        (:func:`release_unused_claim`): a retryable no-effect failure, not an unknown
        effect left for an operator. Best effort: if the ledger is still unreachable,
        lease expiry settles the claim conservatively.
        """
        # Retried like a completion: a claim that did land and is never released holds a
        # started marker (without a precondition), and its lease would expire into an
        # interrupted, unknown effect, parking a step whose adapter never ran.
        with contextlib.suppress(LedgerError):
            await self._transact_durably(
                key,
                functools.partial(release_unused_claim, action_id=action_id),
                what="the release of an unused claim",
            )

    async def _complete_now(
        self,
        key: str,
        action_id: str,
        token: int,
        fields: dict[str, Any],
        *,
        claim: Claimed | None = None,
    ) -> ActionResult:
        completion = functools.partial(complete, action_id=action_id, token=token, fields=fields)
        try:
            done = None
            if claim is not None and claim.committed is not None:
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
            if unrecordable is None:
                raise
            return await self._complete_now(key, action_id, token, unrecordable)
        if isinstance(result, ActionInProgressError):
            raise result
        return result

    async def _keep_lease(self, key: str, token: int, lease: float) -> None:
        """Renew the lease now, then every third of it (started a third into the lease)."""
        interval = lease / 3
        delay = 0.0
        backoff = _RETRY_FIRST_DELAY
        while True:
            if delay:
                await asyncio.sleep(delay)
            try:
                renewed = await self._transact(
                    key, functools.partial(extend_lease, token=token, lease=lease)
                )
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


def _recordable_instead(
    key: str, fields: dict[str, Any], refused: InvalidRequest
) -> dict[str, Any] | None:
    """What to record when the storage refused the outcome of an adapter that acted: its
    output, as an output that cannot be recorded, so the key still answers. ``None`` when
    the refusal was not of an output (a failure's report, or a submission recorded
    before): the caller raises it."""
    if "output" not in fields or isinstance(refused, DuplicateActionId):
        return None
    logger.error("the outcome of %r was refused by the storage: %s", key, refused)
    return unrecordable_output(fields["output"], refused)


def _open_to_act_first(record: KeyRecord, fingerprint: str) -> bool:
    """Whether a retry-safe call may act before it records anything, as far as the key's
    record read now tells: the key holds no request yet, or the same request's outcome
    that lets it act again (a retryable failure, an unknown effect of a retry-safe call).
    The write after the act decides again on what the key then holds."""
    if record.phase == Phase.VACANT:
        return True
    return (
        record.phase == Phase.SETTLED
        and record.fingerprint == fingerprint
        and record.outcome is not None
        and may_act_again_after(record.outcome, record.retry_safe)
    )


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


def check_arguments(
    request: ActionRequest,
    *,
    authority: Any,
    adapter: Any,
    state: Any,
    wait: Any,
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


def lease_seconds(lease: object) -> float:
    """A lease as seconds: a positive finite number, or :class:`InvalidRequest` naming it."""
    if not (isinstance(lease, (int, float)) and math.isfinite(lease) and lease > 0):
        raise InvalidRequest(f"lease must be a positive number of seconds, got {lease!r}")
    return float(lease)
