"""What an operator reads: the ``temporal`` commands that answer a waiting call, and the
run's current details (Markdown, shown by the Temporal UI and ``workflow metadata``)."""

from __future__ import annotations

import dataclasses
import json
import shlex
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..activities._protocol import APPROVE_UPDATE, RECONCILE_SIGNAL, RECONCILE_UPDATE
from ..ledger import Decision, Verdict

if TYPE_CHECKING:
    from ._inbox import OpenEffect, PendingApproval


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
            f"--{name.replace('_', '-')} {shlex.quote(str(value))}"
            if value is not True
            else f"--{name.replace('_', '-')}"
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
    if signed:
        return where.sign_command(
            "approve",
            {
                "key": key,
                "fingerprint": fingerprint,
                "actor": "YOUR-NAME",
                "basis": "WHY",
                "reject": decision is Decision.REJECT,
            },
        )
    template = {
        "key": key,
        "fingerprint": fingerprint,
        "decision": decision.value,
        "actor": "YOUR-NAME",
        "basis": "WHY",
    }
    return where.command("update execute", APPROVE_UPDATE, template)


def reconcile_command(
    kind: str, where: Where, key: str, action_id: str, output: Any, *, signed: bool = False
) -> str:
    """The command that sends a verdict; with ``signed``, one that signs it first."""
    if signed:
        fields = {
            "key": key,
            "action_id": action_id,
            "verdict": Verdict.EFFECT_CONFIRMED.value,
            "actor": "YOUR-NAME",
            "basis": "WHAT-YOU-SAW",
            "output": json.dumps(output),
        }
        if kind != "signal":
            return where.sign_command("reconcile", fields)
        signing = where.sign_command("reconcile", fields, send=False)
        command = where.command(kind, RECONCILE_SIGNAL, {})
        return command[: command.rindex("--input ")] + f'--input "$({signing})"'
    template = {
        "key": key,
        "action_id": action_id,
        "verdict": Verdict.EFFECT_CONFIRMED.value,
        "actor": "YOUR-NAME",
        "basis": "WHAT-YOU-SAW",
        "evidence": [],
        "output": output,
    }
    name = RECONCILE_SIGNAL if kind == "signal" else RECONCILE_UPDATE
    return where.command(kind, name, template)


def details(approvals: Iterable[PendingApproval], parked: Iterable[OpenEffect]) -> str:
    """The run's current details: every call awaiting approval and every parked step."""
    approvals, parked = list(approvals), list(parked)
    lines: list[str] = []
    if approvals:
        lines += [f"**{len(approvals)} call(s) awaiting approval**", ""]
        for waiting in approvals:
            lines += [
                f"- step `{waiting.step}` (tool `{waiting.tool}`, performer "
                f"`{waiting.performer}`), key `{waiting.key}`, since {waiting.since}",
                f"  arguments: `{json.dumps(waiting.arguments, sort_keys=True)}`",
                f"  fingerprint: `{waiting.fingerprint}`",
                "  approve (or reject) exactly this call:",
                f"  `{waiting.approve_command}`",
            ]
    if parked:
        if lines:
            lines.append("")
        lines += [f"**{len(parked)} step(s) parked: the effect is unknown**", ""]
        for effect in parked:
            lines += [
                f"- step `{effect.step}` (tool `{effect.tool}`), key `{effect.key}`, "
                f"since {effect.since}: {effect.why}",
                "  inspect the world, then answer:",
                f"  `{effect.update_command}`",
            ]
    return "\n".join(lines)
