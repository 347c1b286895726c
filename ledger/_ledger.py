"""The ledger: it validates a request, carries out the rule's decisions (:mod:`._rule`) in
transactions, and runs the adapter between them."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import math
import time
import urllib.parse
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal, TypeAlias, TypeVar

from pydantic import BaseModel

from ._canonical import check_json, check_text, model_json
from ._errors import (
    ActionInProgressError,
    ApprovalRefused,
    DuplicateActionId,
    InvalidRequest,
    LedgerError,
    LedgerUnavailable,
    ReconciliationRefused,
)
from ._models import (
    ActionRequest,
    ActionResult,
    ActionState,
    Approval,
    Authority,
    Decision,
    ExecutionContext,
    LedgerEvent,
    NextOperation,
    Verdict,
    new_action_id,
    validate_key,
)
from ._recorder import Recorder
from ._rule import (
    Admission,
    Answer,
    Ask,
    Busy,
    Claimed,
    Conflict,
    Stop,
    admit,
    compact_key,
    complete,
    decide_approval,
    extend_lease,
    failure_fields,
    mark_started,
    may_act_again_after,
    precondition_failure,
    project,
    reconcile_key,
    record_acted,
    release_unused_claim,
    resubmission_answer,
    stopped_waiting,
    success_fields,
    unreadable_state,
    unrecordable_output,
)
from ._signatures import PROBE_ACTOR_PREFIX, DecisionSignature, Signers, recorded_problems
from ._template_text import refuse_placeholders
from ._transaction import Draft, KeyRecord, Phase, Transaction, iso
from ._verify import VerifyReport, verify_ledger

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: How a replay's audit record is written before it answers: on disk, committed without
#: waiting for the disk, or with the next batch.
ReplayAudit: TypeAlias = Literal["durable", "committed", "batched"]
_REPLAY_AUDITS = ("durable", "committed", "batched")

# A write the ledger must not lose to a dropped connection (a completion, the release of
# a claim whose adapter never ran) is tried again with a short backoff, for a few leases
# and at least the floor: long enough to ride out a restart or a failover, bounded so a
# caller still hears of a lasting outage.
_RETRY_FIRST_DELAY = 0.05
_RETRY_MAX_DELAY = 1.0
_RETRY_LEASES = 3.0
_RETRY_FLOOR = 30.0

#: An adapter performs the effect. It may be sync or async.
Adapter: TypeAlias = Callable[[ActionRequest, ExecutionContext], Any]
#: A state resolver reads the current state the precondition is compared with.
StateResolver: TypeAlias = Callable[[ActionRequest], Any]


def shown_url(url: str) -> str:
    """A ledger URL as messages and logs show it: without its password."""
    try:
        parts = urllib.parse.urlsplit(url)
        password = parts.password
    except ValueError:  # not even a URL: show it as it is, it holds no parsable secret
        return url
    if password is None and "password=" not in parts.query:
        return url  # as written: urlunsplit would spell sqlite:///x as sqlite:/x
    if password is not None:
        netloc = parts.netloc.replace(f":{password}@", ":***@", 1)
        parts = parts._replace(netloc=netloc)
    if "password=" in parts.query:
        query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
        parts = parts._replace(
            query=urllib.parse.urlencode(
                [(k, "***" if k == "password" else v) for k, v in query], safe="*"
            )
        )
    return urllib.parse.urlunsplit(parts)


_URL_FORMS = (
    "use sqlite:///path/to/ledger.db (a file on this machine; sqlite:////abs/path.db for "
    "an absolute path) or postgresql://user@host:5432/db (a server; the 'postgres' extra)"
)


def opener(url: str) -> Callable[[], Recorder]:
    """What opens the ledger at ``url``, once everything that can be checked without
    opening it has been: the scheme, a SQLite file's folder, the PostgreSQL extra and the
    URL's syntax. ``Ledger.open`` runs it; ``LedgerPlugin`` calls this when a worker is
    made, so that a wrong URL stops the worker at start instead of failing every call.

    Raises:
        InvalidRequest: The URL is not one the ledger opens; the message names it (its
            password hidden) and the fix.
        ImportError: A PostgreSQL URL without the ``[postgres]`` extra installed.
    """
    if not isinstance(url, str):
        raise InvalidRequest(f"ledger URL must be a string, not {type(url).__name__}")
    shown = shown_url(url)
    scheme = url.partition(":")[0].lower() if ":" in url else ""
    if url.startswith("sqlite:///"):
        from ._sqlite import SQLiteRecorder, path_from_url

        try:
            path = path_from_url(url)
        except InvalidRequest as exc:
            raise InvalidRequest(f"ledger {shown}: {exc}") from None
        folder = path.parent.absolute()
        if not folder.is_dir():
            problem = (
                "is not a folder: pass another path"
                if folder.exists()
                else "does not exist: create it or pass another path"
            )
            hint = ""
            if not path.is_absolute():
                hint = (
                    " (the path after sqlite:/// is relative to the working directory; "
                    f"for /{path.as_posix()} write sqlite:////{path.as_posix()})"
                )
            raise InvalidRequest(f"ledger {shown}: folder {folder} {problem}{hint}")
        return functools.partial(SQLiteRecorder, path)
    if scheme == "sqlite":
        raise InvalidRequest(
            f"ledger {shown}: a SQLite ledger URL has three slashes before the file's path: "
            "sqlite:///relative/path.db, or sqlite:////absolute/path.db"
        )
    if scheme in ("postgresql", "postgres"):
        if not url.startswith(f"{scheme}://"):
            raise InvalidRequest(
                f"ledger {shown}: a PostgreSQL ledger URL starts with postgresql://: "
                "postgresql://user@host:5432/database"
            )
        try:
            from ._postgres import PostgresRecorder, check_url
        except ImportError as exc:  # its message names the extra and how to install it
            raise ImportError(f"ledger {shown}: {exc}", name=exc.name) from exc
        try:
            check_url(url)
        except InvalidRequest as exc:
            raise InvalidRequest(
                f"ledger {shown}: {exc}: use postgresql://user:password@host:5432/database"
            ) from None
        return functools.partial(PostgresRecorder.from_url, url)
    if not scheme:
        raise InvalidRequest(f"ledger {shown!r} is not a URL: {_URL_FORMS}")
    raise InvalidRequest(f"ledger {shown}: unsupported scheme {scheme!r}: {_URL_FORMS}")


class Ledger:
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
        seconds = _lease_seconds(lease)
        if replay_audit not in _REPLAY_AUDITS:
            raise InvalidRequest(
                f"replay_audit must be 'committed', 'durable' or 'batched', got {replay_audit!r}"
            )
        self.replay_audit = replay_audit
        self._audits: set[asyncio.Future[Any]] = set()
        # Batched replays' audit transactions not yet handed to the recorder.
        self._audit_batch: list[tuple[str, Callable[[Transaction], None]]] = []
        self.lease = seconds
        self.url = url
        self._recorder = recorder
        self._executor = ThreadPoolExecutor(
            max_workers=recorder.max_concurrency, thread_name_prefix="ledger"
        )
        self._closed = False

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
                record, atomically, with a later group commit (handed to the writer at
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
        # Audit records still waiting for their loop's turn are written before closing.
        batch, self._audit_batch = self._audit_batch, []
        for key, audit in batch:
            try:
                queued = self._recorder.submit(key, audit)
                if queued is None:
                    self._recorder.transact(key, audit)
            except Exception as exc:
                logger.error("a batched replay's audit record was not written: %s", exc)
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

    async def _transact(self, key: str, fn: Callable[[Transaction], T]) -> T:
        """One write transaction, off the event loop: a durable commit waits for the
        disk or the network. A recorder that groups commits takes it in its queue."""
        if self._closed:
            raise LedgerError("the ledger is closed")
        queued = self._recorder.submit_on_loop(key, fn, asyncio.get_running_loop())
        if queued is None:
            return await self._run(self._recorder.transact, key, fn)
        return await queued

    async def _transact_durably(self, key: str, fn: Callable[[Transaction], T], *, what: str) -> T:
        """A write that must not be lost to a dropped connection: tried until it commits.

        Each try takes a connection of its own (a pooled backend discards the dead one).
        ``fn`` must be idempotent (a try whose COMMIT answer was lost may have landed) and
        must check the fencing token itself, so a write whose attempt lost the key records
        only late evidence. A backend whose failed write is final (a local file) gets one
        try, as before.
        """
        if not self._recorder.reconnects:
            return await self._transact(key, fn)
        started = time.monotonic()
        deadline = started + max(_RETRY_LEASES * self.lease, _RETRY_FLOOR)
        delay = _RETRY_FIRST_DELAY
        tries = 1
        while True:
            try:
                result = await self._transact(key, fn)
            except LedgerUnavailable as exc:
                left = deadline - time.monotonic()
                if left <= 0:
                    logger.error(
                        "gave up recording %s for %r after %d tries in %.1f s: %s",
                        what,
                        key,
                        tries,
                        time.monotonic() - started,
                        exc,
                    )
                    raise
                if tries == 1:
                    logger.warning("recording %s for %r failed, retrying: %s", what, key, exc)
                await asyncio.sleep(min(delay, left))
                delay = min(delay * 2, _RETRY_MAX_DELAY)
                tries += 1
                continue
            if tries > 1:
                logger.warning(
                    "recorded %s for %r on try %d, %.1f s after the first",
                    what,
                    key,
                    tries,
                    time.monotonic() - started,
                )
            return result

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        if self._closed:
            raise LedgerError("the ledger is closed")
        return await asyncio.get_running_loop().run_in_executor(
            self._executor, functools.partial(fn, *args)
        )

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
        _check_arguments(request, authority=authority, adapter=adapter, state=state, wait=wait)
        ask = Ask.of(
            request,
            authority,
            retry_safe=retry_safe,
            requires_approval=requires_approval,
            lease=self.lease if lease is None else _lease_seconds(lease),
            sync_replays=self.replay_audit == "durable",
        )
        if self.replay_audit == "batched" or (
            self.replay_audit == "committed" and self._recorder.reads_now
        ):
            replay = await self._replay_from_the_record(ask)
            if replay is not None:
                return replay
        if (
            retry_safe
            and request.precondition is None
            and not requires_approval
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
        record_it = functools.partial(record_acted, ask=ask)
        try:
            try:
                decision = await self._record_acted(
                    key, functools.partial(record_it, fields=fields)
                )
            except InvalidRequest as exc:
                unrecordable = _recordable_instead(key, fields, exc)
                if unrecordable is None:
                    raise
                decision = await self._record_acted(
                    key, functools.partial(record_it, fields=unrecordable)
                )
        except DuplicateActionId:
            # The same submission landed before (its answer lost, or another process's
            # try): what it recorded is the answer.
            answered = await self._answer_resubmission(ask)
            if answered is None:
                raise
            return answered
        if isinstance(decision, Answer):
            return decision.result
        if isinstance(decision, Conflict):
            raise decision.error
        assert isinstance(decision, Busy)  # a claim is never what acting first decides
        raise ActionInProgressError(
            key=key,
            holder_action_id=decision.holder_action_id,
            lease_remaining=decision.remaining,
            action_id=request.action_id,
        )

    async def _record_acted(self, key: str, fn: Callable[[Transaction], Admission]) -> Admission:
        """One write of what a retry-safe call did: in one exchange against the record
        this process expects, or else the durable way (the effect happened: its report
        must not be lost to a dropped connection)."""
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
                answered = await self._answer_resubmission(ask)
                if answered is not None:
                    return answered
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
            if isinstance(decision, Answer):
                return decision.result
            if isinstance(decision, Conflict):
                raise decision.error
            if isinstance(decision, Claimed):
                decision.decided = time.monotonic()
                return decision
            if decision.recorded or give_up:
                raise ActionInProgressError(
                    key=request.key,
                    holder_action_id=decision.holder_action_id,
                    lease_remaining=decision.remaining,
                    action_id=request.action_id,
                )
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

    async def _write_replay(
        self, key: str, write: Callable[[Transaction], None], record: KeyRecord
    ) -> None:
        if self._closed:
            raise LedgerError("the ledger is closed")
        queued = self._recorder.submit_replay_on_loop(
            key, write, asyncio.get_running_loop(), expected=record
        )
        if queued is None:
            await self._run(self._recorder.transact, key, write)
        else:
            await queued

    def _submit_audits(self) -> None:
        batch, self._audit_batch = self._audit_batch, []
        if not batch or self._closed:
            return
        loop = asyncio.get_running_loop()
        for key, audit in batch:
            queued = self._recorder.submit_replay_on_loop(key, audit, loop)
            pending = (
                queued
                if queued is not None
                else asyncio.ensure_future(self._run(self._recorder.transact, key, audit))
            )
            self._audits.add(pending)
            pending.add_done_callback(self._audit_done)

    def _in_background(self, write: Coroutine[Any, Any, Any]) -> None:
        """Run a write the caller no longer waits for; ``aclose`` waits for it."""
        pending = asyncio.ensure_future(write)
        self._audits.add(pending)
        pending.add_done_callback(self._background_done)

    def _background_done(self, pending: asyncio.Future[Any]) -> None:
        self._audits.discard(pending)
        if not pending.cancelled() and pending.exception() is not None:
            logger.error("a write nobody waited for failed: %s", pending.exception())

    def _audit_done(self, pending: asyncio.Future[Any]) -> None:
        self._audits.discard(pending)
        if not pending.cancelled() and pending.exception() is not None:
            logger.error("a batched replay's audit record was not written: %s", pending.exception())

    def _read_key(self, key: str) -> tuple[KeyRecord | None, float]:
        return self._recorder.get(key), self._recorder.now()

    async def _answer_resubmission(self, ask: Ask) -> ActionResult | None:
        """The same submission (``action_id``) again: its recorded answer, or ``None`` when
        none was recorded (it was deferred, or it holds the key), to admit it again."""
        events, record = await self._run(self._key_history, ask.request.key)
        return resubmission_answer(events, record, request=ask.request, fingerprint=ask.fingerprint)

    def _key_history(self, key: str) -> tuple[list[LedgerEvent], KeyRecord | None]:
        return self._recorder.events(key), self._recorder.get(key)

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
            ReconciliationRefused: The key has no execution, its effect is not unknown,
                or ``action_id`` is another action's (the refusal is recorded).
        """
        validate_key(key)
        verdict = _one_of(Verdict, verdict, "verdict")
        _non_empty(actor=actor, basis=basis)
        evidence = list(evidence) if isinstance(evidence, (list, tuple)) else evidence
        if not isinstance(evidence, list):
            raise InvalidRequest("evidence must be a list")
        check_json(evidence, where="evidence")
        if actor.startswith(PROBE_ACTOR_PREFIX):
            # A probe's evidence is the far side's answer as it came (HTML included).
            refuse_placeholders(actor=actor, basis=basis)
            if verdict is not Verdict.STILL_UNKNOWN and not evidence:
                raise InvalidRequest(
                    f"{actor}: a probe's verdict that settles an effect rests on evidence "
                    "(the far side's answer); none was given"
                )
        else:
            refuse_placeholders(actor=actor, basis=basis, evidence=evidence)
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
            reason, known_effect = refused
            raise ReconciliationRefused(key, reason, effect=known_effect)
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
            ApprovalRefused: No call awaits approval under the key, the fingerprint is
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
            raise ApprovalRefused(key, reason, decided=approval.state if approval else None)
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


def _check_arguments(
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


def _lease_seconds(lease: object) -> float:
    """A lease as seconds: a positive finite number, or :class:`InvalidRequest` naming it."""
    if not (isinstance(lease, (int, float)) and math.isfinite(lease) and lease > 0):
        raise InvalidRequest(f"lease must be a positive number of seconds, got {lease!r}")
    return float(lease)


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
