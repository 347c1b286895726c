"""``temporal-ledger`` (``python -m temporal_ledger.ledger``): the operator's view of a ledger."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ._errors import LedgerError
from ._ledger import Ledger
from ._models import ActionState, LedgerEvent, Verdict
from .sqlite import path_from_url

ENV_URL = "LEDGER_URL"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="temporal-ledger",
        description="Inspect, reconcile, verify and compact a tool-call ledger.",
    )
    parser.add_argument(
        "--db",
        default=os.environ.get(ENV_URL),
        help=f"ledger URL: sqlite:///path or postgresql://... (default: ${ENV_URL})",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    show = commands.add_parser("show", help="a key's state and its events")
    show.add_argument("key")

    events = commands.add_parser("events", help="the log, in order")
    events.add_argument("--key", help="only this key's events")
    events.add_argument("--after", type=int, default=0, help="only events after this seq")
    events.add_argument("--limit", type=_positive_int, help="at most this many events")

    commands.add_parser("open-effects", help="every effect that is unknown and unresolved")

    reconcile = commands.add_parser("reconcile", help="record an operator's verdict")
    reconcile.add_argument("key")
    reconcile.add_argument("--verdict", required=True, choices=[v.value for v in Verdict])
    reconcile.add_argument("--actor", required=True, help="who inspected the world")
    reconcile.add_argument("--basis", required=True, help="what the verdict rests on")
    reconcile.add_argument(
        "--evidence", action="append", default=[], help="a reference to evidence (repeatable)"
    )
    reconcile.add_argument(
        "--output", type=_json_value, help="the observed output, as JSON (effect_confirmed)"
    )

    commands.add_parser("verify", help="recompute hash chains and invariants")

    compact = commands.add_parser("compact", help="drop old completion bodies, keep tombstones")
    compact.add_argument(
        "--older-than",
        type=_non_negative_float,
        required=True,
        metavar="SECONDS",
        help="compact final outcomes settled more than this many seconds ago",
    )

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


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive whole number, got {text!r}")
    return value


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0 seconds, got {text!r}")
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
            for k in ("capability", "performer", "status", "effect", "verdict", "token")
            if p.get(k) is not None
        ]
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


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=True, default=str))


def _is_ledger_file(path: Path) -> bool:
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            found = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'ledger_meta'"
            ).fetchone()
        finally:
            conn.close()
    except sqlite3.DatabaseError:
        return False
    return found is not None


def main(argv: Sequence[str] | None = None) -> int:
    """The ``temporal-ledger`` console script (also ``python -m temporal_ledger.ledger``)."""
    args = _parser().parse_args(argv)
    if args.command == "replay":
        # Replaying needs Temporal; importing it here, and only for this command, keeps
        # ``import temporal_ledger.ledger`` free of any temporalio module.
        from ..workflows import replay_command

        return replay_command(args.histories, args.workflow)
    if not args.db:
        _parser().error(f"--db URL is required (or set ${ENV_URL})")
    if not args.db.startswith(("sqlite:///", "postgresql://", "postgres://")):
        _parser().error(
            f"unsupported ledger URL {args.db!r}: use sqlite:///path or postgresql://..."
        )
    if args.db.startswith("sqlite:///"):
        try:
            path = path_from_url(args.db)
        except LedgerError as exc:
            _parser().error(str(exc))
        if not path.exists():
            print(f"error: no ledger at {path}", file=sys.stderr)
            return 1
        if not _is_ledger_file(path):
            # Opening would add the ledger's tables to someone else's database.
            print(f"error: {path} is not a ledger (it has no ledger_meta table)", file=sys.stderr)
            return 1
    try:
        with Ledger.open(args.db) as ledger:
            return _dispatch(ledger, args)
    except LedgerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def _dispatch(ledger: Ledger, args: argparse.Namespace) -> int:
    if args.command == "show":
        state = ledger.state(args.key)
        events = ledger.events(args.key)
        if args.json:
            _print_json(
                {
                    "state": state.model_dump(mode="json"),
                    "events": [e.model_dump(mode="json") for e in events],
                }
            )
        else:
            if not events:
                print(f"key {args.key!r}: no records")
                return 1
            for name, value in state.model_dump(mode="json", exclude={"reconciliations"}).items():
                shown = json.dumps(value) if isinstance(value, (dict, list)) else value
                print(f"{name:>20}: {'' if value is None else shown}")
            for r in state.reconciliations:
                print(
                    f"{'reconciled':>20}: {r.verdict} by {r.actor} ({r.basis}) at {r.recorded_at}"
                )
            print()
            print(_table(_event_rows(events), _EVENT_HEADERS))
        return 0 if events else 1
    if args.command == "events":
        events = ledger.events(args.key, after=args.after, limit=args.limit)
        if args.json:
            _print_json([e.model_dump(mode="json") for e in events])
        else:
            print(_table(_event_rows(events), _EVENT_HEADERS))
        return 0
    if args.command == "open-effects":
        states = ledger.open_effects()
        if args.json:
            _print_json([s.model_dump(mode="json") for s in states])
        elif not states:
            print("no open effects")
        else:
            print(_table(_state_rows(states), _STATE_HEADERS))
        return 0
    if args.command == "reconcile":
        state = asyncio.run(
            ledger.reconcile(
                args.key,
                args.verdict,
                args.actor,
                args.basis,
                evidence=args.evidence,
                output=args.output,
            )
        )
        if args.json:
            _print_json(state.model_dump(mode="json"))
        else:
            print(
                f"{state.key}: {args.verdict} recorded; effect {state.effect}, "
                f"next {state.next_operation}"
            )
        return 0
    if args.command == "verify":
        report = ledger.verify()
        if args.json:
            _print_json(report.model_dump(mode="json"))
        else:
            print(
                f"{report.events} events, {report.keys} keys: "
                f"{'OK' if report.ok else f'{len(report.problems)} problem(s)'}"
            )
            for problem in report.problems:
                print(f"  - {problem}")
        return 0 if report.ok else 1
    if args.command == "compact":
        count = asyncio.run(ledger.compact(older_than=args.older_than))
        if args.json:
            _print_json({"compacted_keys": count})
        else:
            print(f"compacted {count} key(s)")
        return 0
    raise AssertionError(args.command)  # argparse only admits the commands above
