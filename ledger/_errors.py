"""Errors raised by the ledger.

Every error the ledger raises on purpose derives from :class:`LedgerError`, so a
caller can tell "the ledger refused" from "the adapter blew up".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def _restored(kind: type[BaseException], args: tuple[Any, ...], fields: dict[str, Any]) -> Any:
    error = kind.__new__(kind, *args)  # its args set, its __init__ not called
    error.__dict__.update(fields)
    return error


class LedgerError(Exception):
    """Base class of every error the ledger raises on purpose."""

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled as its message and fields: ``Exception`` would rebuild it by calling it
        # with its ``args`` (the message), which keyword-only fields cannot be given, so
        # across a process boundary it would fail to unpickle, or lose its fields.
        return (_restored, (type(self), self.args, self.__dict__))


class InvalidRequest(LedgerError, ValueError):
    """The request (or an argument) is malformed. Nothing was recorded."""


class DuplicateActionId(InvalidRequest):
    """This ``action_id`` was submitted before (the log's unique index refused it again)."""


class IdempotencyConflictError(LedgerError):
    """The key is already bound to a different operation.

    A durable ``action.replay_refused`` event was recorded before this was raised.

    Args:
        key: The idempotency key.
        original_action_id: The submission that bound the key to its operation.
        dimensions: The fingerprinted fields that differ (``payload``, ``performer``...).
        fingerprint_version: The fingerprint version the key was bound under.
        action_id: The refused submission.
    """

    def __init__(
        self,
        *,
        key: str,
        original_action_id: str,
        dimensions: Sequence[str],
        fingerprint_version: str,
        action_id: str | None = None,
    ) -> None:
        self.key = key
        self.original_action_id = original_action_id
        self.dimensions = tuple(dimensions)
        self.fingerprint_version = fingerprint_version
        self.action_id = action_id
        super().__init__(
            f"idempotency key {key!r} is bound to action {original_action_id} with a different "
            f"{', '.join(self.dimensions)} ({fingerprint_version}); use a new key for a new "
            "operation"
        )


class ActionInProgressError(LedgerError):
    """A live execution holds the key; this request was deferred (and recorded as such).

    Args:
        key: The idempotency key.
        holder_action_id: The submission whose execution holds the key.
        lease_remaining: Seconds until the holder's lease expires unless it is renewed.
        action_id: The deferred submission.
    """

    def __init__(
        self,
        *,
        key: str,
        holder_action_id: str,
        lease_remaining: float,
        action_id: str | None = None,
    ) -> None:
        self.key = key
        self.holder_action_id = holder_action_id
        self.lease_remaining = lease_remaining
        self.action_id = action_id
        super().__init__(
            f"idempotency key {key!r} is held by live action {holder_action_id} "
            f"(lease expires in {lease_remaining:.1f}s); try again later"
        )


class DecisionRefused(LedgerError):
    """An operator's decision was refused, and the refusal recorded
    (``action.reconcile_refused`` or ``action.approval_refused``): a verdict on a key with
    no execution, a live one or an effect that is not unknown; an approval when no call
    awaits one under the key, the decision names another fingerprint, or the approver is
    the call's own performer.

    Args:
        key: The idempotency key.
        reason: Why the decision was refused.
        decided: What somebody decided first, which stands: the key's effect
            (``observed`` or ``none``) for a verdict, the call's approval state
            (``approved``, ``rejected`` or ``consumed``) for an approval.
    """

    def __init__(self, key: str, reason: str, *, decided: str | None = None) -> None:
        self.key = key
        self.reason = reason
        self.decided = decided
        super().__init__(f"decision on {key!r} refused: {reason}")


class LedgerUnavailable(LedgerError):
    """The ledger's storage could not be reached or lost its connection.

    Retryable: when this is raised before the adapter ran, no effect happened.

    Args:
        message: What failed, and where.
        maybe_committed: The write's COMMIT was sent and its answer lost: it may have
            landed.
    """

    def __init__(self, message: str, *, maybe_committed: bool = False) -> None:
        self.maybe_committed = maybe_committed
        super().__init__(message)


class NoEffect(Exception):
    """Raised by an adapter that knows its attempt had no effect.

    For example: the connection was refused before anything was sent, the far side
    rejected the request with a 4xx, or it answered 429.

    Args:
        message: What the far side said.
        retryable: Whether the same key may act again.
        retry_after: The far side's hint, in seconds, of when to try again.

    Raises:
        ValueError: ``retry_after`` is not a finite number of seconds >= 0.
    """

    __reduce__ = LedgerError.__reduce__

    def __init__(
        self,
        message: str = "no effect",
        *,
        retryable: bool = False,
        retry_after: float | None = None,
    ) -> None:
        if retry_after is not None and not 0 <= retry_after < float("inf"):
            raise ValueError(
                f"retry_after must be a finite number of seconds >= 0, not {retry_after!r}"
            )
        self.retryable = retryable
        self.retry_after = retry_after
        super().__init__(message)
