"""``temporal-ledger`` (``python -m temporal_ledger.ledger``): the operator's view of a ledger,
and what it prints for people."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shlex
import sqlite3
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points
from typing import Any

from pydantic_core import to_jsonable_python

from . import _cli_signing
from ._cli_parser import CLOSED_PIPE, ENV_URL, OK, REFUSED, USAGE, build_parser, error
from ._errors import InvalidRequest, LedgerError
from ._ledger import Ledger
from ._models import ActionState, Decision, EffectState, EventType, LedgerEvent, NextOperation
from ._schema import describe_schema, output_template
from ._signatures import DecisionSignature, sign
from ._sqlite import path_from_url
from ._wire import key_from_wire


def _not_a_ledger(url: str, create: bool) -> tuple[str, int] | None:
    """Why the SQLite ledger ``url`` names cannot be opened (and the exit status), or None."""
    path = path_from_url(url).absolute()
    if not path.exists():
        # Opening would create an empty ledger where the operator expected theirs.
        message = f"no ledger at {path} (no such file; --create makes a new ledger)"
        return None if create else (message, USAGE)
    if path.is_dir():
        return f"{path} is a directory, not a ledger file", USAGE
    # Read-only, through a URI that quotes the path ('?' and '#' are legal in names).
    query = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'ledger_meta'"
    try:
        with contextlib.closing(sqlite3.connect(path.as_uri() + "?mode=ro", uri=True)) as conn:
            found = conn.execute(query).fetchone()
    except sqlite3.OperationalError as exc:  # unreadable (permissions), locked
        return f"cannot open {path}: {exc}", REFUSED
    except sqlite3.DatabaseError:  # "file is not a database"
        found = None
    if found is None:
        # Opening would add the ledger's tables to someone else's database.
        return f"{path} is not a ledger (it has no ledger_meta table)", USAGE
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """The ``temporal-ledger`` console script (also ``python -m temporal_ledger.ledger``)."""
    try:
        status = _main(argv)
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
    except BrokenPipeError:
        # The reader went away (``| head``): stop quietly. Point stdout at /dev/null so
        # the interpreter's final flush does not complain on stderr either.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return CLOSED_PIPE
    return status


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)  # exits 2 on bad arguments, and on a bad key or policy file
    if args.command in _OFF_LEDGER:  # on the decider's machine, or asking the run
        try:
            return _OFF_LEDGER[args.command](args)
        except (InvalidRequest, ImportError) as exc:  # ImportError names the [signing] extra
            return error(str(exc), USAGE)
    if not args.db:
        parser.error(f"--db URL is required (or set ${ENV_URL})")
    if not args.db.startswith(("sqlite:///", "postgresql://", "postgres://")):
        parser.error(f"unsupported ledger URL {args.db!r}: use sqlite:///path or postgresql://...")
    try:
        if args.db.startswith("sqlite:///") and (problem := _not_a_ledger(args.db, args.create)):
            return error(*problem)
    except LedgerError as exc:  # a URL that names no file
        parser.error(str(exc))
    try:
        ledger = Ledger.open(args.db)
    except (InvalidRequest, ImportError) as exc:  # a missing folder; no [postgres] extra
        return error(str(exc), USAGE)
    except LedgerError as exc:  # unreachable, locked, unreadable
        return error(str(exc), REFUSED)
    with ledger:
        try:
            return _COMMANDS[args.command](ledger, args)
        except LedgerError as exc:
            # The ledger refused (a reconcile of a known effect, an output that does not
            # fit the tool's schema) or could not be reached. Nothing else was recorded.
            return error(str(exc), REFUSED)


def _replay(args: argparse.Namespace) -> int:
    # Replaying needs Temporal: the workflow side registers the command as an entry
    # point, so this package imports nothing of it (docs/repository.md, Imports).
    found = entry_points(group="temporal_ledger.cli", name="replay")
    if not found:
        raise SystemExit(
            "temporal-ledger: error: the 'replay' command is not installed (entry point "
            "temporal_ledger.cli); reinstall temporal-ledger"
        )
    replay: Callable[..., int] = next(iter(found)).load()
    return replay(args.histories, args.workflow)


def _run_of(events: list[LedgerEvent]) -> dict[str, Any]:
    """The run the key's latest request names (its context, recorded by the worker)."""
    for event in reversed(events):
        context = event.payload.get("context") if event.type == EventType.REQUESTED else None
        if isinstance(context, dict):
            return context
    return {}


def _signature(ledger: Ledger, args: argparse.Namespace) -> DecisionSignature | None:
    """The signature of the decision or verdict recorded here, where a key file is given,
    for the run as given or as the key's latest request names it."""
    if args.key_file is None:
        return None
    named = _run_of(ledger.events(args.key))
    workflow_id = args.workflow_id or named.get("workflow_id")
    namespace = args.namespace or named.get("namespace")
    if not isinstance(workflow_id, str) or not isinstance(namespace, str):
        raise InvalidRequest(
            f"key {args.key!r}: its requests do not name the run they came from; give "
            "--workflow-id and --namespace"
        )
    run = {"workflow_id": workflow_id, "namespace": namespace}
    return sign(args.key_file, _cli_signing.statement(args, args.command, **run))


def _say(args: argparse.Namespace, value: Any, text: str, status: int = OK) -> int:
    """Print ``value`` as JSON with ``--json``, else ``text``; the exit status."""
    print(json.dumps(to_jsonable_python(value), indent=2, sort_keys=True) if args.json else text)
    return status


def _show_key(ledger: Ledger, args: argparse.Namespace) -> int:
    """A key's state and its events; refused when it has no records.

    A key copied from a far side is in its wire form (``order~2Fr1~2Fcharge``); one that
    has no records as given is looked up as the key that wire form spells, and the
    operator is told which key is shown.
    """
    key: str = args.key
    spelled = key_from_wire(key)
    try:
        events = ledger.events(key)
    except InvalidRequest:  # a wire form longer than any key: only the key it spells
        events = []
    if not events and spelled is not None and spelled != key:
        wire = f"{key!r} is the wire form (as a far side holds it) of the key {spelled!r}"
        print(f"temporal-ledger: {wire}", file=sys.stderr)
        key = spelled
        events = ledger.events(key)
    state = ledger.state(key)
    text = f"key {key!r}: no records"
    if events:
        text = f"{show(state, _run_of(events))}\n\n{table(event_rows(events), EVENT_HEADERS)}"
    return _say(args, {"state": state, "events": events}, text, OK if events else REFUSED)


def _list_events(ledger: Ledger, args: argparse.Namespace) -> int:
    """The log, in order."""
    events = ledger.events(args.key, after=args.after, limit=args.limit)
    return _say(args, events, table(event_rows(events), EVENT_HEADERS))


def _list_open_effects(ledger: Ledger, args: argparse.Namespace) -> int:
    """Every effect that is unknown and unresolved."""
    states = ledger.open_effects()
    rows = [[getattr(s, name) for name in _STATE_FIELDS] for s in states]
    return _say(args, states, table(rows, STATE_HEADERS) if states else "no open effects")


def _reconcile(ledger: Ledger, args: argparse.Namespace) -> int:
    """Record an operator's verdict, signed where a key file is given."""
    args.action_id = None
    if args.key_file is not None:
        # The action whose effect is unknown: an expired holder's, or the outcome's.
        state = ledger.state(args.key)
        args.action_id = state.holder_action_id or state.outcome_action_id
        if args.action_id is None:
            return error(f"key {args.key!r}: no execution is recorded to reconcile", REFUSED)
    given = {name: getattr(args, name) for name in ("evidence", "output", "action_id")}
    given["signature"] = _signature(ledger, args)  # a run it cannot name is refused
    try:
        state = asyncio.run(
            ledger.reconcile(args.key, args.verdict, args.actor, args.basis, **given)
        )
    except InvalidRequest as exc:
        # The output does not fit the tool's recorded schema; nothing was recorded.
        schema = ledger.state(args.key).output_schema
        hint = f"\n  --output must fit: {schema_fields(schema)}" if schema else ""
        return error(f"{exc}{hint}", REFUSED)
    effect, next_operation = state.effect, state.next_operation
    text = f"{state.key}: {args.verdict} recorded; effect {effect}, next {next_operation}"
    return _say(args, state, text)


def _approve(ledger: Ledger, args: argparse.Namespace) -> int:
    """Record a person's decision, signed where a key file is given."""
    given = {name: getattr(args, name) for name in ("fingerprint", "actor", "basis")}
    given["decision"] = Decision.REJECT if args.reject else Decision.APPROVE
    given["signature"] = _signature(ledger, args)
    approval = asyncio.run(ledger.approve(args.key, **given))
    text = f"{args.key}: {approval.state} by {approval.actor} ({approval.fingerprint})"
    return _say(args, approval, text)


def _verify(ledger: Ledger, args: argparse.Namespace) -> int:
    """Recompute the chains and invariants; refused when a problem is found."""
    signers, gated = args.policy or (None, [])
    report = ledger.verify(gated=args.gated + gated, signers=signers)
    found = "OK" if report.ok else f"{len(report.problems)} problem(s)"
    problems = "".join(f"\n  - {p}" for p in report.problems)
    text = f"{report.events} events, {report.keys} keys: {found}{problems}"
    return _say(args, report, text, OK if report.ok else REFUSED)


def _compact(ledger: Ledger, args: argparse.Namespace) -> int:
    """Drop old completion bodies, keep tombstones."""
    count = asyncio.run(ledger.compact(older_than=args.older_than))
    return _say(args, {"compacted_keys": count}, f"compacted {count} key(s)")


#: The commands that need no ledger, by name.
_OFF_LEDGER: dict[str, Callable[[argparse.Namespace], int]] = {
    "replay": _replay,
    "keygen": _cli_signing.keygen,
    "public-key": _cli_signing.public_key,
    "sign": _cli_signing.sign_command,
    "waiting": _cli_signing.waiting,
}
#: The commands that read or write a ledger, by name.
_COMMANDS: dict[str, Callable[[Ledger, argparse.Namespace], int]] = {
    "show": _show_key,
    "events": _list_events,
    "open-effects": _list_open_effects,
    "reconcile": _reconcile,
    "approve": _approve,
    "verify": _verify,
    "compact": _compact,
}


# -- what it prints for people: tables of events and states, and ``show``'s account of a
# key, with what the operator does next


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
        signature, dimensions = p.get("signature"), p.get("dimensions")
        why = p.get("error") or p.get("reason")
        parts = [f"{k}={p[k]}" for k in _SUMMARIZED if p.get(k) is not None] + [
            event.type in _DECISIONS and f"fingerprint={str(p.get('fingerprint'))[:16]}…",
            p.get("approval_id") and f"approval={p['approval_id']}",
            isinstance(signature, dict) and f"signed={signature.get('key_id')}",
            isinstance(dimensions, list) and "differs=" + ",".join(dimensions),
            p.get("reused_from_action_id") and f"reused_from={p['reused_from_action_id']}",
            why and str(why)[:60],
        ]
        return " ".join(part for part in parts if part)

    return [[e.seq, e.recorded_at[:23], e.key, e.type, e.action_id, summary(e)] for e in events]


_DECISIONS = (EventType.APPROVED, EventType.APPROVAL_REJECTED)
#: The payload fields an event's row shows as ``name=value``, where present.
_SUMMARIZED = "capability performer status effect verdict decision actor token".split()
EVENT_HEADERS = ("seq", "recorded_at", "key", "type", "action_id", "detail")


STATE_HEADERS = ("key", "status", "effect", "next", "capability", "since", "why")
_STATE_FIELDS = ("key", "status", "effect", "next_operation", "capability", "since", "error")


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
    # A line whose value is empty (None, False) is left out.
    for r in state.reconciliations:
        lines.append(("reconciled", f"{r.verdict} by {r.actor} ({r.basis}) at {r.recorded_at}"))
        lines.append(("reconciled", r.signature and _signed(r.signature, r.actor)))
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
        lines.append(("approval", a.consumed_by and f"consumed by execution {a.consumed_by}"))
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
    confirmed = [r for r in state.reconciliations if r.verdict == "effect_confirmed"]
    if state.effect is EffectState.OBSERVED and state.status == "failed" and confirmed:
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
        return [
            *todo,
            f"  temporal-ledger reconcile {shlex.quote(state.key)} --verdict effect_confirmed "
            f"--actor YOU --basis 'WHAT YOU CHECKED' --output {shlex.quote(output)}",
            "  (or --verdict no_effect_confirmed / still_unknown, without --output)",
        ]
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
