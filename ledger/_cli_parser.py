"""The arguments of ``temporal-ledger``: its parser, with every command's options and the
types that check them (and read the key and policy files they name), and the exit
statuses and error line every command shares."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from ._errors import InvalidRequest
from ._models import VERDICTS, validate_key
from ._signatures import read_policy, read_private_key
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

T = TypeVar("T")


def _argument(parse: Callable[[str], T]) -> Callable[[str], T]:
    """``parse`` as an argparse type: its :class:`InvalidRequest` (or the ImportError
    naming the ``[signing]`` extra) is the argument's error, exit status 2."""

    def argument(text: str) -> T:
        try:
            return parse(text)
        except (InvalidRequest, ImportError) as exc:
            message = str(exc).removeprefix("value ").removeprefix("actor ")
            raise argparse.ArgumentTypeError(message) from None

    return argument


def _non_empty(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


@_argument
def _persons_words(text: str) -> str:
    """A person's own words: not empty, and no template's placeholder left in."""
    refuse_placeholders(value=_non_empty(text))
    return text


@_argument
def _person(text: str) -> str:
    """A person's name: their own words, and not a tool's probe."""
    refuse_probe_name(text)
    return _persons_words(text)


_key = _argument(validate_key)


@_argument
def _key_or_wire_form(text: str) -> str:
    """A key, or a key's wire form, which may be longer than any key (``~XX`` per byte)."""
    return text if key_from_wire(text) is not None else validate_key(text)


def _number(kind: Callable[[str], T], called: str, must_be: str, fits: Callable[[T], bool]) -> Any:
    def number(text: str) -> T:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not {called}: {text!r}") from None
        if not fits(value):
            raise argparse.ArgumentTypeError(f"must be {must_be}, got {text!r}")
        return value

    return number


def _json_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON ({exc.msg}): {text!r}") from None


_read_key = _argument(lambda text: read_private_key(Path(text)))
_VERDICTS = list(VERDICTS)

#: Options several commands take: the help of each, and how it is parsed.
_SHARED: dict[str, tuple[str | None, dict[str, Any]]] = {
    "--actor": ("who decides (or inspected the world)", {"required": True, "type": _person}),
    "--basis": ("what the decision rests on", {"required": True, "type": _persons_words}),
    "--fingerprint": ("the fingerprint of the call shown", {"required": True, "type": _non_empty}),
    "--reject": ("reject the call instead: it ends with no effect", {"action": "store_true"}),
    "--verdict": (None, {"required": True, "choices": _VERDICTS}),
    "--evidence": ("a reference to evidence (repeatable)", {"action": "append", "default": []}),
    "--output": ("the observed output as JSON, fit for its schema", {"type": _json_value}),
    "--json": ("machine-readable output", {"action": "store_true"}),
    # Read when the arguments are: a bad key file is bad usage, and nothing is recorded.
    "--key-file": ("your private key (PEM) to sign with", {"type": _read_key}),
    "--workflow-id": ("the run's workflow id (default: the request's)", {"type": _non_empty}),
    "--namespace": ("the run's namespace (default: the request's)", {"type": _non_empty}),
    "--address": ("the Temporal frontend, host:port", {}),
    "--temporal": (f"the temporal CLI (default: ${ENV_TEMPORAL}, then PATH)", {}),
}


def _add(parser: argparse.ArgumentParser, *names: str, **options: Any) -> None:
    """Add the shared options named, with ``options`` over their own."""
    for name in names:
        text, shared = _SHARED[name]
        parser.add_argument(name, **{"help": text, **shared, **options})


def _run(parser: argparse.ArgumentParser) -> None:
    """The run a command asks or signs for: its workflow id, and its namespace."""
    _add(parser, "--workflow-id", required=True, help="the run's workflow id")
    namespace = f"the run's namespace (default: {DEFAULT_NAMESPACE})"
    _add(parser, "--namespace", default=DEFAULT_NAMESPACE, help=namespace)


def _options(*, inherited: bool) -> argparse.ArgumentParser:
    """--db, --json and --create, accepted before the command and after it.

    The command's copy defaults to SUPPRESS, so an option given only before the
    command is not overwritten by the command's (absent) copy.
    """
    default = argparse.SUPPRESS if inherited else None
    options = argparse.ArgumentParser(add_help=False, argument_default=default)
    url = f"ledger URL: sqlite:///path or postgresql://... (default: ${ENV_URL})"
    options.add_argument("--db", help=url)
    _add(options, "--json")
    create = "create the SQLite ledger if its file does not exist (otherwise: exit 2)"
    options.add_argument("--create", action="store_true", help=create)
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
    parser.set_defaults(db=os.environ.get(ENV_URL))
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = [_options(inherited=True)]

    def command(name: str, text: str) -> Any:
        return _command(commands, name, text, parents=common)

    show = command("show", "a key's state and its events")
    show.add_argument("key", type=_key_or_wire_form, help="the key, or its wire form (~2F for /)")
    events = command("events", "the log, in order")
    events.add_argument("--key", type=_key, help="only this key's events")
    events.add_argument("--after", type=int, default=0, help="only events after this seq")
    positive = _number(int, "a whole number", "a positive whole number", lambda v: v > 0)
    events.add_argument("--limit", type=positive, help="at most this many events")
    command("open-effects", "every effect that is unknown and unresolved")
    reconcile = command("reconcile", "record an operator's verdict")
    approve = command("approve", "record a person's decision on the call awaiting approval")
    for answer in _answers(approve, reconcile):
        answer.add_argument("key", type=_key)
        _add(answer, "--key-file", "--workflow-id", "--namespace")
    verify = command("verify", "recompute hash chains and invariants")
    gated = "a capability pattern whose every execution must hold an approval (repeatable)"
    verify.add_argument("--gated", action="append", default=[], metavar="CAPABILITY", help=gated)
    policy = (
        "the workers' policy file: re-check every recorded decision's signature against its "
        "[keys] (and hold executions of its [approve] capabilities to approvals)"
    )
    verify.add_argument("--policy", type=_argument(read_policy), help=policy)
    compact = command("compact", "drop old completion bodies, keep tombstones")
    seconds = _number(float, "a number of seconds", ">= 0 seconds", lambda v: v >= 0)
    older = "compact final outcomes settled more than this many seconds ago"
    compact.add_argument("--older-than", type=seconds, required=True, metavar="SECONDS", help=older)
    _add_off_ledger_commands(commands)
    return parser


def _command(commands: Any, name: str, text: str, about: str | None = None, **options: Any) -> Any:
    """A command ``name``, its help ``text`` and its description ``about``."""
    return commands.add_parser(name, help=text, description=about, **options)


def _answers(approve: Any, reconcile: Any) -> tuple[Any, Any]:
    """The options of a decision (``approve``) and of a verdict (``reconcile``)."""
    _add(approve, "--fingerprint", "--actor", "--basis", "--reject")
    _add(reconcile, "--verdict", "--actor", "--basis", "--evidence", "--output")
    return approve, reconcile


def _add_off_ledger_commands(commands: Any) -> None:
    """keygen, public-key, sign approve|reconcile (on the decider's own machine), waiting
    (asks the run) and replay."""
    about = (
        "Write a new private key (PEM, readable by you alone) and print the public key "
        "line for the policy's [keys]."
    )
    keygen = _command(commands, "keygen", "make an Ed25519 key pair for signing decisions", about)
    keygen.add_argument("--out", required=True, type=Path, help="the private key file to write")
    text = "print the public key and key id of a private key file"
    public = _command(commands, "public-key", text)
    _add(public, "--key-file", required=True)
    for parser in (keygen, public):
        parser.add_argument("--actor", default="YOUR-NAME", help="the actor name the key proves")
        _add(parser, "--json")
    about = (
        "Print the signed JSON for `temporal workflow update execute --input`, or send it "
        "with --send. The private key stays on this machine."
    )
    text = "sign a decision or a verdict for a run's update approve / reconcile"
    signing = _command(commands, "sign", text, about)
    kinds = signing.add_subparsers(dest="kind", required=True, metavar="KIND")
    approve = kinds.add_parser("approve", help="sign a decision on a call awaiting approval")
    verdict = kinds.add_parser("reconcile", help="sign a verdict on a parked step")
    parked = "the parked action (query open_effects)"
    verdict.add_argument("--action-id", required=True, type=_non_empty, help=parked)
    send = "send it with `temporal workflow update execute` and print the answer"
    for parser in _answers(approve, verdict):
        parser.add_argument("--key", required=True, type=_key, help="the call's key")
        _add(parser, "--key-file", required=True)
        _run(parser)
        parser.add_argument("--send", action="store_true", help=send)
        _add(parser, "--address", "--temporal")
    about = (
        "Ask a run (through the temporal CLI) what waits in it, and print the update "
        "command of each, ready to fill in and paste."
    )
    text = "a run's parked steps and calls awaiting approval, with their commands"
    waiting = _command(commands, "waiting", text, about)
    _run(waiting)
    _add(waiting, "--address", "--temporal", "--json")
    text = "replay exported workflow histories against your workflow code"
    replay = _command(commands, "replay", text)
    histories = "JSON files from `temporal workflow show -o json`"
    replay.add_argument("histories", nargs="+", type=Path, help=histories)
    one = "a workflow class to replay with (repeatable)"
    replay.add_argument("--workflow", action="append", default=[], metavar="MODULE:CLASS", help=one)


def error(message: str, status: int) -> int:
    """Say what went wrong on stderr, as every command does; the exit status."""
    print(f"temporal-ledger: error: {message}", file=sys.stderr)
    return status
