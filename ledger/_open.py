"""Where a ledger is and what it holds open: its URL, checked before anything is opened
and shown without its password; the backend and the threads it opens, the writes tried
again across a dropped connection, and those nobody waits for, done before it closes."""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import time
import urllib.parse
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Literal, Self, TypeAlias, TypeVar

from ._errors import InvalidRequest, LedgerError, LedgerUnavailable
from ._recorder import Recorder
from ._transaction import KeyRecord, Transaction

logger = logging.getLogger(__name__)

T = TypeVar("T")
#: How a replay's audit record is written before it answers: on disk, committed without
#: waiting for the disk, or with the next batch.
ReplayAudit: TypeAlias = Literal["durable", "committed", "batched"]

# A write the ledger must not lose to a dropped connection (a completion, the release of
# a claim whose adapter never ran) is tried again with a short backoff, for a few leases
# and at least the floor: long enough to ride out a restart or a failover, bounded so a
# caller still hears of a lasting outage.
_RETRY_FIRST_DELAY = 0.05
_RETRY_MAX_DELAY = 1.0
_RETRY_LEASES = 3.0
_RETRY_FLOOR = 30.0


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
        parts = parts._replace(netloc=parts.netloc.replace(f":{password}@", ":***@", 1))
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
        return functools.partial(PostgresRecorder, url)
    if not scheme:
        raise InvalidRequest(f"ledger {shown!r} is not a URL: {_URL_FORMS}")
    raise InvalidRequest(f"ledger {shown}: unsupported scheme {scheme!r}: {_URL_FORMS}")


class Opened:
    """The storage side of :class:`~temporal_ledger.ledger.Ledger`: the backend it opened,
    the threads its transactions run on, closing it, the writes nobody waits for and those
    tried again across a dropped connection."""

    def __init__(
        self,
        recorder: Recorder,
        *,
        lease: float = 30.0,
        url: str = "",
        replay_audit: ReplayAudit = "committed",
    ) -> None:
        self.lease = lease_seconds(lease)
        if replay_audit not in ("durable", "committed", "batched"):
            raise InvalidRequest(
                f"replay_audit must be 'committed', 'durable' or 'batched', got {replay_audit!r}"
            )
        self.replay_audit = replay_audit
        self.url = url
        self._recorder = recorder
        self._executor = ThreadPoolExecutor(
            max_workers=recorder.max_concurrency, thread_name_prefix="ledger"
        )
        self._closed = False
        # Writes nobody waits for (batched replays' audit records, background writes).
        self._audits: set[asyncio.Future[Any]] = set()
        # Batched replays' audit transactions not yet handed to the recorder.
        self._audit_batch: list[tuple[str, Callable[[Transaction], None]]] = []

    @classmethod
    def open(
        cls, url: str, *, lease: float = 30.0, replay_audit: ReplayAudit = "committed"
    ) -> Self:
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
        return cls(opener(url)(), lease=lease, url=url, replay_audit=replay_audit)

    def close(self) -> None:
        """Write what is pending (batched replays' audit records) and close the backend."""
        if self._closed:
            return
        self._closed = True
        batch, self._audit_batch = self._audit_batch, []
        for key, audit in batch:
            try:
                if self._recorder.submit(key, audit) is None:
                    self._recorder.transact(key, audit)
            except Exception as exc:
                logger.error("a batched replay's audit record was not written: %s", exc)
        self._executor.shutdown(wait=True)
        self._recorder.close()

    async def aclose(self) -> None:
        """:meth:`close` from the event loop, after the pending audit records are written."""
        self._submit_audits()
        # The batched replays' audit records are written before closing.
        await asyncio.gather(*self._audits, return_exceptions=True)
        if not self._closed:
            await self._recorder.close_on_loop()
        await asyncio.get_running_loop().run_in_executor(None, self.close)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        await self._recorder.open_on_loop()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        if self._closed:
            raise LedgerError("the ledger is closed")
        return await asyncio.get_running_loop().run_in_executor(
            self._executor, functools.partial(fn, *args)
        )

    if TYPE_CHECKING:  # ``Ledger``'s, on its call path

        async def _transact(self, key: str, fn: Callable[[Transaction], T], **submit: Any) -> T: ...

    async def _transact_durably(self, key: str, fn: Callable[[Transaction], T], *, what: str) -> T:
        """A write that must not be lost to a dropped connection: tried until it commits.

        Each try takes a connection of its own (a pooled backend discards the dead one).
        ``fn`` must be idempotent (a try whose COMMIT answer was lost may have landed) and
        must check the fencing token itself, so a write whose attempt lost the key records
        only late evidence. A backend whose failed write is final (a local file) gets one
        try.
        """
        if not self._recorder.reconnects:
            return await self._transact(key, fn)
        started = time.monotonic()
        give_up = max(_RETRY_LEASES * self.lease, _RETRY_FLOOR)
        delay = _RETRY_FIRST_DELAY
        tries = 1
        while True:
            try:
                result = await self._transact(key, fn)
            except LedgerUnavailable as exc:
                took = time.monotonic() - started
                if took >= give_up:
                    logger.error(
                        "gave up recording %s for %r after %d tries in %.1f s: %s",
                        *(what, key, tries, took, exc),
                    )
                    raise
                if tries == 1:
                    logger.warning("recording %s for %r failed, retrying: %s", what, key, exc)
                await asyncio.sleep(min(delay, give_up - took))
                delay = min(delay * 2, _RETRY_MAX_DELAY)
                tries += 1
                continue
            if tries > 1:
                took = time.monotonic() - started
                logger.warning(
                    "recorded %s for %r on try %d, %.1f s after the first", what, key, tries, took
                )
            return result

    def _submit_audits(self) -> None:
        batch, self._audit_batch = self._audit_batch, []
        if not batch or self._closed:
            return
        loop = asyncio.get_running_loop()
        for key, audit in batch:
            queued = self._recorder.submit_on_loop(key, audit, loop, durable=False)
            pending = queued or asyncio.ensure_future(
                self._run(self._recorder.transact, key, audit)
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


def lease_seconds(lease: object) -> float:
    """A lease as seconds: a positive finite number, or :class:`InvalidRequest` naming it."""
    if not (isinstance(lease, (int, float)) and math.isfinite(lease) and lease > 0):
        raise InvalidRequest(f"lease must be a positive number of seconds, got {lease!r}")
    return float(lease)
