"""A durable action ledger: tool calls that are safe to retry.

Identical requests under one idempotency key replay the recorded outcome, a
different request under the same key is refused with a durable record, and an
effect whose outcome is unknown stays open until an operator reconciles it.
This package never imports Temporal.

A third storage backend implements :mod:`temporal_ledger.ledger.storage` and passes the
shared suite in :mod:`temporal_ledger.ledger.testing`.
"""

from ._errors import (
    ActionInProgressError,
    DecisionRefused,
    IdempotencyConflictError,
    InvalidRequest,
    LedgerError,
    LedgerUnavailable,
    NoEffect,
)
from ._ledger import Ledger
from ._models import ActionRequest, ActionResult, ActionState, Authority
from ._version import __version__ as __version__

__all__ = [
    "ActionInProgressError",
    "ActionRequest",
    "ActionResult",
    "ActionState",
    "Authority",
    "DecisionRefused",
    "IdempotencyConflictError",
    "InvalidRequest",
    "Ledger",
    "LedgerError",
    "LedgerUnavailable",
    "NoEffect",
]
