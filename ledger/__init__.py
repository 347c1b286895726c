"""A durable action ledger: tool calls that are safe to retry.

Identical requests under one idempotency key replay the recorded outcome, a
different request under the same key is refused with a durable record, and an
effect whose outcome is unknown stays open until an operator reconciles it.
This package never imports Temporal.

A third storage backend implements :mod:`temporal_ledger.ledger.storage` and passes the
shared suite in :mod:`temporal_ledger.ledger.testing`.
"""

import warnings
from typing import Any

from . import _models
from ._errors import (
    ActionInProgressError,
    ApprovalRefused,
    IdempotencyConflictError,
    InvalidRequest,
    LedgerError,
    LedgerUnavailable,
    NoEffect,
    ReconciliationRefused,
)
from ._ledger import Ledger
from ._models import (
    ActionRequest,
    ActionResult,
    ActionState,
    ActionStatus,
    Authority,
    Verdict,
)
from ._version import __version__ as __version__

__all__ = [
    "ActionInProgressError",
    "ActionRequest",
    "ActionResult",
    "ActionState",
    "ActionStatus",
    "ApprovalRefused",
    "Authority",
    "IdempotencyConflictError",
    "InvalidRequest",
    "Ledger",
    "LedgerError",
    "LedgerUnavailable",
    "NoEffect",
    "ReconciliationRefused",
    "Verdict",
]

#: Names that left the public face in 0.3, with what to use instead; gone in 0.4.
_DEPRECATED = {
    "Decision": "pass the decision as a string, 'approve' or 'reject'",
    "EffectState": "compare an effect with its string: 'none', 'unknown' or 'observed'",
    "EventType": "compare an event's type with its string, e.g. 'action.completed'",
    "ExecutionContext": "pass ActionRequest(context=...) a dict",
    "NextOperation": "compare ActionState.next_operation with its string, e.g. 'reconcile_effect'",
}


def __getattr__(name: str) -> Any:
    if name in _DEPRECATED:
        warnings.warn(
            f"temporal_ledger.ledger.{name} is deprecated and goes in 0.4: {_DEPRECATED[name]}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(_models, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
