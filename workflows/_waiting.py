"""A call that may wait for a person, and what a waiting run shows its operators: the
parked steps and the calls awaiting approval (queries ``open_effects`` and
``pending_approvals``), and refused input."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..ledger import Verdict


@dataclasses.dataclass(frozen=True)
class Call:
    """A call that may wait in the inbox: a ``run_tool`` step or a ledgered activity."""

    step: str
    tool: str
    #: The arguments exactly as the tool gets them, shown to the approver.
    arguments: Any
    #: A value of the tool's output shape, for the operator's ``effect_confirmed`` command.
    template: Any
    #: Why an operator's output cannot stand as this call's output, or ``None`` if it can.
    misfit: Callable[[Any], str | None]
    #: The tool calls an answer is for (``{"name", "arguments", "tool_call_id"}``).
    tool_calls: list[dict[str, Any]] = dataclasses.field(default_factory=list)


class OpenEffect(BaseModel):
    """A parked step, as query ``open_effects`` shows it to an operator.

    Attributes:
        key: The step's idempotency key.
        step: The step's name (``call N`` for another library's activity).
        tool: The tool (activity) whose effect is unknown.
        capability: Its capability.
        action_id: The action whose effect is unknown: a verdict may name it.
        since: When the step parked (ISO 8601, workflow time).
        why: What the ledger recorded of the failure.
        reconcilers: Actor patterns the worker's policy lets reconcile.
        signature_required: A verdict counts only when signed with one of the actor's
            keys in the policy.
        last_verdict: ``still_unknown`` once someone said so.
        tool_calls: The tool calls the answer is for, each ``{"name", "arguments",
            "tool_call_id"}`` (a LangGraph tool node's pending calls, a call inside it);
            the command's template names them.
        signal_command: The ``temporal workflow signal`` command that answers.
        update_command: The ``temporal workflow update execute`` command that answers
            (the documented path: it says what the ledger recorded).
    """

    model_config = ConfigDict(frozen=True)

    key: str
    step: str
    tool: str
    capability: str
    action_id: str
    since: str
    why: str | None
    reconcilers: list[str] = Field(default_factory=list)
    signature_required: bool = False
    last_verdict: Verdict | None = None
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)
    signal_command: str
    update_command: str
    #: The policy's public keys by actor (not shown: the policy file has them).
    keys: dict[str, list[str]] = Field(default_factory=dict, exclude=True)


class PendingApproval(BaseModel):
    """A call waiting for a person's approval, as query ``pending_approvals`` shows it.

    Attributes:
        key: The call's idempotency key.
        step: The step's name (``call N`` for another library's activity).
        tool: The tool (activity).
        capability: Its capability.
        performer: Who would act (and so may not approve).
        arguments: The call's arguments exactly as the tool will receive them.
        fingerprint: The fingerprint of the request: the decision names it, and holds
            for it alone.
        since: When the call began to wait (ISO 8601, workflow time).
        approvers: Actor patterns the worker's policy lets approve.
        signature_required: A decision counts only when signed with one of the actor's
            keys in the policy.
        approve_command: The command that approves exactly this call.
        reject_command: The command that rejects it.
    """

    model_config = ConfigDict(frozen=True)

    key: str
    step: str
    tool: str
    capability: str
    performer: str
    arguments: Any
    fingerprint: str
    since: str
    approvers: list[str] = Field(default_factory=list)
    signature_required: bool = False
    approve_command: str
    reject_command: str
    #: The policy's public keys by actor (not shown: the policy file has them).
    keys: dict[str, list[str]] = Field(default_factory=dict, exclude=True)


class Rejection(BaseModel):
    """Operator input that was refused, as query ``reconcile_rejections`` shows it.

    Attributes:
        at: When (ISO 8601, workflow time).
        via: ``signal``, or ``ledger`` for input the recording activity refused.
        input: The input as it came.
        reason: Why it was refused.
    """

    at: str
    via: str
    input: Any
    reason: str
