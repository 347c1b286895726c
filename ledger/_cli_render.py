"""What ``temporal-ledger`` prints for people: tables of events and states, and ``show``'s
account of a key, with what the operator does next."""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from ._models import (
    ActionState,
    ActionStatus,
    EffectState,
    EventType,
    LedgerEvent,
    NextOperation,
    Verdict,
)
from ._schema import describe_schema, output_template


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> str:
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def event_rows(events: list[LedgerEvent]) -> list[list[Any]]:
    def summary(event: LedgerEvent) -> str:
        p = event.payload
        if event.compacted:
            return "(compacted)"
        parts = [f"{k}={p[k]}" for k in _SUMMARIZED if p.get(k) is not None]
        if event.type in (EventType.APPROVED, EventType.APPROVAL_REJECTED):
            parts.append(f"fingerprint={str(p.get('fingerprint'))[:16]}…")
        if p.get("approval_id"):
            parts.append(f"approval={p['approval_id']}")
        if isinstance(p.get("signature"), dict):
            parts.append(f"signed={p['signature'].get('key_id')}")
        if isinstance(p.get("dimensions"), list):
            parts.append("differs=" + ",".join(p["dimensions"]))
        if p.get("reused_from_action_id"):
            parts.append(f"reused_from={p['reused_from_action_id']}")
        if p.get("error") or p.get("reason"):
            parts.append(str(p.get("error") or p.get("reason"))[:60])
        return " ".join(parts)

    return [[e.seq, e.recorded_at[:23], e.key, e.type, e.action_id, summary(e)] for e in events]


#: The payload fields an event's row shows as ``name=value``, where present.
_SUMMARIZED = "capability performer status effect verdict decision actor token".split()
EVENT_HEADERS = ("seq", "recorded_at", "key", "type", "action_id", "detail")


def state_rows(states: list[ActionState]) -> list[list[Any]]:
    return [
        [s.key, s.status, s.effect, s.next_operation, s.capability, s.since, s.error]
        for s in states
    ]


STATE_HEADERS = ("key", "status", "effect", "next", "capability", "since", "why")


def show(state: ActionState, run: dict[str, Any] | None = None) -> str:
    """The header of ``show``: where the key stands and what the operator does next.

    ``run``: the context of the key's last request (its workflow and namespace), to name
    the run that waits for an operator's answer."""
    output = "" if state.output is None else json.dumps(state.output)
    lines: list[tuple[str, Any]] = [
        ("key", state.key),
        ("status", _status(state)),
        ("effect", state.effect),
        ("next_operation", state.next_operation),
        *(("todo", line) for line in _todo(state, run or {})),
        ("capability", state.capability and f"{state.capability} by {state.performer or '?'}"),
        ("since", state.since),
        ("error", state.error),
        ("output", output if len(output) <= 200 else output[:184] + "... (see --json)"),
        ("output_schema", state.output_schema and schema_fields(state.output_schema)),
    ]
    for r in state.reconciliations:
        lines.append(("reconciled", f"{r.verdict} by {r.actor} ({r.basis}) at {r.recorded_at}"))
        if r.signature is not None:
            lines.append(("reconciled", _signed(r.signature, r.actor)))
    if (a := state.approval) is not None:
        lines.append(("fingerprint", a.fingerprint))
        if a.actor:
            decided = f"{'approved' if a.state != 'rejected' else 'rejected'} by {a.actor}"
            lines.append(("approval", f"{a.state}: {decided} ({a.basis}) at {a.decided_at}"))
            if a.signature is not None:
                lines.append(("approval", _signed(a.signature, a.actor)))
            else:
                lines.append(("approval", "unsigned: the actor's name is what its sender wrote"))
        else:
            lines.append(("approval", f"{a.state}: waiting for a person's decision"))
        if a.consumed_by:
            lines.append(("approval", f"consumed by execution {a.consumed_by}"))
    lines.append(("events", state.events))
    lines = [(name, value) for name, value in lines if value or name == "events"]
    width = max(len(name) for name, _ in lines) + 1
    before = [None, *(name for name, _ in lines)]
    return "\n".join(
        # Continuation lines (a second "todo") leave the label blank.
        f"{name + ':' if name != previous else '':>{width}} {value}".rstrip()
        for (name, value), previous in zip(lines, before, strict=False)
    )


def _signed(signature: dict[str, Any], actor: str) -> str:
    return (
        f"signed with {actor}'s key {signature.get('key_id')} for workflow "
        f"{signature.get('workflow_id')} in namespace {signature.get('namespace')} "
        "(verify --policy re-checks it)"
    )


def _status(state: ActionState) -> str:
    """The status as what it is: an attempt that failed but whose effect a person (or a
    probe) confirmed succeeded, and says who confirmed it."""
    confirmed = [r for r in state.reconciliations if r.verdict is Verdict.EFFECT_CONFIRMED]
    if state.effect is EffectState.OBSERVED and state.status is ActionStatus.FAILED and confirmed:
        last = confirmed[-1]
        return (
            f"succeeded: the effect was confirmed by {last.actor} at {last.recorded_at} "
            "(the attempt itself reported a failure)"
        )
    return state.status or "(none yet)"


def _todo(state: ActionState, run: dict[str, Any]) -> list[str]:
    """What to do next, in a line; for an unknown effect, also the commands that answer."""
    op = state.next_operation
    if op is NextOperation.RECONCILE_EFFECT:
        output = json.dumps(output_template(state.output_schema)) if state.output_schema else "JSON"
        command = [
            "temporal-ledger reconcile",
            shlex.quote(state.key),
            "--verdict effect_confirmed --actor YOU --basis 'WHAT YOU CHECKED'",
            "--output " + shlex.quote(output),
        ]
        todo = ["find out whether the effect happened, then answer with what you found"]
        workflow_id, namespace = run.get("workflow_id"), run.get("namespace")
        if isinstance(workflow_id, str):
            where = f"--workflow-id {shlex.quote(workflow_id)}"
            if isinstance(namespace, str):
                where = f"--namespace {shlex.quote(namespace)} {where}"
            todo += [
                f"the run {workflow_id!r} waits for it, parked: answer it with its update",
                f"  temporal-ledger waiting {where}   # prints the run's own commands",
                "or record it in the ledger only (the parked run goes on once any verdict is",
                "sent to it: the ledger refuses that one as already resolved, and the step",
                "reads what you recorded):",
            ]
        todo += [
            "  " + " ".join(command),
            "  (or --verdict no_effect_confirmed / still_unknown, without --output)",
        ]
        return todo
    if op is NextOperation.WAIT:
        return [f"an execution ({state.holder_action_id}) holds the key and is live: wait"]
    if op is NextOperation.AWAIT_APPROVAL and state.approval is not None:
        return [
            "the call needs a person's approval of exactly this request; the workflow waits "
            "for update `approve` (see its pending_approvals query), or record it here:",
            f"  temporal-ledger approve {shlex.quote(state.key)} --fingerprint "
            f"{state.approval.fingerprint} --actor YOU --basis 'WHY' [--reject]",
        ]
    return [_NEXT.get(op, "none: the outcome is final, later requests for the key replay it")]


_NEXT = {
    NextOperation.FIX_INPUTS: "failed without effect, final for this key: fix the inputs, "
    "send them under a new key",
    NextOperation.START_ACTION: "none: the key is free, the next request for it runs the tool",
}


def schema_fields(schema: dict[str, Any]) -> str:
    properties = schema.get("properties")
    if not isinstance(properties, dict) or not properties:
        return describe_schema(schema)
    required = set(schema.get("required", []))
    return ", ".join(
        f"{name} ({describe_schema(sub, schema)}{'' if name in required else ', optional'})"
        for name, sub in properties.items()
    )


def print_json(value: Any) -> None:
    """``value`` as JSON, any records in it as their JSON form."""
    print(json.dumps(value, indent=2, sort_keys=True, default=_json_form))


def _json_form(value: Any) -> Any:
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else str(value)
