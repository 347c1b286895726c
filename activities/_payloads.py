"""What crosses the boundary between a workflow and the ledgered activities.

Plain pydantic models with no I/O, so workflow code can import them safely.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from ..ledger import (
    ApprovalState,
    Decision,
    DecisionSignature,
    EffectState,
    NextOperation,
    Signers,
    Verdict,
)


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
    #: The call needs a person's approval of its exact request: the workflow waits for it.
    AWAITING_APPROVAL = "ToolAwaitingApproval"
    #: A person rejected the call: the step ends with no effect.
    REJECTED = "ToolRejected"
    #: The approve activity's refusals, and the workflow's update ``approve`` rejecting input.
    APPROVE_REFUSED = "ApproveRefused"
    APPROVE_NOT_ALLOWED = "ApproveNotAllowed"
    #: The call was decided elsewhere first (e.g. ``temporal-ledger approve``).
    APPROVE_ALREADY_DECIDED = "ApproveAlreadyDecided"
    APPROVE_REJECTED = "ApproveRejected"
    #: No probe is registered for the tool on the worker that ran the probe activity.
    PROBE_UNAVAILABLE = "ProbeUnavailable"


#: Outcomes after which the ledger allows no other attempt of a tool step.
FINAL_ERROR_TYPES: tuple[ErrorType, ...] = (
    ErrorType.CONFLICT,
    ErrorType.DENIED,
    ErrorType.FAILED,
    ErrorType.INVALID_REQUEST,
    ErrorType.EFFECT_UNKNOWN,
    ErrorType.OUTPUT_COMPACTED,
    ErrorType.REJECTED,
)


#: Header of every activity a workflow schedules: the run identity its key is built from.
ANCHOR_HEADER = "temporal-ledger-run-anchor"


class RunAnchor(BaseModel):
    """What the anchor header carries (plain JSON, whatever converter a worker uses)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    #: The first execution's run id: a reset run keeps it.
    first: str
    #: The run this one continued from (continue-as-new, cron, workflow retry), if any.
    continued: str | None = None
    #: The activity's number among those every run of the workflow schedules (see
    #: ``workflows._scheduling``); absent from workers before it, which used the activity id.
    call: str | None = None


#: Header of a call whose tool's hints the workflow saw listed (MCP tool annotations).
HINTS_HEADER = "temporal-ledger-tool-hints"


class ToolHints(BaseModel):
    """An MCP tool's annotations: hints from its server, which the policy weighs.

    The MCP defaults apply where a hint is absent: not read-only, destructive, not
    idempotent (a tool that says nothing is assumed to be able to do anything).
    """

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    read_only: bool = Field(default=False, alias="readOnlyHint")
    destructive: bool = Field(default=True, alias="destructiveHint")
    idempotent: bool = Field(default=False, alias="idempotentHint")
    open_world: bool = Field(default=True, alias="openWorldHint")

    @classmethod
    def parse(cls, value: Any) -> ToolHints | None:
        """Annotations as either SDK spells them (``readOnlyHint`` or ``read_only_hint``);
        ``None`` for anything that is not a JSON object."""
        if not isinstance(value, dict):
            return None
        aliases = {
            "read_only_hint": "readOnlyHint",
            "destructive_hint": "destructiveHint",
            "idempotent_hint": "idempotentHint",
            "open_world_hint": "openWorldHint",
        }
        known = {aliases.get(k, k): v for k, v in value.items() if v is not None}
        try:
            return cls.model_validate(known)
        except ValueError:
            return None

    @property
    def retry_safe(self) -> bool:
        """Another attempt under the key may act: the tool only reads, or the server dedupes."""
        return self.read_only or self.idempotent

    @property
    def may_destroy(self) -> bool:
        return not self.read_only and self.destructive


class _Payload(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _SigningPayload(_Payload):
    """A payload with fields of the signing feature, left out of what crosses while they
    hold their defaults: workers of earlier releases refuse fields they do not know, and
    keep working beside these during a rolling upgrade as long as no key is configured."""

    @model_serializer(mode="wrap")
    def _without_unused_signing(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        fields = type(self).model_fields
        for name in _SIGNING_FIELDS & data.keys():
            if data[name] == fields[name].get_default(call_default_factory=True):
                del data[name]
        return data


_SIGNING_FIELDS = frozenset({"keys", "signature_required", "signature"})


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


class UnknownEffect(_SigningPayload):
    """Details of a ToolEffectUnknown failure: what the workflow needs to park the step."""

    key: str
    action_id: str
    capability: str
    error: str | None = None
    #: Actor patterns the worker's policy allows to reconcile (checked again by the activity).
    reconcilers: list[str] = Field(default_factory=list)
    #: The policy's public keys by actor, and whether a verdict must be signed with one
    #: (checked again by the activity).
    keys: dict[str, list[str]] = Field(default_factory=dict)
    signature_required: bool = False
    #: The Temporal address the tool's worker uses, for the operator's commands.
    address: str | None = None
    #: Whether the namespace has the ``LedgerOpenEffects`` search attribute; the
    #: workflow upserts it only then (an unregistered one would fail its task).
    open_effects_attribute: bool = False
    #: The tool has a probe: the workflow asks the far side before parking.
    probe: bool = False


class ConflictDetails(_Payload):
    """Details of a ToolConflict failure: the key's original action and what differs."""

    key: str
    original_action_id: str
    dimensions: list[str]
    fingerprint_version: str


class ReconcileInput(_SigningPayload):
    """An operator's verdict for one parked key, as sent by signal or update ``reconcile``."""

    key: str
    verdict: Verdict
    actor: str
    basis: str
    evidence: list[Any] = Field(default_factory=list)
    output: Any = None
    #: Optional: the parked action this verdict is about; refused if another is parked.
    #: A signed verdict names it (the signature covers it).
    action_id: str | None = None
    #: Proof that ``actor`` gave this verdict, in this run (``temporal-ledger sign``).
    signature: DecisionSignature | None = None

    def signature_problem(
        self, signers: Signers, *, workflow_id: str, namespace: str
    ) -> str | None:
        """Why this verdict does not prove its actor to ``signers`` in the given run, or
        ``None`` (pure computation: the workflow's validator runs it)."""
        return signers.verdict_problem(
            key=self.key,
            action_id=self.action_id,
            verdict=self.verdict,
            actor=self.actor,
            basis=self.basis,
            evidence=self.evidence,
            output=self.output,
            signature=self.signature,
            workflow_id=workflow_id,
            namespace=namespace,
        )


class ReconcileResult(_Payload):
    """What the ledger recorded for a verdict: the update ``reconcile`` answers with it."""

    key: str
    verdict: Verdict
    effect: EffectState
    next_operation: NextOperation


class ApprovalNeeded(_SigningPayload):
    """Details of a ToolAwaitingApproval failure: what the workflow shows the approver."""

    key: str
    fingerprint: str
    capability: str
    performer: str
    #: The request's payload as fingerprinted (shown for activities ledgered by pattern).
    arguments: Any = None
    #: Actor patterns the worker's policy allows to approve (checked again by the activity).
    approvers: list[str] = Field(default_factory=list)
    #: The policy's public keys by actor, and whether a decision must be signed with one.
    keys: dict[str, list[str]] = Field(default_factory=dict)
    signature_required: bool = False
    address: str | None = None
    #: Whether the namespace has the ``LedgerAwaitingApproval`` search attribute.
    awaiting_approval_attribute: bool = False


class ApproveInput(_SigningPayload):
    """A person's decision on one call awaiting approval, as sent by update ``approve``."""

    key: str
    #: The fingerprint of the request that was shown: the decision holds for it alone.
    fingerprint: str
    decision: Decision
    actor: str
    basis: str
    #: Proof that ``actor`` took this decision, in this run (``temporal-ledger sign``).
    signature: DecisionSignature | None = None

    def signature_problem(
        self, signers: Signers, *, workflow_id: str, namespace: str
    ) -> str | None:
        """Why this decision does not prove its actor to ``signers`` in the given run, or
        ``None`` (pure computation: the workflow's validator runs it)."""
        return signers.decision_problem(
            key=self.key,
            fingerprint=self.fingerprint,
            decision=self.decision,
            actor=self.actor,
            basis=self.basis,
            signature=self.signature,
            workflow_id=workflow_id,
            namespace=namespace,
        )


class ApproveResult(_Payload):
    """What the ledger recorded for a decision: the update ``approve`` answers with it."""

    key: str
    fingerprint: str
    decision: Decision
    state: ApprovalState
    actor: str
    approval_id: str | None = None


class ProbeInput(_Payload):
    """The unknown effect a probe is asked about."""

    key: str
    tool: str
    action_id: str
    arg: dict[str, Any] | None = None


class ProbeResult(_Payload):
    """What the probe found and the ledger recorded for it.

    ``finding`` is ``present`` (the output is the tool's), ``absent`` (recorded as no
    effect: the step acts again), ``inconclusive`` (the step parks) or ``resolved`` (the
    key was reconciled meanwhile: the step runs again to read the outcome).
    """

    finding: str
    verdict: Verdict | None = None
    output: Any = None
