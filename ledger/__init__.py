"""A durable action ledger: tool calls that are safe to retry.

Identical requests under one idempotency key replay the recorded outcome, a
different request under the same key is refused with a durable record, and an
effect whose outcome is unknown stays open until an operator reconciles it.
This package never imports Temporal.
"""

from ._canonical import FINGERPRINT_VERSION
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
from ._ledger import Adapter, Ledger, StateResolver
from ._models import (
    APPROVAL_REJECTED,
    APPROVAL_REQUIRED,
    ActionRequest,
    ActionResult,
    ActionState,
    ActionStatus,
    Approval,
    ApprovalState,
    Authority,
    Decision,
    EffectState,
    EventType,
    ExecutionContext,
    LedgerEvent,
    NextOperation,
    Reconciliation,
    Verdict,
    may_act_again,
)
from ._schema import describe_schema, output_misfit, output_problems, output_template
from ._signatures import (
    DecisionSignature,
    Signers,
    decision_statement,
    read_policy,
    read_private_key,
    sign,
    verdict_statement,
)
from ._verify import VerifyReport
from ._version import __version__

__all__ = [
    "APPROVAL_REJECTED",
    "APPROVAL_REQUIRED",
    "FINGERPRINT_VERSION",
    "ActionInProgressError",
    "ActionRequest",
    "ActionResult",
    "ActionState",
    "ActionStatus",
    "Adapter",
    "Approval",
    "ApprovalRefused",
    "ApprovalState",
    "Authority",
    "Decision",
    "DecisionSignature",
    "EffectState",
    "EventType",
    "ExecutionContext",
    "IdempotencyConflictError",
    "InvalidRequest",
    "Ledger",
    "LedgerError",
    "LedgerEvent",
    "LedgerUnavailable",
    "NextOperation",
    "NoEffect",
    "Reconciliation",
    "ReconciliationRefused",
    "Signers",
    "StateResolver",
    "Verdict",
    "VerifyReport",
    "__version__",
    "decision_statement",
    "describe_schema",
    "may_act_again",
    "output_misfit",
    "output_problems",
    "output_template",
    "read_policy",
    "read_private_key",
    "sign",
    "verdict_statement",
]
