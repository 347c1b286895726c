"""What crosses the boundary between a workflow and the ledgered activities.

Plain pydantic models with no I/O, so workflow code can import them safely.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

#: ApplicationError types the tool activities raise; the workflow side maps them to errors.
CONFLICT = "ToolConflict"
DENIED = "ToolDenied"
FAILED = "ToolFailed"
INVALID = "ToolInvalidRequest"
EFFECT_UNKNOWN = "ToolEffectUnknown"
#: Retryable: the ledger allows another attempt under the same key.
NO_EFFECT_RETRYABLE = "ToolNoEffectRetryable"
IN_PROGRESS = "ToolInProgress"
EFFECT_UNKNOWN_RETRY_SAFE = "ToolEffectUnknownRetrySafe"
LEDGER_UNAVAILABLE = "LedgerUnavailable"
#: The reconcile activity's refusals.
RECONCILE_REFUSED = "ReconcileRefused"
RECONCILE_NOT_ALLOWED = "ReconcileNotAllowed"
#: The key's effect is no longer unknown (reconciled elsewhere, e.g. with the CLI).
RECONCILE_ALREADY_RESOLVED = "ReconcileAlreadyResolved"
#: A replay whose recorded output was compacted away, for a tool that returns one.
OUTPUT_COMPACTED = "ToolOutputCompacted"

FINAL_ERROR_TYPES = [CONFLICT, DENIED, FAILED, INVALID, EFFECT_UNKNOWN, OUTPUT_COMPACTED]


class _Payload(BaseModel):
    model_config = ConfigDict(extra="forbid")


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


class ConflictDetails(_Payload):
    key: str
    original_action_id: str
    dimensions: list[str]
    fingerprint_version: str


class ReconcileInput(_Payload):
    """An operator's verdict for one parked key, as sent by signal or update ``reconcile``."""

    key: str
    verdict: str
    actor: str
    basis: str
    evidence: list[Any] = Field(default_factory=list)
    output: Any = None
    #: Optional: the parked action this verdict is about; refused if another is parked.
    action_id: str | None = None


class ReconcileResult(_Payload):
    key: str
    verdict: str
    effect: str
    next_operation: str
