"""The ledger's data: requests, authority, results, states and events."""

from __future__ import annotations

import fnmatch
import os
import re
import threading
import time
from enum import StrEnum
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ._canonical import check_json, check_text, combine, fingerprint_dimensions
from ._errors import InvalidRequest


class EventType(StrEnum):
    """The types of the records in ``ledger_events``."""

    REQUESTED = "action.requested"
    AUTHORIZATION_REFUSED = "action.authorization_refused"
    REPLAY_REFUSED = "action.replay_refused"
    DEFERRED = "action.deferred"
    STARTED = "action.execution_started"
    COMPLETED = "action.completed"
    LATE_COMPLETION = "action.late_completion"
    RECONCILED = "action.reconciled"
    RECONCILE_REFUSED = "action.reconcile_refused"
    COMPACTED = "action.compacted"
    #: A person's decision on a call that needs approval, bound to its fingerprint.
    APPROVED = "action.approved"
    APPROVAL_REJECTED = "action.approval_rejected"
    #: A decision that was not taken (no call awaits it, another fingerprint, self-approval).
    APPROVAL_REFUSED = "action.approval_refused"


#: What the execution reported. A ``Literal``, not an enum: users compare a result's status
#: with the strings the records and the CLI show, and mypy checks them.
ActionStatus = Literal["succeeded", "failed", "denied"]
#: Every status.
STATUSES: tuple[ActionStatus, ...] = get_args(ActionStatus)


class EffectState(StrEnum):
    """What is known about the effect in the world, independent of the report."""

    NONE = "none"
    UNKNOWN = "unknown"
    OBSERVED = "observed"


class NextOperation(StrEnum):
    """What a caller holding this key should do next."""

    START_ACTION = "start_action"
    WAIT = "wait"
    RECONCILE_EFFECT = "reconcile_effect"
    FIX_INPUTS = "fix_inputs"
    #: The call needs a person's approval of its exact request before it may act.
    AWAIT_APPROVAL = "await_approval"
    NONE = "none"


#: An operator's answer after inspecting the world. A ``Literal``, not an enum: users write
#: verdicts as the strings the wire, the CLI and the records carry, and mypy checks them.
Verdict = Literal["effect_confirmed", "no_effect_confirmed", "still_unknown"]
#: Every verdict, in the order the CLI and the error messages offer them.
VERDICTS: tuple[Verdict, ...] = get_args(Verdict)


class ApprovalState(StrEnum):
    """Where the approval of a call that needs one stands."""

    REQUESTED = "requested"
    APPROVED = "approved"
    REJECTED = "rejected"
    #: An execution took it; the key's next execution needs an approval of its own.
    CONSUMED = "consumed"


class FailureType(StrEnum):
    """The ``error_type`` of a failure the ledger itself records (an adapter's failure
    records its exception's class name)."""

    #: A claim whose lease expired before its started marker: the adapter never ran.
    ABANDONED = "Abandoned"
    #: A started execution whose lease expired with no outcome: the effect is unknown.
    INTERRUPTED = "Interrupted"
    #: The adapter raised ``NoEffect``: it knows nothing happened.
    NO_EFFECT = "NoEffect"
    #: The adapter acted and returned what the storage cannot record.
    UNRECORDABLE_OUTPUT = "UnrecordableOutput"
    #: The authority lacks the capability (DENIED, no effect).
    DENIED = "Denied"
    #: The current state is not the one the operation was planned against.
    PRECONDITION_DRIFT = "PreconditionDrift"
    #: The connection was lost before the adapter ran; the claim is released.
    LEDGER_UNAVAILABLE = "LedgerUnavailable"
    #: The call needs an approval and has none (DENIED, no effect).
    APPROVAL_REQUIRED = "ApprovalRequired"
    #: The call's approval was rejected (DENIED, no effect).
    APPROVAL_REJECTED = "ApprovalRejected"


class Decision(StrEnum):
    """An approver's answer to a call that needs approval."""

    APPROVE = "approve"
    REJECT = "reject"


_CAPABILITY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*(\.[A-Za-z_][A-Za-z0-9_-]*)*$")


# OS randomness drawn 4 KiB at a time. One ``os.urandom`` call per id would release the
# GIL on every request, and the ledger's writer thread would take it until its next
# statement; a forked child starts with an empty pool, never its parent's bytes.
_pool = bytearray()
_pool_lock = threading.Lock()


def _forked() -> None:
    global _pool_lock
    _pool_lock = threading.Lock()
    _pool.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


def new_action_id() -> str:
    """A UUIDv7 in hex: 48 bits of Unix milliseconds, then 74 random bits.

    Time-ordered, so the unique index of requests (``ledger_events_one_request``) grows
    at its end, where its pages are already cached, instead of at a random leaf of a
    large ledger.
    """
    with _pool_lock:
        if len(_pool) < 10:
            _pool[:] = os.urandom(4096)
        random = int.from_bytes(_pool[:10], "big")
        del _pool[:10]
    value = (time.time_ns() // 1_000_000) << 80 | random
    value = value & ~(0xF << 76) | 0x7 << 76  # version 7
    value = value & ~(0x3 << 62) | 0x2 << 62  # RFC 4122 variant
    return f"{value:032x}"


def validate_key(key: Any) -> str:
    """An idempotency key: 1 to 255 printable characters."""
    if not isinstance(key, str):
        raise InvalidRequest(f"key must be a string, not {type(key).__name__}")
    if not 1 <= len(key) <= 255:
        raise InvalidRequest(f"key must be 1 to 255 characters long, got {len(key)}")
    if not key.isprintable():
        raise InvalidRequest(f"key {key!r} contains non-printable characters")
    return key


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ActionRequest(_Frozen):
    """One submission of an intended operation under an idempotency key.

    ``key``, ``capability``, ``instruction``, ``payload``, ``precondition`` and
    ``performer`` are the operation's identity (fingerprinted); ``action_id`` names
    this submission and ``context`` is recorded but never fingerprinted.
    Construction with bad values raises :class:`InvalidRequest`.
    """

    key: str
    capability: str
    instruction: str
    payload: dict[str, Any] = Field(default_factory=dict)
    precondition: Any = None
    performer: str
    action_id: str = Field(default_factory=new_action_id)
    context: dict[str, Any] = Field(default_factory=dict)
    #: The JSON schema of the output the operation returns (recorded, never
    #: fingerprinted): an operator's ``effect_confirmed`` output must fit it.
    output_schema: dict[str, Any] | None = None

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise InvalidRequest(_describe(exc)) from exc

    @classmethod
    def parse(cls, data: Any) -> ActionRequest:
        """Validate a mapping (or an instance) into a request.

        Args:
            data: The request's fields, or a request.

        Returns:
            The validated request.

        Raises:
            InvalidRequest: A field is missing or holds a value the ledger refuses.
        """
        if isinstance(data, cls):
            # Validated when it was built; the JSON values are still checked, because
            # their contents can be changed after construction.
            texts = (data.key, data.capability, data.instruction, data.performer, data.action_id)
            if not all(isinstance(text, str) for text in texts) or not _CAPABILITY.match(texts[1]):
                return cls(**data.model_dump())  # built with model_construct: validate
            validate_key(data.key)
            for name in ("payload", "precondition", "context", "output_schema"):
                check_json(getattr(data, name), where=name)
            for name in ("instruction", "performer", "action_id"):
                check_text(getattr(data, name), where=name, raw=name == "action_id")
            if not isinstance(data.payload, dict):
                raise InvalidRequest("payload must be a JSON object")
            return data
        if not isinstance(data, dict):
            raise InvalidRequest(
                f"a request must be an ActionRequest or a dict, not {type(data).__name__}"
            )
        return cls(**data)

    @field_validator("payload", "precondition", "context", "output_schema", mode="before")
    @classmethod
    def _exact_json(cls, value: Any, info: Any) -> Any:
        # Checked before pydantic coerces anything: a set or a tuple must be refused,
        # not turned into a list behind the caller's back.
        check_json(value, where=info.field_name)
        return value

    _key = field_validator("key", mode="before")(staticmethod(validate_key))

    @field_validator("capability", mode="before")
    @classmethod
    def _capability(cls, value: Any) -> str:
        if not isinstance(value, str) or not _CAPABILITY.match(value):
            raise ValueError(f"capability must be a dotted name like 'files.append', got {value!r}")
        return value

    @field_validator("instruction", mode="before")
    @classmethod
    def _instruction(cls, value: Any) -> str:
        if not isinstance(value, str):
            raise ValueError(f"instruction must be a string, not {type(value).__name__}")
        check_text(value, where="instruction")
        return value

    @field_validator("performer", "action_id", mode="before")
    @classmethod
    def _non_empty(cls, value: Any, info: Any) -> Any:
        if isinstance(value, str) and len(value) > 255:
            raise ValueError(f"{info.field_name} must be at most 255 characters")
        # An action id is a column of its own in both backends: no NUL there.
        check_text(value, where=info.field_name, raw=info.field_name == "action_id", required=True)
        return value

    def fingerprint(self) -> str:
        """The ``action-fingerprint-v1`` of this request: what an approval names.

        Returns:
            The fingerprint: one SHA-256 over those of the five fingerprinted fields.
        """
        return combine(fingerprint_dimensions(self.identity()))

    def identity(self) -> dict[str, Any]:
        """The fingerprinted fields.

        Returns:
            ``capability``, ``instruction``, ``payload``, ``precondition`` and
            ``performer``, by name.
        """
        # Spelled out, not a comprehension over DIMENSIONS: every call builds it twice, and
        # the literal measured about 1.5 us faster (timeit, issue 42).
        return {
            "capability": self.capability,
            "instruction": self.instruction,
            "payload": self.payload,
            "precondition": self.precondition,
            "performer": self.performer,
        }


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "request"
        message = err["msg"].removeprefix("Value error, ")
        parts.append(f"{where}: {message}" if not message.startswith(where) else message)
    return "invalid request: " + "; ".join(parts)


class Authority(_Frozen):
    """Who is asking now, and which capabilities (glob patterns) they hold.

    Args:
        principal: Who acts (a performer's name).
        capabilities: The capability glob patterns they hold (e.g. ``files.*``).

    Raises:
        InvalidRequest: A name or pattern the ledger cannot record.
    """

    principal: str
    capabilities: tuple[str, ...] = ()

    def __init__(self, principal: str, capabilities: Any = (), **data: Any) -> None:
        try:
            super().__init__(  # type: ignore[call-arg]  # pydantic plugin: _Frozen's fields only
                principal=principal, capabilities=tuple(capabilities), **data
            )
        except ValidationError as exc:
            raise InvalidRequest(_describe(exc)) from exc

    @field_validator("principal", "capabilities", mode="after")
    @classmethod
    def _recordable(cls, value: Any, info: Any) -> Any:
        for text in (value,) if isinstance(value, str) else value:
            check_text(text, where=info.field_name)
        return value

    def allows(self, capability: str) -> bool:
        """Whether a held pattern grants ``capability``.

        Args:
            capability: A dotted capability name.

        Returns:
            ``True`` if any of the capabilities' patterns matches it.
        """
        return any(fnmatch.fnmatchcase(capability, pattern) for pattern in self.capabilities)


def may_act_again(
    *, status: ActionStatus | str, effect: EffectState | str, retryable: bool, retry_safe: bool
) -> bool:
    """Whether a key whose outcome is recorded may cause its effect again.

    After a denial (it had no effect), a retryable no-effect failure or an operator's
    ``no_effect_confirmed`` (both recorded as ``retryable``), and an unknown effect of a
    call whose far side deduplicates by the key (``retry_safe``). Anything else is final
    for the key: a context that deserves a new decision deserves a new key.
    """
    if status == "denied" or retryable:
        return True
    return retry_safe and effect == EffectState.UNKNOWN


class ActionResult(_Frozen):
    """The outcome one submission received (fresh, or replayed from the record)."""

    action_id: str
    key: str
    status: ActionStatus
    effect: EffectState
    output: Any = None
    error: str | None = None
    error_type: str | None = None
    replayed: bool = False
    reused_from_action_id: str | None = None
    #: The same key may act again (a retryable no-effect failure, a confirmed absence).
    retryable: bool = False
    retry_after: float | None = None
    #: The operator's verdict, when the effect was reconciled.
    verdict: Verdict | None = None
    #: The body was compacted away: status and identity remain, output and error do not.
    compacted: bool = False

    @property
    def ok(self) -> bool:
        return self.status == "succeeded"


class Reconciliation(_Frozen):
    verdict: Verdict
    actor: str
    basis: str
    evidence: list[Any] = Field(default_factory=list)
    output: Any = None
    recorded_at: str
    #: Its author's proof (``DecisionSignature`` fields), if the verdict was signed.
    signature: dict[str, Any] | None = None


class Approval(_Frozen):
    """Where a call that needs approval stands, bound to the fingerprint of its request.

    ``state`` is ``requested`` (waiting for a person), ``approved``, ``rejected``, or
    ``consumed`` (an execution took it: the next execution needs a new approval).
    """

    state: ApprovalState
    fingerprint: str
    capability: str | None = None
    performer: str | None = None
    approval_id: str | None = None
    actor: str | None = None
    basis: str | None = None
    decided_at: str | None = None
    consumed_by: str | None = None
    #: Its author's proof (``DecisionSignature`` fields), if the decision was signed.
    signature: dict[str, Any] | None = None


class ActionState(_Frozen):
    """A key's history projected: what happened and what to do next."""

    key: str
    status: ActionStatus | None = None
    effect: EffectState = EffectState.NONE
    next_operation: NextOperation = NextOperation.START_ACTION
    capability: str | None = None
    performer: str | None = None
    fingerprint: str | None = None
    fingerprint_version: str | None = None
    original_action_id: str | None = None
    outcome_action_id: str | None = None
    holder_action_id: str | None = None
    lease_expires_at: float | None = None
    error: str | None = None
    output: Any = None
    since: str | None = None
    retry_safe: bool = False
    #: The JSON schema the execution's output must fit (see ``ActionRequest``).
    output_schema: dict[str, Any] | None = None
    reconciliations: list[Reconciliation] = Field(default_factory=list)
    #: The approval of the key's call, when it needs one (see :class:`Approval`).
    approval: Approval | None = None
    events: int = 0


class LedgerEvent(_Frozen):
    """One record of the append-only log."""

    seq: int
    key: str
    action_id: str | None
    type: str
    payload: dict[str, Any]
    recorded_at: str
    body_hash: str
    prev_hash: str
    hash: str

    @property
    def compacted(self) -> bool:
        return self.payload.get("compacted") is True and len(self.payload) == 1


class ExecutionContext(_Frozen):
    """What an adapter receives beside the request.

    Attributes:
        key: The idempotency key, for a far side that dedupes by it.
        action_id: This submission's id.
        fencing_token: The token of the claim the adapter acts under; ``0`` for a
            retry-safe call, which acts before it records anything and holds no claim.
    """

    key: str
    action_id: str
    fencing_token: int
