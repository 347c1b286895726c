"""The backends' writer threads: transactions queued from any thread or event loop, run
on threads of the recorder's own, and answered on each caller's loop (or future).

A queue and one ``call_soon_threadsafe`` is lighter than an executor's future chain.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from ._errors import LedgerUnavailable


class Job:
    """One queued transaction (``run``, taking no argument) and whom to answer: a thread's
    future, or an asyncio future of an event ``loop``."""

    __slots__ = ("future", "loop", "run")

    def __init__(
        self,
        run: Callable[[], Any],
        future: Future[Any] | asyncio.Future[Any],
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self.run, self.future, self.loop = run, future, loop

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
