"""What an operator reads: what the queries show of a waiting call (the parked steps and
the calls awaiting approval: queries ``open_effects`` and ``pending_approvals``, and
refused input), the ``temporal`` commands that answer it, and the run's current details
(Markdown, shown by the Temporal UI and ``workflow metadata``)."""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
from collections.abc import Callable, Collection
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from temporalio import workflow

from ..ledger._seam import Decision, Verdict
from ._protocol import (
    APPROVE_UPDATE,
    RECONCILE_SIGNAL,
    RECONCILE_UPDATE,
    ApprovalNeeded,
    UnknownEffect,
)


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


class _Shown(BaseModel):
    """What an operator reads of every waiting call first."""

    model_config = ConfigDict(frozen=True)

    key: str
    step: str
    tool: str
    capability: str


class OpenEffect(_Shown):
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


class PendingApproval(_Shown):
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


@dataclasses.dataclass(frozen=True)
class Where:
    """The run an operator's command goes to."""

    address: str | None
    namespace: str
    workflow_id: str

    def command(self, kind: str, name: str, template: dict[str, Any]) -> str:
        """The ``temporal workflow KIND`` command that sends ``template`` to this run."""
        address = f"--address {shlex.quote(self.address)} " if self.address else ""
        return (
            f"temporal workflow {kind} {address}--namespace {shlex.quote(self.namespace)} "
            f"--workflow-id {shlex.quote(self.workflow_id)} --name {name} "
            f"--input {shlex.quote(json.dumps(template))}"
        )

    def sign_command(self, kind: str, fields: dict[str, Any], *, send: bool = True) -> str:
        """The ``temporal-ledger sign KIND ...`` command that signs a decision for this
        run, and with ``send`` sends it with update ``KIND``."""
        address = f"--address {shlex.quote(self.address)} " if self.address and send else ""
        options = " ".join(
            f"--{name.replace('_', '-')}" + ("" if value is True else f" {shlex.quote(str(value))}")
            for name, value in fields.items()
            if value is not None and value is not False
        )
        return (
            f"temporal-ledger sign {kind} --key-file YOUR-KEY.pem {address}"
            f"--namespace {shlex.quote(self.namespace)} "
            f"--workflow-id {shlex.quote(self.workflow_id)} {options}" + (" --send" if send else "")
        )


def approve_command(
    where: Where, key: str, fingerprint: str, decision: Decision, *, signed: bool = False
) -> str:
    """The command that sends a decision; with ``signed``, one that signs it first."""
    fields = {"key": key, "fingerprint": fingerprint, "decision": decision.value}
    fields |= {"actor": "YOUR-NAME", "basis": "WHY"}
    if not signed:
        return where.command("update execute", APPROVE_UPDATE, fields)
    del fields["decision"]
    return where.sign_command("approve", {**fields, "reject": decision is Decision.REJECT})


def reconcile_command(
    kind: str, where: Where, key: str, action_id: str, output: Any, *, signed: bool = False
) -> str:
    """The command that sends a verdict; with ``signed``, one that signs it first."""
    template: dict[str, Any] = {"key": key, "action_id": action_id}
    template |= {"verdict": "effect_confirmed", "actor": "YOUR-NAME"}
    template |= {"basis": "WHAT-YOU-SAW", "evidence": [], "output": output}
    if not signed:
        name = RECONCILE_SIGNAL if kind == "signal" else RECONCILE_UPDATE
        return where.command(kind, name, template)
    fields = {**template, "output": json.dumps(output)}
    del fields["evidence"]
    if kind != "signal":
        return where.sign_command("reconcile", fields)
    signing = where.sign_command("reconcile", fields, send=False)
    command = where.command(kind, RECONCILE_SIGNAL, {})
    return command[: command.rindex("--input ")] + f'--input "$({signing})"'


def details(approvals: Collection[PendingApproval], parked: Collection[OpenEffect]) -> str:
    """The run's current details: every call awaiting approval and every parked step, each
    with the update's input to paste into the Temporal UI's update dialog and the same
    update as a shell command, in short lines (the UI shows them in a narrow pane)."""
    sections: list[str] = []
    if approvals:
        sections.append(f"### {_count(len(approvals), 'call')} awaiting approval")
        for waiting in approvals:
            sections += [
                f"#### Step {_code(waiting.step)}: tool {_code(waiting.tool)}, "
                f"performer {_code(waiting.performer)}",
                f"key {_code(waiting.key)}  \nfingerprint {_code(waiting.fingerprint)}  \n"
                f"waiting since {_when(waiting.since)}",
                "The arguments, exactly as the tool will get them:",
                _block(json.dumps(waiting.arguments, indent=2, sort_keys=True), "json"),
                *_answer(
                    waiting.approve_command,
                    "Decide",
                    APPROVE_UPDATE,
                    fill_input='your name as `actor`, your reason as `basis` (`"decision": '
                    '"reject"` refuses the call)',
                    fill_options="your key file, your name as `--actor`, your reason as "
                    "`--basis` (`--reject` refuses the call)",
                ),
            ]
    if parked:
        noun = "its effect is" if len(parked) == 1 else "their effects are"
        sections.append(f"### {_count(len(parked), 'step')} parked: {noun} unknown")
        for effect in parked:
            why = f": {_text(effect.why)}" if effect.why else ""
            sections += [
                f"#### Step {_code(effect.step)}: tool {_code(effect.tool)}",
                f"key {_code(effect.key)}  \nparked since {_when(effect.since)}{why}",
                *_asked(effect.tool_calls),
                *_answer(
                    effect.update_command,
                    "Inspect the world, then answer",
                    RECONCILE_UPDATE,
                    fill_input="your name as `actor`, what you saw as `basis`, the `output` "
                    'the effect produced (or `"verdict": "no_effect_confirmed"` and no '
                    "`output`: the step acts again once)",
                    fill_options="your key file, your name as `--actor`, what you saw as "
                    "`--basis`, the `--output` the effect produced (or `--verdict "
                    "no_effect_confirmed` and no `--output`: the step acts again once)",
                ),
            ]
    return "\n\n".join(sections)


def _asked(tool_calls: list[dict[str, Any]]) -> list[str]:
    """The tool calls a parked step's answer is for, if it names them."""
    if not tool_calls:
        return []
    return [
        "The answer is for these tool calls (the template names each by its id):",
        _block(json.dumps(tool_calls, indent=2, sort_keys=True), "json"),
    ]


#: The longest line of a command shown in the details (the UI's pane is narrow).
COMMAND_WIDTH = 64


def _answer(
    command: str, verb: str, update: str, *, fill_input: str, fill_options: str
) -> list[str]:
    """How to answer a waiting call: the update's input for the UI's update dialog, then
    the command that sends the same from a shell; where a signature is required, the
    command that signs it. Read from ``command``, the one the query and the worker's log
    give, so that all of them agree."""
    words = shlex.split(command)
    update_input = _json(words[words.index("--input") + 1] if "--input" in words[:-1] else None)
    if update_input is None:  # signed: only its holder's key can make the input
        return [
            f"{verb}: sign with this command, filled in: {fill_options}. It sends update "
            f"{_code(update)}; without `--send` it prints the update's input, for the "
            "Temporal UI's update dialog (More Actions → Send an Update):",
            _block(_lines(command), "sh"),
        ]
    return [
        f"{verb} with update {_code(update)} (in the Temporal UI: More Actions → Send an "
        f"Update) and this input, filled in: {fill_input}:",
        _block(update_input, "json"),
        "or from a shell:",
        _block(_lines(command), "sh"),
    ]


def _json(text: str | None) -> str | None:
    """JSON ``text`` indented, one value a line; ``None`` if it is not JSON."""
    try:
        return None if text is None else json.dumps(json.loads(text), indent=2)
    except ValueError:
        return None


def _lines(command: str) -> str:
    """``command`` over lines of at most :data:`COMMAND_WIDTH` characters where its
    values allow, each option with its value, a JSON ``--input`` indented. For a command
    of literal words (no ``$(...)``): the shell reads the same words from it, however it
    pairs them."""
    words = shlex.split(command)
    first = next((i for i, word in enumerate(words) if word.startswith("--")), len(words))
    parts = [shlex.join(words[:first])]
    i = first
    while i < len(words):
        option, i = words[i], i + 1
        if i < len(words) and not words[i].startswith("--"):
            value, i = words[i], i + 1
            if option == "--input":
                value = _json(value) or value
            parts.append(f"{option} {shlex.quote(value)}")
        else:
            parts.append(shlex.quote(option))
    # The first option stays on the program's line.
    lines = [" ".join(parts[:2])]
    for part in parts[2:]:
        last_line, part_first_line = lines[-1].rsplit("\n", 1)[-1], part.split("\n", 1)[0]
        if len(f"{last_line} {part_first_line}") <= COMMAND_WIDTH:
            lines[-1] = f"{lines[-1]} {part}"
        else:
            lines.append(f"  {part}")
    return " \\\n".join(lines)


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _when(iso: str) -> str:
    """A workflow timestamp (``workflow.now()``, always UTC) to the second."""
    return datetime.fromisoformat(iso).strftime("%Y-%m-%d %H:%M:%S UTC")


def _code(text: str) -> str:
    """``text`` as a Markdown code span, whatever backticks it holds."""
    text = " ".join(text.splitlines())
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    padding = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{padding}{text}{padding}{fence}"


def _block(text: str, language: str) -> str:
    """``text`` as a fenced Markdown code block, whatever backtick runs it holds."""
    fence = "`" * max(3, max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    return f"{fence}{language}\n{text}\n{fence}"


def _text(text: str) -> str:
    """Free text (an error message) on one Markdown line, shown as written."""
    return re.sub(r"([\\`*_\[\]<>&#|~!])", r"\\\1", " ".join(text.split()))


def pending_approval(call: Call, needed: ApprovalNeeded) -> PendingApproval:
    """What query ``pending_approvals`` shows of a call from now on."""
    info = workflow.info()
    where = Where(needed.address, info.namespace, info.workflow_id)
    key, fingerprint, signed = needed.key, needed.fingerprint, needed.signature_required
    return PendingApproval(
        **needed.model_dump(include=set(PendingApproval.model_fields) - {"arguments"}),
        step=call.step,
        tool=call.tool,
        arguments=call.arguments,
        since=workflow.now().isoformat(),
        approve_command=approve_command(where, key, fingerprint, Decision.APPROVE, signed=signed),
        reject_command=approve_command(where, key, fingerprint, Decision.REJECT, signed=signed),
    )


def open_effect(call: Call, unknown: UnknownEffect) -> OpenEffect:
    """What query ``open_effects`` shows of a parked call from now on."""
    info = workflow.info()
    where = Where(unknown.address, info.namespace, info.workflow_id)

    def command(kind: str) -> str:
        key, action_id, signed = unknown.key, unknown.action_id, unknown.signature_required
        return reconcile_command(kind, where, key, action_id, call.template, signed=signed)

    return OpenEffect(
        **unknown.model_dump(include=set(OpenEffect.model_fields)),
        step=call.step,
        tool=call.tool,
        since=workflow.now().isoformat(),
        why=unknown.error,
        tool_calls=call.tool_calls,
        signal_command=command("signal"),
        update_command=command("update execute"),
    )
