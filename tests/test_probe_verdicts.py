"""A ``probe:`` verdict comes from a tool's probe on the worker, and ``verify --policy``
proves it: a person cannot give one with the CLI, and one written into the ledger any
other way (the Python API, a forged row with its chain recomputed) is named as a problem
unless the policy names that tool's probe and the verdict rests on evidence. Both
backends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from temporal_ledger.ledger import Ledger
from temporal_ledger.ledger._models import NextOperation

from tests.forgery import append_forged_event
from tests.test_ledger_cli import cli

POLICY = """
[reconcile]
actors = ["ops-*"]
probes = ["place_order"]
"""


async def unknown_effect(ledger: Ledger, key: str) -> None:
    from temporal_ledger.ledger._testing_child import AUTHORITY, request

    def lost_reply(req: Any, ctx: Any) -> None:
        raise ConnectionResetError("the reply was lost")

    await ledger.execute(request(key), authority=AUTHORITY, adapter=lost_reply)
    assert ledger.state(key).next_operation is NextOperation.RECONCILE_EFFECT


async def test_a_person_cannot_give_a_probes_verdict_with_the_cli(ledger_url: str) -> None:
    with Ledger.open(ledger_url) as ledger:
        await unknown_effect(ledger, "receipt-1")
        before = ledger.events("receipt-1")
    done = cli(
        ledger_url, "reconcile", "receipt-1", "--verdict", "no_effect_confirmed",
        "--actor", "probe:send_receipt", "--basis", "the mail log is empty",
    )  # fmt: skip
    assert done.returncode == 2
    assert "'probe:send_receipt': probe:<tool> is the worker's own probe" in done.stderr
    with Ledger.open(ledger_url) as ledger:
        assert ledger.events("receipt-1") == before


async def test_verify_names_a_probe_verdict_that_no_probe_of_the_policy_gave(
    ledger_url: str, tmp_path: Path
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY)
    with Ledger.open(ledger_url) as ledger:
        for key in ("order-1", "receipt-1", "receipt-2"):
            await unknown_effect(ledger, key)
        # The worker's probe of place_order, as its probe path records it: passes.
        answer = {"GET": "http://far/orders?idempotency_key=order-1", "status": 200}
        await ledger.reconcile(
            "order-1", "effect_confirmed", "probe:place_order", "GET found the order",
            evidence=[answer], output={"order_id": "O-1"},
        )  # fmt: skip
        # Written through the Python API in the name of a tool without a probe.
        await ledger.reconcile(
            "receipt-1", "no_effect_confirmed", "probe:send_receipt", "nothing was sent",
            evidence=["made up"],
        )  # fmt: skip
        forged_at = ledger.events("order-1")[-1]
    assert cli(ledger_url, "verify", "--policy", str(policy)).returncode == 1
    # A row forged straight into the table, its chain recomputed, with no evidence.
    forged = {**forged_at.payload, "evidence": [], "verdict": "no_effect_confirmed"}
    forged.pop("output", None)
    seq = append_forged_event(ledger_url, "receipt-2", "action.reconciled", forged)
    done = cli(ledger_url, "verify", "--policy", str(policy))
    assert done.returncode == 1, done.stdout
    problems = [line for line in (done.stdout + done.stderr).splitlines() if "probe:" in line]
    assert len(problems) == 2, done.stdout + done.stderr
    assert "key 'receipt-1'" in problems[0] and "no probe for tool 'send_receipt'" in problems[0]
    assert f"seq {seq} " in problems[1] and "without evidence" in problems[1]
    # Without the policy, verify checks the chain and the invariants only; they hold.
    assert cli(ledger_url, "verify").returncode == 0
