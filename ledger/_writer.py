"""The backends' writer threads: transactions queued from any thread or event loop, run
on threads of the recorder's own, and answered on each caller's loop (or future).

A queue and one ``call_soon_threadsafe`` per loop and batch is lighter than an
executor's future chain, and lets the SQLite writer commit whatever queued up together.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import Any

from ._errors import LedgerUnavailable
from ._transaction import KeyRecord, Transaction


class Job:
    """One queued transaction and whom to answer: a thread's future, or an asyncio future
    of an event loop."""

    __slots__ = ("durable", "expected", "fn", "future", "key", "loop")

    def __init__(
        self,
        key: str,
        fn: Callable[[Transaction], Any],
        future: Future[Any] | asyncio.Future[Any],
        loop: asyncio.AbstractEventLoop | None = None,
        *,
        durable: bool = True,
        expected: KeyRecord | None = None,
    ) -> None:
        self.key = key
        self.fn = fn
        self.future = future
        self.loop = loop
        #: Whether its commit must wait for the disk (a replay's record need not).
        self.durable = durable
        #: The settled record the caller decided on: used if the chain head still matches.
        self.expected = expected

    def start(self) -> bool:
        """False if the caller stopped waiting before its turn (it is skipped, as a thread
        pool skips a cancelled work item); a started job cannot be cancelled."""
        if self.loop is None:
            assert isinstance(self.future, Future)  # no loop: a caller's thread waits on it
            return self.future.set_running_or_notify_cancel()
        return not self.future.cancelled()


#: A job's answer: the job, and its result or its error.
Answer = tuple[Job, Any, BaseException | None]


def answer(answers: Iterable[Answer]) -> None:
    """Answer each job's caller: a thread's future at once, an event loop's futures with
    one wake-up of that loop for all of them."""
    by_loop: dict[asyncio.AbstractEventLoop, list[Answer]] = {}
    for job, result, error in answers:
        if job.loop is not None:
            by_loop.setdefault(job.loop, []).append((job, result, error))
        elif error is None:
            job.future.set_result(result)
        else:
            job.future.set_exception(error)
    for loop, answered in by_loop.items():
        with contextlib.suppress(RuntimeError):  # a loop closed meanwhile hears nothing
            loop.call_soon_threadsafe(_on_loop, answered)


def _on_loop(answers: list[Answer]) -> None:
    for job, result, error in answers:
        future = job.future
        if future.cancelled():
            continue
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)


class Writers:
    """Threads that run jobs from one queue, started on the first job, stopped by
    :meth:`close`. Each takes the next job and, up to ``batch``, whatever queued up
    behind it, and hands the started ones to ``work``, which answers them."""

    def __init__(
        self, name: str, work: Callable[[list[Job]], None], *, threads: int = 1, batch: int = 1
    ) -> None:
        self._name = name
        self._work = work
        self._count = threads
        self._batch = batch
        self._queue: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = False

    def put(self, job: Job) -> None:
        if len(self._threads) < self._count:
            with self._lock:
                if self._closed:
                    answer([(job, None, LedgerUnavailable("the ledger is closed"))])
                    return
                while len(self._threads) < self._count:
                    thread = threading.Thread(
                        target=self._run, name=f"{self._name}-{len(self._threads)}", daemon=True
                    )
                    thread.start()
                    self._threads.append(thread)
        self._queue.put(job)

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            while len(batch) < self._batch:
                try:
                    job = self._queue.get_nowait()
                except queue.Empty:
                    break
                if job is None:
                    self._queue.put(None)  # stop after this batch
                    break
                batch.append(job)
            started = [job for job in batch if job.start()]
            if started:
                self._work(started)

    def close(self) -> None:
        """Run what is queued, then stop the threads."""
        with self._lock:
            threads, self._threads = self._threads, []
            self._closed, self._count = True, 0  # a job put after close is refused
        for _ in threads:
            self._queue.put(None)
        for thread in threads:
            thread.join()
