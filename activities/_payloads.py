"""What crosses the boundary between a workflow and the ledgered activities.

Plain pydantic models with no I/O, so workflow code can import them safely.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..ledger import EffectState, NextOperation, Verdict


class ErrorType(StrEnum):
    """``ApplicationError`` types the ledgered activities raise and ``run_tool`` maps.

    The final ones end the step; the others are retried by Temporal because the ledger
    allows another attempt under the same key (or the ledger was briefly unreachable).
    """

    CONFLICT = "ToolConflict"
    DENIED = "ToolDenied"
    FAILED = "ToolFailed"
    INVALID_REQUEST = "ToolInvalidRequest"
    EFFECT_UNKNOWN = "ToolEffectUnknown"
    #: A replay whose recorded output was compacted away, for a tool that returns one.
    OUTPUT_COMPACTED = "ToolOutputCompacted"
    #: A recorded output that no longer fits the tool's output model.
    OUTPUT_INVALID = "ToolOutputInvalid"
    NO_EFFECT_RETRYABLE = "ToolNoEffectRetryable"
    IN_PROGRESS = "ToolInProgress"
    EFFECT_UNKNOWN_RETRY_SAFE = "ToolEffectUnknownRetrySafe"
    LEDGER_UNAVAILABLE = "LedgerUnavailable"
    #: The reconcile activity's refusals.
    RECONCILE_REFUSED = "ReconcileRefused"
    RECONCILE_NOT_ALLOWED = "ReconcileNotAllowed"
    #: The key's effect is no longer unknown (reconciled elsewhere, e.g. with the CLI).
    RECONCILE_ALREADY_RESOLVED = "ReconcileAlreadyResolved"
    #: The workflow's update ``reconcile`` refused the operator's input.
    RECONCILE_REJECTED = "ReconcileRejected"


#: Outcomes after which the ledger allows no other attempt of a tool step.
FINAL_ERROR_TYPES: tuple[ErrorType, ...] = (
    ErrorType.CONFLICT,
    ErrorType.DENIED,
    ErrorType.FAILED,
    ErrorType.INVALID_REQUEST,
    ErrorType.EFFECT_UNKNOWN,
    ErrorType.OUTPUT_COMPACTED,
)


class _Payload(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ToolCall(_Payload):
    """One ledgered tool call as scheduled by ``run_tool``."""

    key: str
    step: str
    performer: str
    arg: dict[str, Any] | None = None
    precondition: Any = None


class ToolOutcome(_Payload):
    """What a ledgered tool activity returns when the step is done."""

    key: str
    action_id: str
    output: Any = None
    replayed: bool = False
    reused_from_action_id: str | None = None
    #: The output was observed by an operator (effect_confirmed), not by the adapter.
    reconciled: bool = False


class UnknownEffect(_Payload):
    """Details of a ToolEffectUnknown failure: what the workflow needs to park the step."""

    key: str
    action_id: str
    capability: str
    error: str | None = None
    #: Actor patterns the worker's policy allows to reconcile (checked again by the activity).
    reconcilers: list[str] = Field(default_factory=list)
    #: The Temporal address the tool's worker uses, for the operator's commands.
    address: str | None = None
    #: Whether the namespace has the ``LedgerOpenEffects`` search attribute; the
    #: workflow upserts it only then (an unregistered one would fail its task).
    open_effects_attribute: bool = False


class ConflictDetails(_Payload):
    """Details of a ToolConflict failure: the key's original action and what differs."""

    key: str
    original_action_id: str
    dimensions: list[str]
    fingerprint_version: str


class ReconcileInput(_Payload):
    """An operator's verdict for one parked key, as sent by signal or update ``reconcile``."""

    key: str
    verdict: Verdict
    actor: str
    basis: str
    evidence: list[Any] = Field(default_factory=list)
    output: Any = None
    #: Optional: the parked action this verdict is about; refused if another is parked.
    action_id: str | None = None


class ReconcileResult(_Payload):
    """What the ledger recorded for a verdict: the update ``reconcile`` answers with it."""

    key: str
    verdict: Verdict
    effect: EffectState
    next_operation: NextOperation
