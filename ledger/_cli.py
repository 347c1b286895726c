"""``temporal-ledger`` (``python -m temporal_ledger.ledger``): the operator's view of a ledger."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import sqlite3
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, TypeVar

from . import _cli_signing, _cli_waiting
from ._errors import InvalidRequest, LedgerError
from ._ledger import Ledger
from ._models import (
    ActionState,
    ActionStatus,
    Decision,
    EffectState,
    EventType,
    LedgerEvent,
    NextOperation,
    Verdict,
    validate_key,
)
from ._schema import describe_schema, output_template
from ._signatures import (
    decision_statement,
    read_policy,
    read_private_key,
    sign,
    verdict_statement,
)
from ._sqlite import path_from_url
from ._template_text import refuse_placeholders, refuse_probe_name
from ._wire import key_from_wire

ENV_URL = "LEDGER_URL"
# Exit statuses: see the parser's epilog and docs/operating.md's "The operator CLI".
OK, REFUSED, USAGE = 0, 1, 2
#: Output cut off by a closed pipe (``... | head``): what a process killed by SIGPIPE reports.
CLOSED_PIPE = 128 + 13


def _options(*, inherited: bool) -> argparse.ArgumentParser:
    """--db, --json and --create, accepted before the command and after it.

    The command's copy defaults to SUPPRESS, so an option given only before the
    command is not overwritten by the command's (absent) copy.
    """
    options = argparse.ArgumentParser(add_help=False)

    def default(value: Any) -> Any:
        return argparse.SUPPRESS if inherited else value

    options.add_argument(
        "--db",
        default=default(os.environ.get(ENV_URL)),
        help=f"ledger URL: sqlite:///path or postgresql://... (default: ${ENV_URL})",
    )
    options.add_argument(
        "--json", action="store_true", default=default(False), help="machine-readable output"
    )
    options.add_argument(
        "--create",
        action="store_true",
        default=default(False),
        help="create the SQLite ledger if its file does not exist (otherwise: exit 2)",
    )
    return options


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="temporal-ledger",
        description="Inspect, reconcile, approve, verify and compact a tool-call ledger; "
        "make keys and sign decisions.",
        epilog="Exit status: 0 done; 1 refused or failed (a refused reconcile, a failed "
        "verify, show of a key with no records, an unreachable ledger); 2 bad usage "
        "(arguments, URL, a missing file without --create, a file that is not a ledger); 141 "
        "output cut off by a closed pipe (| head). "
        "Options may go before or after the command.",
        parents=[_options(inherited=False)],
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = [_options(inherited=True)]

    _add_reading_commands(commands, common)
    _add_answering_commands(commands, common)
    _add_upkeep_commands(commands, common)
    _cli_signing.add_commands(
        commands,
        key=_key,
        non_empty=_non_empty,
        person=_person,
        persons_words=_persons_words,
        json_value=_json_value,
    )
    _cli_waiting.add_command(commands)

    replay = commands.add_parser(
        "replay", help="replay exported workflow histories against your workflow code"
    )
    replay.add_argument(
        "histories", nargs="+", type=Path, help="JSON files from `temporal workflow show -o json`"
    )
    replay.add_argument(
        "--workflow",
        action="append",
        default=[],
        metavar="MODULE:CLASS",
        help="a workflow class to replay with (repeatable)",
    )
    return parser


def _add_reading_commands(commands: Any, common: list[argparse.ArgumentParser]) -> None:
    """show, events, open-effects: what the ledger holds."""
    show = commands.add_parser("show", parents=common, help="a key's state and its events")
    show.add_argument(
        "key",
        type=_key_or_wire_form,
        help="the key, or its wire form as a far side holds it (~2F for /)",
    )

    events = commands.add_parser("events", parents=common, help="the log, in order")
    events.add_argument("--key", type=_key, help="only this key's events")
    events.add_argument("--after", type=int, default=0, help="only events after this seq")
    events.add_argument("--limit", type=_positive_int, help="at most this many events")

    commands.add_parser(
        "open-effects", parents=common, help="every effect that is unknown and unresolved"
    )


def _add_answering_commands(commands: Any, common: list[argparse.ArgumentParser]) -> None:
    """reconcile, approve: a person's answer recorded in the ledger alone."""
    reconcile = commands.add_parser(
        "reconcile", parents=common, help="record an operator's verdict"
    )
    reconcile.add_argument("key", type=_key)
    reconcile.add_argument("--verdict", required=True, choices=[v.value for v in Verdict])
    reconcile.add_argument("--actor", required=True, type=_person, help="who inspected the world")
    reconcile.add_argument(
        "--basis", required=True, type=_persons_words, help="what the verdict rests on"
    )
    reconcile.add_argument(
        "--evidence", action="append", default=[], help="a reference to evidence (repeatable)"
    )
    reconcile.add_argument(
        "--output",
        type=_json_value,
        help="the observed output, as JSON (effect_confirmed; must fit the tool's output "
        "schema when one was recorded)",
    )
    _signing_options(reconcile)

    approve = commands.add_parser(
        "approve",
        parents=common,
        help="record a person's decision on the call awaiting approval under a key",
    )
    approve.add_argument("key", type=_key)
    approve.add_argument(
        "--fingerprint",
        required=True,
        type=_non_empty,
        help="the fingerprint of the request you were shown (`show KEY` prints it)",
    )
    approve.add_argument("--actor", required=True, type=_person, help="who decides")
    approve.add_argument(
        "--basis", required=True, type=_persons_words, help="what the decision rests on"
    )
    approve.add_argument(
        "--reject", action="store_true", help="reject the call instead: it ends with no effect"
    )
    _signing_options(approve)


def _add_upkeep_commands(commands: Any, common: list[argparse.ArgumentParser]) -> None:
    """verify, compact: the ledger's integrity and size."""
    verify = commands.add_parser(
        "verify", parents=common, help="recompute hash chains and invariants"
    )
    verify.add_argument(
        "--gated",
        action="append",
        default=[],
        metavar="CAPABILITY",
        help="a capability pattern whose every execution must hold an approval (repeatable)",
    )
    verify.add_argument(
        "--policy",
        type=Path,
        help="the workers' policy file: re-check every recorded decision's signature "
        "against its [keys] (and hold executions of its [approve] capabilities to approvals)",
    )

    compact = commands.add_parser(
        "compact", parents=common, help="drop old completion bodies, keep tombstones"
    )
    compact.add_argument(
        "--older-than",
        type=_non_negative_float,
        required=True,
        metavar="SECONDS",
        help="compact final outcomes settled more than this many seconds ago",
    )


def _signing_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--key-file",
        type=Path,
        help="sign it with your private key (PEM); the key never leaves this machine",
    )
    parser.add_argument(
        "--workflow-id",
        type=_non_empty,
        help="with --key-file: the run it is signed for (default: the one the key's "
        "latest request names)",
    )
    parser.add_argument(
        "--namespace",
        type=_non_empty,
        help="with --key-file: the run's namespace (default: the one the key's latest "
        "request names)",
    )


def _key(text: str) -> str:
    try:
        return validate_key(text)
    except InvalidRequest as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _key_or_wire_form(text: str) -> str:
    """A key, or a key's wire form, which may be longer than any key (``~XX`` per byte)."""
    if key_from_wire(text) is not None:
        return text
    return _key(text)


def _non_empty(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def _persons_words(text: str) -> str:
    """A person's own words: not empty, and no template's placeholder left in."""
    try:
        refuse_placeholders(value=_non_empty(text))
    except InvalidRequest as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("value ")) from None
    return text


def _person(text: str) -> str:
    """A person's name: their own words, and not a tool's probe."""
    try:
        refuse_probe_name(text)
    except InvalidRequest as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("actor ")) from None
    return _persons_words(text)


N = TypeVar("N", int, float)


def _positive_int(text: str) -> int:
    return _number(text, int, "a whole number", lambda v: v > 0, "a positive whole number")


def _non_negative_float(text: str) -> float:
    return _number(text, float, "a number of seconds", lambda v: v >= 0, ">= 0 seconds")


def _number(
    text: str, kind: Callable[[str], N], called: str, fits: Callable[[N], bool], must_be: str
) -> N:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not {called}: {text!r}") from None
    if not fits(value):
        raise argparse.ArgumentTypeError(f"must be {must_be}, got {text!r}")
    return value


def _json_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON ({exc.msg}): {text!r}") from None


def _table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> str:
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _event_rows(events: list[LedgerEvent]) -> list[list[Any]]:
    def summary(event: LedgerEvent) -> str:
        p = event.payload
        if event.compacted:
            return "(compacted)"
        parts = [
            f"{k}={p[k]}"
            for k in (
                "capability",
                "performer",
                "status",
                "effect",
                "verdict",
                "decision",
                "actor",
                "token",
            )
            if p.get(k) is not None
        ]
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

    return [
        [e.seq, e.recorded_at[:23], e.key, e.type, e.action_id or "", summary(e)] for e in events
    ]


_EVENT_HEADERS = ("seq", "recorded_at", "key", "type", "action_id", "detail")


def _state_rows(states: list[ActionState]) -> list[list[Any]]:
    return [
        [
            s.key,
            s.status or "",
            s.effect,
            s.next_operation,
            s.capability or "",
            s.since or "",
            s.error or "",
        ]
        for s in states
    ]


_STATE_HEADERS = ("key", "status", "effect", "next", "capability", "since", "why")


def _show(state: ActionState, run: dict[str, Any] | None = None) -> str:
    """The header of ``show``: where the key stands and what the operator does next.

    ``run``: the context of the key's last request (its workflow and namespace), to name
    the run that waits for an operator's answer."""
    lines: list[tuple[str, str]] = [
        ("key", state.key),
        ("status", _status(state)),
        ("effect", state.effect),
        ("next_operation", state.next_operation),
    ]
    lines += [("todo", line) for line in _todo(state, run or {})]
    if state.capability:
        lines.append(("capability", f"{state.capability} by {state.performer or '?'}"))
    if state.since:
        lines.append(("since", state.since))
    if state.error:
        lines.append(("error", state.error))
    if state.output is not None:
        lines.append(("output", _short(json.dumps(state.output), 200)))
    if state.output_schema:
        lines.append(("output_schema", _schema_fields(state.output_schema)))
    for r in state.reconciliations:
        lines.append(("reconciled", f"{r.verdict} by {r.actor} ({r.basis}) at {r.recorded_at}"))
        if r.signature is not None:
            lines.append(("reconciled", _signed(r.signature, r.actor)))
    if state.approval is not None:
        a = state.approval
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
    lines.append(("events", str(state.events)))
    width = max(len(name) for name, _ in lines)
    shown: list[str] = []
    previous = None
    for name, value in lines:
        # Continuation lines (a second "todo") leave the label blank.
        label = f"{name:>{width}}:" if name != previous else " " * (width + 1)
        shown.append(f"{label} {value}".rstrip())
        previous = name
    return "\n".join(shown)


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
    if op is NextOperation.FIX_INPUTS:
        return [
            "failed without effect, final for this key: fix the inputs, send them under a new key"
        ]
    if op is NextOperation.START_ACTION:
        return ["none: the key is free, the next request for it runs the tool"]
    return ["none: the outcome is final, later requests for the key replay it"]


def _schema_fields(schema: dict[str, Any]) -> str:
    properties = schema.get("properties")
    if not isinstance(properties, dict) or not properties:
        return describe_schema(schema)
    required = set(schema.get("required", []))
    return ", ".join(
        f"{name} ({describe_schema(sub, schema)}{'' if name in required else ', optional'})"
        for name, sub in properties.items()
    )


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 16] + "... (see --json)"


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=True, default=str))


def _not_a_ledger(path: Path) -> tuple[str, int] | None:
    """Why the existing ``path`` cannot be opened as a ledger (and the exit status), or None."""
    if path.is_dir():
        return f"{path} is a directory, not a ledger file", USAGE
    try:
        # Read-only, through a URI that quotes the path ('?' and '#' are legal in names).
        conn = sqlite3.connect(path.as_uri() + "?mode=ro", uri=True)
        try:
            found = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'ledger_meta'"
            ).fetchone()
        finally:
            conn.close()
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


def _error(message: str, status: int) -> int:
    print(f"temporal-ledger: error: {message}", file=sys.stderr)
    return status


def _plugged_command(name: str) -> Callable[..., int]:
    """A command another part of the package registers (entry point group
    ``temporal_ledger.cli``)."""
    found = entry_points(group="temporal_ledger.cli", name=name)
    if not found:
        raise SystemExit(
            f"temporal-ledger: error: the {name!r} command is not installed (entry point "
            "temporal_ledger.cli); reinstall temporal-ledger"
        )
    command: Callable[..., int] = next(iter(found)).load()
    return command


def _main(argv: Sequence[str] | None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)  # exits 2 on bad arguments
    if args.command == "replay":
        # Replaying needs Temporal: the workflow side registers the command as an entry
        # point, so this package imports nothing of it (docs/repository.md, Imports).
        return _plugged_command("replay")(args.histories, args.workflow)
    if args.command in ("keygen", "public-key", "sign"):
        return _cli_signing.run(args)  # on the decider's machine: no ledger needed
    if args.command == "waiting":
        return _cli_waiting.run(args)  # asks the run, not the ledger
    try:
        # Files named by the arguments are read before the ledger is opened: a bad one
        # is bad usage, and nothing is recorded.
        args.private_key = (
            read_private_key(args.key_file) if getattr(args, "key_file", None) else None
        )
        args.policy_read = read_policy(args.policy) if getattr(args, "policy", None) else None
    except (InvalidRequest, ImportError) as exc:  # ImportError names the [signing] extra
        return _error(str(exc), USAGE)
    if not args.db:
        parser.error(f"--db URL is required (or set ${ENV_URL})")
    if not args.db.startswith(("sqlite:///", "postgresql://", "postgres://")):
        parser.error(f"unsupported ledger URL {args.db!r}: use sqlite:///path or postgresql://...")
    if args.db.startswith("sqlite:///"):
        try:
            path = path_from_url(args.db).absolute()
        except LedgerError as exc:
            parser.error(str(exc))
        if not path.exists():
            if not args.create:
                # Opening would create an empty ledger where the operator expected theirs.
                return _error(
                    f"no ledger at {path} (no such file; --create makes a new ledger)", USAGE
                )
        elif problem := _not_a_ledger(path):
            return _error(*problem)
    try:
        ledger = Ledger.open(args.db)
    except InvalidRequest as exc:  # e.g. a missing folder, a newer schema
        return _error(str(exc), USAGE)
    except ImportError as exc:  # postgresql:// without the [postgres] extra
        return _error(str(exc), USAGE)
    except LedgerError as exc:  # unreachable, locked, unreadable
        return _error(str(exc), REFUSED)
    with ledger:
        try:
            return _COMMANDS[args.command](ledger, args)
        except LedgerError as exc:
            # The ledger refused (a reconcile of a known effect, an output that does not
            # fit the tool's schema) or could not be reached. Nothing else was recorded.
            return _error(str(exc), REFUSED)


def _signed_for(ledger: Ledger, args: argparse.Namespace) -> dict[str, str]:
    """The run a decision recorded here is signed for: as given, or as the key's latest
    request names it (its context, recorded by the worker)."""
    named: dict[str, Any] = {}
    for event in reversed(ledger.events(args.key)):
        context = event.payload.get("context") if event.type == EventType.REQUESTED else None
        if isinstance(context, dict):
            named = context
            break
    workflow_id = args.workflow_id or named.get("workflow_id")
    namespace = args.namespace or named.get("namespace")
    if not isinstance(workflow_id, str) or not isinstance(namespace, str):
        raise InvalidRequest(
            f"key {args.key!r}: its requests do not name the run they came from; give "
            "--workflow-id and --namespace"
        )
    return {"workflow_id": workflow_id, "namespace": namespace}


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
        print(
            f"temporal-ledger: {key!r} is the wire form (as a far side holds it) of the key "
            f"{spelled!r}",
            file=sys.stderr,
        )
        key = spelled
        events = ledger.events(key)
    state = ledger.state(key)
    if args.json:
        _print_json(
            {
                "state": state.model_dump(mode="json"),
                "events": [e.model_dump(mode="json") for e in events],
            }
        )
    elif not events:
        print(f"key {key!r}: no records")
    else:
        requested = [e for e in events if e.type == EventType.REQUESTED]
        run = requested[-1].payload.get("context") or {} if requested else {}
        print(_show(state, run if isinstance(run, dict) else {}))
        print()
        print(_table(_event_rows(events), _EVENT_HEADERS))
    return OK if events else REFUSED


def _list_events(ledger: Ledger, args: argparse.Namespace) -> int:
    """The log, in order."""
    events = ledger.events(args.key, after=args.after, limit=args.limit)
    if args.json:
        _print_json([e.model_dump(mode="json") for e in events])
    else:
        print(_table(_event_rows(events), _EVENT_HEADERS))
    return OK


def _list_open_effects(ledger: Ledger, args: argparse.Namespace) -> int:
    """Every effect that is unknown and unresolved."""
    states = ledger.open_effects()
    if args.json:
        _print_json([s.model_dump(mode="json") for s in states])
    elif not states:
        print("no open effects")
    else:
        print(_table(_state_rows(states), _STATE_HEADERS))
    return OK


def _reconcile(ledger: Ledger, args: argparse.Namespace) -> int:
    """Record an operator's verdict, signed where a key file is given."""
    signature = None
    action_id = None
    if args.private_key is not None:
        # The action whose effect is unknown: an expired holder's, or the outcome's.
        state = ledger.state(args.key)
        action_id = state.holder_action_id or state.outcome_action_id
        if action_id is None:
            return _error(f"key {args.key!r}: no execution is recorded to reconcile", REFUSED)
        signature = sign(
            args.private_key,
            verdict_statement(
                key=args.key,
                action_id=action_id,
                verdict=args.verdict,
                actor=args.actor,
                basis=args.basis,
                evidence=args.evidence,
                output=args.output,
                **_signed_for(ledger, args),
            ),
        )
    try:
        state = asyncio.run(
            ledger.reconcile(
                args.key,
                args.verdict,
                args.actor,
                args.basis,
                evidence=args.evidence,
                output=args.output,
                action_id=action_id,
                signature=signature,
            )
        )
    except InvalidRequest as exc:
        # The output does not fit the tool's recorded schema; nothing was recorded.
        schema = ledger.state(args.key).output_schema
        hint = f"\n  --output must fit: {_schema_fields(schema)}" if schema else ""
        return _error(f"{exc}{hint}", REFUSED)
    if args.json:
        _print_json(state.model_dump(mode="json"))
    else:
        print(
            f"{state.key}: {args.verdict} recorded; effect {state.effect}, "
            f"next {state.next_operation}"
        )
    return OK


def _approve(ledger: Ledger, args: argparse.Namespace) -> int:
    """Record a person's decision, signed where a key file is given."""
    decision = Decision.REJECT if args.reject else Decision.APPROVE
    signature = None
    if args.private_key is not None:
        signature = sign(
            args.private_key,
            decision_statement(
                key=args.key,
                fingerprint=args.fingerprint,
                decision=decision,
                actor=args.actor,
                basis=args.basis,
                **_signed_for(ledger, args),
            ),
        )
    approval = asyncio.run(
        ledger.approve(
            args.key,
            fingerprint=args.fingerprint,
            actor=args.actor,
            basis=args.basis,
            decision=decision,
            signature=signature,
        )
    )
    if args.json:
        _print_json(approval.model_dump(mode="json"))
    else:
        print(f"{args.key}: {approval.state} by {approval.actor} ({approval.fingerprint})")
    return OK


def _verify(ledger: Ledger, args: argparse.Namespace) -> int:
    """Recompute the chains and invariants; refused when a problem is found."""
    signers = None
    gated = list(args.gated)
    if args.policy_read is not None:
        signers, policy_gated = args.policy_read
        gated += policy_gated
    report = ledger.verify(gated=gated, signers=signers)
    if args.json:
        _print_json(report.model_dump(mode="json"))
    else:
        print(
            f"{report.events} events, {report.keys} keys: "
            f"{'OK' if report.ok else f'{len(report.problems)} problem(s)'}"
        )
        for problem in report.problems:
            print(f"  - {problem}")
    return OK if report.ok else REFUSED


def _compact(ledger: Ledger, args: argparse.Namespace) -> int:
    """Drop old completion bodies, keep tombstones."""
    count = asyncio.run(ledger.compact(older_than=args.older_than))
    if args.json:
        _print_json({"compacted_keys": count})
    else:
        print(f"compacted {count} key(s)")
    return OK


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
