"""The storage contract every backend implements, and the writer threads they share.

The rule in :mod:`._rule` is written once against this contract: a backend supplies
atomic per-key transactions (:class:`~._transaction.Transaction`), the log and the
per-key state table.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import queue
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any, Literal, TypeVar

from ._errors import LedgerUnavailable
from ._models import LedgerEvent
from ._transaction import KeyRecord, Phase, Tally, Transaction

T = TypeVar("T")

#: The schema version both backends record (their ``MIGRATIONS`` count).
SCHEMA_VERSION = 1


class Recorder(ABC):
    """A ledger's storage: what a backend implements, and the ledger calls.

    The abstract methods are the whole contract; the others are optional shortcuts a
    backend may offer to save syncs, round trips or thread hops, and their defaults take
    none. Methods are synchronous, and the ledger runs them off the event loop.

    Without the shipped backends' shortcuts (issue 42, bench/README.md), the concurrent
    ratio of ``temporal_overhead.py`` moved within its noise (SQLite 0.820 and 0.888
    against 0.737 and 0.654 with them; PostgreSQL 1.037 and 0.721 against 0.836 and
    1.168), but what the ledger promises did not hold: a PostgreSQL transaction took two
    round trips (a fresh call four, a replay two, against 2 / 1) and a SQLite replay
    waited for a sync (against none).
    """

    #: How many threads may call into this recorder at once.
    max_concurrency: int = 1

    #: Whether a :class:`LedgerUnavailable` from :meth:`transact` may be a lost
    #: connection that the next call does not meet (a pooled server backend). The
    #: ledger then retries the writes it must not lose; a local file's failed write
    #: is final, and retrying it would only delay the error.
    reconnects: bool = False

    @abstractmethod
    def transact(self, key: str, fn: Callable[[Transaction], T]) -> T:
        """Run ``fn`` in one atomic write transaction holding ``key``, then commit durably.

        If ``fn`` raises, nothing it did is kept. Two transactions of one key never run
        at once, in this process or any other on the same storage.

        Args:
            key: The idempotency key the transaction holds.
            fn: The rule's function: it reads and writes the key through the
                :class:`Transaction` it is given.

        Returns:
            What ``fn`` returned, once the commit is durable.
        """

    def submit(self, key: str, fn: Callable[[Transaction], T]) -> Future[T] | None:
        """Optional: queue ``fn`` like :meth:`transact` and answer once it is durable.

        A recorder with a writer thread of its own returns a future.

        Args:
            key: As for :meth:`transact`.
            fn: As for :meth:`transact`.

        Returns:
            A future of ``fn``'s result, or ``None`` (the default): the ledger then calls
            :meth:`transact` on a thread.
        """
        return None

    def submit_on_loop(
        self,
        key: str,
        fn: Callable[[Transaction], T],
        loop: asyncio.AbstractEventLoop,
        *,
        durable: bool = True,
        expected: KeyRecord | None = None,
    ) -> asyncio.Future[T] | None:
        """Optional: :meth:`submit`, answered on the running event ``loop`` (one
        ``call_soon_threadsafe``, lighter than an executor's future chain).

        Args:
            key: As for :meth:`transact`.
            fn: As for :meth:`transact`.
            loop: The running event loop.
            durable: ``False`` for a transaction that records only a replay (it changed
                nothing in the world): a recorder may commit it without waiting for the
                disk, so that a power cut may lose it, never a commit made durable
                before or after it.
            expected: The settled record a replay was decided on; a recorder may give it
                to ``fn`` instead of reading the record again when the key's chain head
                is still the same (every change of a settled key appends an event).

        Returns:
            A future of that loop, or ``None`` as for :meth:`submit`.
        """
        writers = self._writers
        run = None if writers is None else self._job(key, fn, durable, expected)
        if writers is None or run is None:
            queued = self.submit(key, fn)
            return None if queued is None else asyncio.wrap_future(queued, loop=loop)
        future: asyncio.Future[T] = loop.create_future()
        writers.put(Job(run, future, loop))
        return future

    #: The threads of a backend that runs its transactions on threads of its own: what
    #: :meth:`_job` makes of a transaction, :meth:`submit_on_loop` queues there.
    _writers: Writers | None = None

    def _job(
        self, key: str, fn: Callable[[Transaction], T], durable: bool, expected: KeyRecord | None
    ) -> Callable[[], T] | None:
        """The transaction of :meth:`submit_on_loop` (its arguments, as there) as a job for
        :attr:`_writers`, or ``None`` (the default): :meth:`submit`'s route then."""
        return None

    #: Whether :meth:`read_now` reads on the calling thread (a local file): a replay is
    #: then decided from that read, and only its audit record is written.
    reads_now: bool = False

    def read_now(self, key: str) -> tuple[KeyRecord | None, float] | None:
        """Optional: the key's state and the storage's clock, read on the calling thread
        if that is cheap and cannot block (a local file). A batched replay answers from
        this read without leaving the event loop.

        Args:
            key: The idempotency key.

        Returns:
            The key's record (``None``: it has none) and the clock, or ``None`` (the
            default): the caller then reads on a thread.
        """
        return None

    def expect(self, key: str) -> tuple[KeyRecord | None, float] | None:
        """Optional: what this process expects the key's record to be (the last it wrote
        or read of it) and the storage's clock estimated now, never ahead of the
        storage's own. A guess that :meth:`transact_unchanged` checks, never trusted alone.

        Args:
            key: The idempotency key.

        Returns:
            The expected record (``None`` for a key it has not met) and the clock, or
            ``None`` (the default) when this recorder keeps no such memory.
        """
        return None

    async def transact_unchanged(
        self, key: str, expected: KeyRecord | None, now: float, fn: Callable[[Transaction], T]
    ) -> tuple[Literal[True], T] | tuple[Literal[False], None] | None:
        """Run ``fn`` on ``expected`` as the key's record (``None``: the key has none), at
        ``now``, and commit what it wrote in one exchange with the storage, provided the
        key's log still ends where ``expected`` says (nothing was appended since; for
        ``None``, the key has no record yet). Optional.

        A server backend saves round trips with it: the completion of an execution that
        nobody else touched, the claim of a new key, the replay of a recent call. ``fn``
        must be safe to run again through :meth:`transact`, and must not depend on what a
        write without an event changes (a lease): the caller does not offer a claimed or
        running key's record, except to the completion, which reads no lease.

        Args:
            key: The idempotency key.
            expected: The record the key must still have.
            now: The storage's clock to run ``fn`` at.
            fn: As for :meth:`transact`.

        Returns:
            ``(True, result)``; ``(False, None)`` with nothing written when the key was
            not as expected; ``None`` (the default) when no shortcut was taken: use
            :meth:`transact`.
        """
        return None

    async def transact_expected(
        self, key: str, fn: Callable[[Transaction], T]
    ) -> tuple[bool, T] | None:
        """Run ``fn`` in one exchange against the record this process expects the key to
        have (:meth:`expect`): ``(True, result)`` once it committed, or ``None`` when this
        recorder offers no such shortcut or the key was not as expected twice (the guess,
        then what the failed try read back); :meth:`transact` decides then.

        A claimed or running key is left to :meth:`transact`: its lease moves without an
        event, so no expectation of it can be checked.

        Args:
            key: The idempotency key.
            fn: As for :meth:`transact`.

        Returns:
            ``(True, result)`` once it committed, or ``None``.
        """
        for _ in range(2):
            expected = self.expect(key)
            if expected is None:
                return None
            record, now = expected
            if record is not None and record.phase in (Phase.CLAIMED, Phase.RUNNING):
                return None
            done = await self.transact_unchanged(key, record, now, fn)
            if done is None:
                return None
            if done[0]:
                return True, done[1]
        return None

    async def transact_after(
        self, key: str, committed: KeyRecord, now: float, fn: Callable[[Transaction], T]
    ) -> tuple[bool, T] | None:
        """Run ``fn`` in one exchange against ``committed``, the record this process's own
        transaction just wrote (nothing else appended since: the usual case for the
        completion of a claim), at ``now``: ``(True, result)``, or ``None`` to use
        :meth:`transact`, also when the connection failed (that try may have landed;
        the usual transaction finds it).

        Args:
            key: The idempotency key.
            committed: The record this process's own transaction just wrote.
            now: The storage's clock to run ``fn`` at.
            fn: As for :meth:`transact`.

        Returns:
            ``(True, result)`` once it committed, or ``None``.
        """
        try:
            done = await self.transact_unchanged(key, committed, now, fn)
        except LedgerUnavailable:
            return None
        return (True, done[1]) if done is not None and done[0] else None

    def tally(self) -> dict[int, Tally] | None:
        """Optional: the ledger-wide tally of keys, events and chain heads by stripe,
        which ``verify`` compares with the records to see a whole key deleted.

        Returns:
            The tally, or ``None`` (the default) for a backend that keeps none.
        """
        return None

    async def open_on_loop(self) -> None:
        """Optional: get ready to serve the running event loop (``Ledger.__aenter__`` calls
        it: a server backend connects now rather than during its first call)."""
        return None

    async def close_on_loop(self) -> None:
        """Optional: release what this recorder holds on the running event loop
        (``Ledger.aclose`` calls it before :meth:`close`, which may run on another
        thread)."""
        return None

    @abstractmethod
    def get(self, key: str) -> KeyRecord | None:
        """Read a key's state, outside any transaction.

        Args:
            key: The idempotency key.

        Returns:
            Its record, or ``None`` for a key never recorded.
        """

    @abstractmethod
    def now(self) -> float:
        """The storage's clock (leases are judged by it, so every worker reads one clock).

        Returns:
            Seconds since the epoch.
        """

    @abstractmethod
    def events(
        self, key: str | None = None, *, after: int = 0, limit: int | None = None
    ) -> list[LedgerEvent]:
        """Read the log in order.

        Args:
            key: Only this key's events; ``None``: every key's.
            after: Only events after this sequence number.
            limit: At most this many.

        Returns:
            The events, by sequence number.
        """

    @abstractmethod
    def records(self) -> Iterator[KeyRecord]:
        """Every key's state, in key order.

        Returns:
            An iterator of the records.
        """

    @abstractmethod
    def candidate_open_effects(self) -> list[KeyRecord]:
        """Keys whose effect may be unknown, found by index (never by a scan of the log).

        Returns:
            The records settled with an unknown effect, or claimed or running.
        """

    @abstractmethod
    def compactable(self, settled_before: str) -> list[str]:
        """Keys that may be compacted.

        Args:
            settled_before: An ISO 8601 time.

        Returns:
            The keys with a final, known outcome settled before it, not yet compacted.
        """

    @abstractmethod
    def close(self) -> None:
        """Release the storage; the ledger makes no call after this."""


# -- the backends' writer threads -----------------------------------------------------
# Transactions queued from any thread or event loop, run on threads of the recorder's
# own, and answered on each caller's loop (or future): a queue and one
# call_soon_threadsafe is lighter than an executor's future chain.


@dataclasses.dataclass(slots=True)
class Job:
    """One queued transaction (``run``, taking no argument) and whom to answer: a thread's
    future, or an asyncio future of an event ``loop``."""

    run: Callable[[], Any]
    future: Future[Any] | asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> bool:
        """False if the caller stopped waiting before its turn (it is skipped, as a thread
        pool skips a cancelled work item); a started job cannot be cancelled."""
        if self.loop is None:
            assert isinstance(self.future, Future)  # no loop: a caller's thread waits on it
            return self.future.set_running_or_notify_cancel()
        return not self.future.cancelled()

    def answer(self, result: Any, error: BaseException | None) -> None:
        """Answer the caller (on its event loop's thread, unless it stopped waiting)."""
        if self.future.cancelled():
            return
        if error is None:
            self.future.set_result(result)
        else:
            self.future.set_exception(error)

    def answered(self, result: Any, error: BaseException | None) -> None:
        """:meth:`answer`, from a writer thread."""
        if self.loop is None:
            self.answer(result, error)
        else:
            with contextlib.suppress(RuntimeError):  # a loop closed meanwhile hears nothing
                self.loop.call_soon_threadsafe(self.answer, result, error)


class Writers:
    """Threads that take jobs from one queue, started on the first job and stopped by
    :meth:`close`, and answer each job with what its ``run`` returned or raised."""

    def __init__(self, name: str, *, threads: int = 1) -> None:
        self._name = name
        self._count = threads
        self._queue: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = False

    def put(self, job: Job) -> None:
        if len(self._threads) < self._count or self._closed:
            with self._lock:
                if self._closed:
                    job.answer(None, LedgerUnavailable("the ledger is closed"))
                    return
                while len(self._threads) < self._count:
                    thread = threading.Thread(
                        target=self._run, name=f"{self._name}-{len(self._threads)}", daemon=True
                    )
                    thread.start()
                    self._threads.append(thread)
        self._queue.put(job)

    def _run(self) -> None:
        while (job := self._queue.get()) is not None:
            if not job.start():
                continue
            try:
                result = job.run()
            except BaseException as exc:
                job.answered(None, exc)
            else:
                job.answered(result, None)

    def close(self) -> None:
        """Run what is queued, then stop the threads."""
        with self._lock:
            threads, self._threads = self._threads, []
            self._closed, self._count = True, 0  # a job put after close is refused
        for _ in threads:
            self._queue.put(None)
        for thread in threads:
            thread.join()
