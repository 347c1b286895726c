"""How the ledger's transactions reach its storage: off the event loop, tried again across
a dropped connection where they must not be lost, and replays' audit records batched or
written in the background."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from ._errors import LedgerError, LedgerUnavailable
from ._models import LedgerEvent
from ._recorder import Recorder
from ._transaction import KeyRecord, Transaction

logger = logging.getLogger(__name__)

T = TypeVar("T")

# A write the ledger must not lose to a dropped connection (a completion, the release of
# a claim whose adapter never ran) is tried again with a short backoff, for a few leases
# and at least the floor: long enough to ride out a restart or a failover, bounded so a
# caller still hears of a lasting outage.
_RETRY_FIRST_DELAY = 0.05
_RETRY_MAX_DELAY = 1.0
_RETRY_LEASES = 3.0
_RETRY_FLOOR = 30.0


class Writes:
    """The storage side of :class:`~temporal_ledger.ledger.Ledger`: its recorder, the
    threads its transactions run on, and the writes nobody waits for.

    Args:
        recorder: The backend that stores the log.
    """

    #: Seconds a live execution holds its key (set by ``Ledger``): retried writes last
    #: a few leases.
    lease: float

    def __init__(self, recorder: Recorder) -> None:
        self._recorder = recorder
        self._executor = ThreadPoolExecutor(
            max_workers=recorder.max_concurrency, thread_name_prefix="ledger"
        )
        self._closed = False
        # Writes nobody waits for (batched replays' audit records, background writes).
        self._audits: set[asyncio.Future[Any]] = set()
        # Batched replays' audit transactions not yet handed to the recorder.
        self._audit_batch: list[tuple[str, Callable[[Transaction], None]]] = []

    def _write_batch_now(self) -> None:
        """Write the audit records still waiting for their loop's turn (before closing)."""
        batch, self._audit_batch = self._audit_batch, []
        for key, audit in batch:
            try:
                queued = self._recorder.submit(key, audit)
                if queued is None:
                    self._recorder.transact(key, audit)
            except Exception as exc:
                logger.error("a batched replay's audit record was not written: %s", exc)

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
            self._watch(pending, "a batched replay's audit record was not written")

    def _in_background(self, write: Coroutine[Any, Any, Any]) -> None:
        """Run a write the caller no longer waits for; ``aclose`` waits for it."""
        self._watch(asyncio.ensure_future(write), "a write nobody waited for failed")

    def _watch(self, pending: asyncio.Future[Any], failed: str) -> None:
        """Hold a write nobody waits for until it ends, and log ``failed`` if it does."""
        self._audits.add(pending)

        def done(_: asyncio.Future[Any]) -> None:
            self._audits.discard(pending)
            if not pending.cancelled() and pending.exception() is not None:
                logger.error("%s: %s", failed, pending.exception())

        pending.add_done_callback(done)

    def _read_key(self, key: str) -> tuple[KeyRecord | None, float]:
        return self._recorder.get(key), self._recorder.now()

    def _key_history(self, key: str) -> tuple[list[LedgerEvent], KeyRecord | None]:
        return self._recorder.events(key), self._recorder.get(key)
