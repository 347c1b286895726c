"""``temporal-ledger waiting``: a run's waiting calls, with the commands that answer them
printed as they are pasted.

Query ``open_effects`` and ``pending_approvals`` print each command inside JSON, quoted and
escaped, which cannot be pasted; this asks the run through the ``temporal`` CLI and prints
each command on a line of its own. The ledger is not needed, nor is Temporal's SDK.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ._cli_parser import OK, REFUSED, USAGE, error
from ._cli_signing import no_temporal_cli, run_temporal, temporal_cli


def run(args: argparse.Namespace) -> int:
    cli = temporal_cli(args)
    if cli is None:
        return error(no_temporal_cli("waiting"), USAGE)
    found: dict[str, list[dict[str, Any]]] = {}
    for query in ("open_effects", "pending_approvals"):
        try:
            done = run_temporal(cli, args, "workflow", "query", "--name", query, "-o", "json")
        except OSError as exc:
            return error(f"cannot run {cli}: {exc}", USAGE)
        if done.returncode != 0:
            if "expected but not found" in done.stdout + done.stderr:
                found[query] = []  # the run has used no ledgered call yet
                continue
            return error((done.stderr or done.stdout).strip() or f"{query} failed", REFUSED)
        found[query] = _result(done.stdout)
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
        print(effect["update_command"])
        print()
    for waiting in approvals:
        print(f"# awaiting approval: step {waiting['step']} (tool {waiting['tool']}),")
        print(f"#   performer {waiting['performer']}, key {waiting['key']}")
        print(f"# arguments: {json.dumps(waiting['arguments'], sort_keys=True)}")
        print("# approve (or reject) exactly this call:")
        print(waiting["approve_command"])
        print(waiting["reject_command"])
        print()
    return OK


def _result(text: str) -> list[dict[str, Any]]:
    """The query's answer from ``temporal workflow query -o json``."""
    data = json.loads(text)
    result = data.get("queryResult", data) if isinstance(data, dict) else data
    while isinstance(result, list) and len(result) == 1 and isinstance(result[0], list):
        result = result[0]
    # An empty answer comes back as [null].
    return [item for item in result if isinstance(item, dict)] if isinstance(result, list) else []
