"""The protocol between the workflow side and the activity side of the ledger.

What a workflow sends a ledgered activity and gets back (payload models, error types,
headers), the names of the plugin's activities, queries, updates and search attributes
(what a tool is to the workflow side is in ``_spec``). Plain data and pure functions
with no I/O: workflow code imports them inside the sandbox.

The workflow side owns this contract and the activity side implements it, so the
imports run one way: ``activities`` imports ``workflows``, which imports ``ledger``. The
activity side reads it through ``workflows/_seam.py`` (``docs/repository.md``, Imports).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from ..ledger import InvalidRequest
from ..ledger._seam import (
    ApprovalState,
    Decision,
    DecisionSignature,
    EffectState,
    NextOperation,
    Verdict,
    refuse_placeholders,
    refuse_probe_name,
)

#: The plugin's own activities, which record people's and probes' answers in the ledger.
RECONCILE_ACTIVITY = "ledger.reconcile"
APPROVE_ACTIVITY = "ledger.approve"
PROBE_ACTIVITY = "ledger.probe"

#: What a run that waits answers: an operator's verdict (signal or update), an approver's
#: decision (update), and the queries that list what waits.
RECONCILE_SIGNAL = "reconcile"
RECONCILE_UPDATE = "reconcile"
APPROVE_UPDATE = "approve"
QUERY_OPEN = "open_effects"
QUERY_REJECTED = "reconcile_rejections"
QUERY_APPROVALS = "pending_approvals"

#: The search attribute that lists runs with steps parked on an unknown effect.
OPEN_EFFECTS_ATTRIBUTE = "LedgerOpenEffects"
#: The search attribute that lists runs with calls waiting for a person's approval.
AWAITING_APPROVAL_ATTRIBUTE = "LedgerAwaitingApproval"

#: Stands for a value the operator must fill in; refused if sent back unchanged.
PLACEHOLDER = "<what the tool returned>"


def holds_placeholder(output: Any, template: Any) -> bool:
    """Whether ``output`` still holds a placeholder string (``<...>``) of ``template``."""
    placeholders = {s for s in _strings(template) if s.startswith("<") and s.endswith(">")}
    return not placeholders.isdisjoint(_strings(output))


def _strings(value: Any) -> list[str]:
    """Every string in a JSON value."""
    if isinstance(value, str):
        return [value]
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else []
    return [s for item in items for s in _strings(item)]


def one_line(exc: Exception) -> str:
    """Why a value did not convert, on one line: a validation error's fields and messages."""
    if isinstance(exc, ValidationError):
        return "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or 'output'}: {error['msg']}"
            for error in exc.errors()
        )
    return " ".join(str(exc).split()) or type(exc).__name__


class ErrorType(StrEnum):
    """The ``type`` of the ``ApplicationError`` s that ledgered activities raise.

    ``run_tool`` turns the final ones into its typed errors, whose ``type`` is one of
    these (a :class:`~temporal_ledger.workflows.ToolError` carries the one that
    ended the step, e.g. ``OUTPUT_INVALID``); the others are retried by Temporal because
    the ledger allows another attempt under the same key (or the ledger was briefly
    unreachable), or tell the workflow to wait for a person.
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
    #: An attempt that only asked the ledger (the user's retry policy was spent on an
    #: attempt that timed out) found the call free to act, and did not act: the step
    #: fails with that last attempt's error, as it would without the ledger.
    ATTEMPTS_SPENT = "ToolAttemptsSpent"


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
    #: ``workflows._scheduling``); absent on the ledger's own activities, which it does not number.
    call: str | None = None


#: Header of a call whose tool's hints the workflow saw listed (MCP tool annotations).
HINTS_HEADER = "temporal-ledger-tool-hints"

#: Header of an attempt that only asks the ledger, scheduled once the user's retry policy
#: is spent on an attempt that may have acted: the ledger replays a recorded outcome,
#: parks an unknown effect or defers to a live claim, and where it would let the call
#: act, the attempt refuses (``ATTEMPTS_SPENT``) instead, recording nothing.
ASK_ONLY_HEADER = "temporal-ledger-ask-only"


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
        try:
            return cls.model_validate({to_camel(k): v for k, v in value.items() if v is not None})
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


class _AwaitingPerson(_Payload):
    """Details of a call that waits for a person: what proves them, and where to answer."""

    #: The policy's public keys by actor, and whether the answer must be signed with one
    #: (checked again by the activity).
    keys: dict[str, list[str]] = Field(default_factory=dict)
    signature_required: bool = False
    #: The Temporal address the tool's worker uses, for the person's commands.
    address: str | None = None


class InnerCall(_Payload):
    """A call made inside a ledgered activity under a key of its own (a tool call of a
    LangGraph tool node: ``activities.langgraph.ledger_tool_calls``).

    When such a call's effect is unknown, the activity fails with the call's key, not its
    own; the workflow parks on that key, and once it is settled runs the activity again,
    so that this call replays the settled outcome and the activity's other calls theirs.
    An operator's ``effect_confirmed`` output is this call's output, not the activity's.
    """

    #: The tool's name, and the call's id (e.g. the model's ``tool_call_id``).
    tool: str
    call_id: str
    #: The shape of the call's output, for the operator's command.
    template: Any = PLACEHOLDER
    #: The JSON schema an operator's output must fit (the ledger checks it again).
    output_schema: dict[str, Any] | None = None
    #: The call's arguments (the model's), shown to the operator.
    arguments: Any = None


class UnknownEffect(_AwaitingPerson):
    """Details of a ToolEffectUnknown failure: what the workflow needs to park the step."""

    key: str
    action_id: str
    capability: str
    error: str | None = None
    #: Actor patterns the worker's policy allows to reconcile (checked again by the activity).
    reconcilers: list[str] = Field(default_factory=list)
    #: Whether the namespace has the ``LedgerOpenEffects`` search attribute; the
    #: workflow upserts it only then (an unregistered one would fail its task).
    open_effects_attribute: bool = False
    #: The tool has a probe: the workflow asks the far side before parking.
    probe: bool = False
    #: The key is a call's inside the activity, not the activity's own (see InnerCall).
    inner: InnerCall | None = None
    #: The JSON schema an operator's output must fit: the activity's real result type,
    #: which only its worker knows (frameworks schedule activities by name, untyped).
    output_schema: dict[str, Any] | None = None


class ConflictDetails(_Payload):
    """Details of a ToolConflict failure: the key's original action and what differs."""

    key: str
    original_action_id: str
    dimensions: list[str]
    fingerprint_version: str


class _PersonsAnswer(_Payload):
    """A person's answer to a waiting call, which its signature may prove."""

    @model_validator(mode="after")
    def _a_persons_own_words(self) -> Self:
        """Refused before anything is recorded: a template's placeholder left in (the
        ledger refuses it too), or a person writing as a tool's probe."""
        actor: str = getattr(self, "actor")  # noqa: B009 - declared by each subclass
        try:
            refuse_probe_name(actor)
            refuse_placeholders(
                actor=actor,
                basis=getattr(self, "basis"),  # noqa: B009
                evidence=getattr(self, "evidence", []),
            )
        except InvalidRequest as exc:
            raise ValueError(str(exc)) from None
        return self


class ReconcileInput(_PersonsAnswer):
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


class ReconcileResult(_Payload):
    """What the ledger recorded for a verdict: the update ``reconcile`` answers with it."""

    key: str
    verdict: Verdict
    effect: EffectState
    next_operation: NextOperation


class ApprovalNeeded(_AwaitingPerson):
    """Details of a ToolAwaitingApproval failure: what the workflow shows the approver."""

    key: str
    fingerprint: str
    capability: str
    performer: str
    #: The request's payload as fingerprinted (shown for activities ledgered by pattern).
    arguments: Any = None
    #: Actor patterns the worker's policy allows to approve (checked again by the activity).
    approvers: list[str] = Field(default_factory=list)
    #: Whether the namespace has the ``LedgerAwaitingApproval`` search attribute.
    awaiting_approval_attribute: bool = False


class ApproveInput(_PersonsAnswer):
    """A person's decision on one call awaiting approval, as sent by update ``approve``."""

    key: str
    #: The fingerprint of the request that was shown: the decision holds for it alone.
    fingerprint: str
    decision: Decision
    actor: str
    basis: str
    #: Proof that ``actor`` took this decision, in this run (``temporal-ledger sign``).
    signature: DecisionSignature | None = None


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


class ProbeOutcome(StrEnum):
    """What the probe activity tells the workflow it found and recorded."""

    #: The far side holds the operation: the output is the tool's (effect confirmed).
    PRESENT = "present"
    #: Recorded as no effect: the step acts again under its key.
    ABSENT = "absent"
    #: Recorded as still unknown: the step parks for a person.
    INCONCLUSIVE = "inconclusive"
    #: The key was settled meanwhile (e.g. by an operator): the step runs again to read it.
    RESOLVED = "resolved"


class ProbeResult(_Payload):
    """What the probe found and the ledger recorded for it."""

    finding: ProbeOutcome
    verdict: Verdict | None = None
    output: Any = None
