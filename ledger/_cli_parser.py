"""The arguments of ``temporal-ledger``: its parser, with every command's options and the
types that check them, and the exit statuses and error line every command shares."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from ._errors import InvalidRequest
from ._models import Verdict, validate_key
from ._template_text import refuse_placeholders, refuse_probe_name
from ._wire import key_from_wire

ENV_URL = "LEDGER_URL"
#: Where ``--send`` and ``waiting`` find the ``temporal`` CLI without ``--temporal``.
ENV_TEMPORAL = "TEMPORAL_CLI"
DEFAULT_NAMESPACE = "default"
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


def build_parser() -> argparse.ArgumentParser:
    """The ``temporal-ledger`` parser, with every command."""
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
    _add_signing_commands(commands)
    _add_waiting_command(commands)

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
    _add(
        reconcile,
        verdict=None,
        actor="who inspected the world",
        basis="what the verdict rests on",
        evidence="a reference to evidence (repeatable)",
        output="the observed output, as JSON (effect_confirmed; must fit the tool's output "
        "schema when one was recorded)",
    )
    approve = commands.add_parser(
        "approve",
        parents=common,
        help="record a person's decision on the call awaiting approval under a key",
    )
    approve.add_argument("key", type=_key)
    _add(
        approve,
        fingerprint="the fingerprint of the request you were shown (`show KEY` prints it)",
        actor="who decides",
        basis="what the decision rests on",
        reject="reject the call instead: it ends with no effect",
    )
    for parser in (reconcile, approve):
        _add(
            parser,
            key_file="sign it with your private key (PEM); the key never leaves this machine",
            workflow_id="with --key-file: the run it is signed for (default: the one the key's "
            "latest request names)",
            namespace="with --key-file: the run's namespace (default: the one the key's latest "
            "request names)",
        )


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


#: Options several commands take, as they take them; each command gives its own help.
_SHARED: dict[str, dict[str, Any]] = {
    "--actor": {"required": True, "type": _person},
    "--basis": {"required": True, "type": _persons_words},
    "--fingerprint": {"required": True, "type": _non_empty},
    "--verdict": {"required": True, "choices": [v.value for v in Verdict]},
    "--evidence": {"action": "append", "default": []},
    "--output": {"type": _json_value},
    "--reject": {"action": "store_true"},
    "--json": {"action": "store_true"},
    "--key-file": {"type": Path},
    "--workflow-id": {"type": _non_empty},
    "--namespace": {"type": _non_empty},
    "--address": {},
    "--temporal": {},
}


def _add(parser: argparse.ArgumentParser, **helps: str | None) -> None:
    """Add the shared options named (``key_file`` for ``--key-file``), each with its help."""
    for name, text in helps.items():
        option = "--" + name.replace("_", "-")
        parser.add_argument(option, help=text, **_SHARED[option])


def _add_signing_commands(commands: Any) -> None:
    """keygen, public-key, sign approve|reconcile: on the decider's own machine."""
    keygen = commands.add_parser(
        "keygen",
        help="make an Ed25519 key pair for signing decisions",
        description="Write a new private key (PEM, readable by you alone) and print the "
        "public key line for the policy's [keys].",
    )
    keygen.add_argument("--out", required=True, type=Path, help="the private key file to write")
    public = commands.add_parser(
        "public-key", help="print the public key and key id of a private key file"
    )
    public.add_argument("--key-file", required=True, type=Path)
    for parser in (keygen, public):
        parser.add_argument("--actor", default="YOUR-NAME", help="the actor name the key proves")
        _add(parser, json="machine-readable output")

    signing = commands.add_parser(
        "sign",
        help="sign a decision or a verdict for a run's update approve / reconcile",
        description="Print the signed JSON for `temporal workflow update execute --input`, "
        "or send it with --send. The private key stays on this machine.",
    )
    kinds = signing.add_subparsers(dest="kind", required=True, metavar="KIND")
    approve = kinds.add_parser("approve", help="sign a decision on a call awaiting approval")
    verdict = kinds.add_parser("reconcile", help="sign a verdict on a parked step")
    for parser in (approve, verdict):
        parser.add_argument("--key-file", required=True, type=Path, help="your private key (PEM)")
        parser.add_argument(
            "--workflow-id", required=True, type=_non_empty, help="the run's workflow id"
        )
        parser.add_argument(
            "--namespace",
            default=DEFAULT_NAMESPACE,
            type=_non_empty,
            help=f"the run's namespace (default: {DEFAULT_NAMESPACE})",
        )
        parser.add_argument("--key", required=True, type=_key, help="the call's key")
        _add(parser, actor="who decides (you)", basis="what the decision rests on")
        parser.add_argument(
            "--send",
            action="store_true",
            help="send it with `temporal workflow update execute` and print the answer",
        )
        _add(
            parser,
            address="Temporal address for --send (host:port)",
            temporal=f"the temporal CLI for --send (default: ${ENV_TEMPORAL}, then PATH)",
        )
    _add(
        approve,
        fingerprint="the fingerprint of the call you were shown (query pending_approvals)",
        reject="reject the call instead",
    )
    verdict.add_argument(
        "--action-id",
        required=True,
        type=_non_empty,
        help="the parked action (query open_effects)",
    )
    _add(
        verdict,
        verdict=None,
        evidence="a reference to evidence (repeatable)",
        output="the observed output, as JSON (effect_confirmed)",
    )


def _add_waiting_command(commands: Any) -> None:
    """waiting: a run's waiting calls, asked of the run through the temporal CLI."""
    waiting = commands.add_parser(
        "waiting",
        help="a run's parked steps and calls awaiting approval, with their commands",
        description="Ask a run (through the temporal CLI) what waits in it, and print the "
        "update command of each, ready to fill in and paste.",
    )
    waiting.add_argument("--workflow-id", required=True, help="the run's workflow id")
    waiting.add_argument("--namespace", default="default")
    _add(
        waiting,
        address="the Temporal frontend (default: the CLI's)",
        temporal=f"the temporal CLI (default: ${ENV_TEMPORAL}, then PATH)",
        json="machine-readable output",
    )


def error(message: str, status: int) -> int:
    """Say what went wrong on stderr, as every command does; the exit status."""
    print(f"temporal-ledger: error: {message}", file=sys.stderr)
    return status
