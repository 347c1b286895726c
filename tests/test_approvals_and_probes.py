"""Approvals bound to the exact call, and probes that settle unknown effects (issue 13).

Against the session's real dev server, a SQLite ledger, a payments far side on 127.0.0.1
and the real ``temporal`` and ``temporal-ledger`` CLIs for what a person does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import sqlite3
import threading
import urllib.parse
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from temporal_ledger.activities import LedgeredActivity, LedgerPlugin, Policy
from temporal_ledger.ledger import ActionRequest, Ledger
from temporal_ledger.ledger._models import ApprovalState, EventType
from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.worker import Worker

from tests.approval_tools import PAYMENT_TOOLS, PaymentJob, PaymentWorkflow
from tests.cli_in_process import run_cli_async
from tests.temporal_support import (
    Setup,
    key_on_the_wire,
    open_effects,
    query_json,
    temporal_cli,
    wait_for,
)
from worker import free_port

pytestmark = pytest.mark.timeout(120)

POLICY = """
[performers]
"agent" = ["payments.*"]

[reconcile]
actors = ["ops-*"]
probes = ["charge*"]

[approve]
actors = ["lead-*", "agent"]
"""


class Payments:
    """A payments service that counts effects, looks payments up by idempotency key, and
    can lose the reply of the next POSTs (after committing, or before)."""

    def __init__(self) -> None:
        self.by_key: dict[str, dict[str, Any]] = {}
        self.posts = 0
        #: What the next POSTs do instead of answering: "commit-then-drop" or "drop".
        self.script: list[str] = []
        self.lock = threading.Lock()
        far = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                key = self.headers["Idempotency-Key"]  # one spelling: never decoded
                with far.lock:
                    far.posts += 1
                    step = far.script.pop(0) if far.script else "answer"
                    if step != "drop":
                        payment = {"payment_id": f"P-{len(far.by_key) + 1}", **body}
                        far.by_key.setdefault(key, payment)
                if step != "answer":
                    self.close_connection = True  # the reply is lost
                    return
                self.reply(201, far.by_key[key])

            def do_GET(self) -> None:
                key = self.path.rsplit("/", 1)[-1]
                with far.lock:
                    found = far.by_key.get(key)
                # Answers that name the key they looked up: the probe may take them as
                # evidence.
                if found is None:
                    self.reply(404, {"error": "no such key", "idempotency_key": key})
                else:
                    self.reply(200, {**found, "idempotency_key": key})

            def reply(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def effects(self) -> int:
        return len(self.by_key)


@pytest.fixture
def payments() -> Iterator[Payments]:
    far = Payments()
    far.thread.start()
    try:
        yield far
    finally:
        far.server.shutdown()
        far.server.server_close()


@pytest.fixture
def policy() -> str:
    return POLICY


@pytest.fixture
async def world(setup: Setup, policy: str) -> AsyncIterator[tuple[Setup, Client]]:
    setup.policy.write_text(policy)
    client = await setup.client()
    async with Worker(
        client,
        task_queue=setup.task_queue,
        workflows=[PaymentWorkflow],
        activities=list(PAYMENT_TOOLS.values()),
    ):
        yield setup, client


async def start(
    setup: Setup, client: Client, tool: str, far: Payments, amount: int, **job: Any
) -> WorkflowHandle[Any, Any]:
    return await client.start_workflow(
        PaymentWorkflow.run,
        PaymentJob(tool=tool, arg={"base_url": far.url, "amount": amount}, **job),
        id=f"{tool}-{uuid.uuid4().hex[:8]}",
        task_queue=setup.task_queue,
    )


async def pending_approvals(setup: Setup, handle: WorkflowHandle[Any, Any]) -> list[dict]:
    found = await query_json(setup.address, handle.id, "pending_approvals")
    return found if isinstance(found, list) else [found] if found else []


def decision(pending: dict[str, Any], *, actor: str = "lead-ann", **changes: Any) -> dict:
    return {
        "key": pending["key"],
        "fingerprint": pending["fingerprint"],
        "decision": "approve",
        "actor": actor,
        "basis": f"checked the refund of {pending['arguments']['amount']}",
        **changes,
    }


async def ledger_cli(setup: Setup, *args: str) -> tuple[int, str]:
    return await run_cli_async(["--db", setup.ledger_url, *args])


async def test_an_approval_holds_for_the_exact_call_and_is_consumed_once(
    world: tuple[Setup, Client], payments: Payments
) -> None:
    setup, client = world
    key = f"refund-{uuid.uuid4().hex[:8]}"
    handle = await start(setup, client, "refund", payments, 20, key=key)

    # Waiting, listed on the cluster, showing the tool, the arguments and the fingerprint.
    pending = (await wait_for(lambda: pending_approvals(setup, handle), what="approval"))[0]
    assert (pending["tool"], pending["key"], pending["performer"]) == ("refund", key, "agent")
    assert pending["arguments"] == {"base_url": payments.url, "amount": 20}
    shown = ActionRequest(
        key=key, capability="payments.refund", instruction="refund",
        payload=pending["arguments"], performer="agent",
    )  # fmt: skip
    assert pending["fingerprint"] == shown.fingerprint()
    assert payments.posts == 0

    async def listed() -> str:
        _, out = await temporal_cli(
            setup.address, "workflow", "list", "--query",
            f"LedgerAwaitingApproval > 0 AND TaskQueue = '{setup.task_queue}'",
        )  # fmt: skip
        return out if handle.id in out else ""

    await wait_for(listed, what="the run in LedgerAwaitingApproval > 0")
    described = await temporal_cli(setup.address, "workflow", "metadata", "-w", handle.id)
    assert pending["fingerprint"] in described[1]  # the current details name it

    # Refused without touching the ledger: another request's fingerprint, the performer
    # itself, an actor the policy does not name.
    other = ActionRequest(**{**shown.model_dump(), "payload": {**shown.payload, "amount": 2000}})
    for bad, reason in (
        (decision(pending, fingerprint=other.fingerprint()), "fingerprint mismatch"),
        (decision(pending, actor="agent"), "performer"),
        (decision(pending, actor="mallory"), "may not approve"),
    ):
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update("approve", bad)
        assert reason in str(refused.value.cause)
    with Ledger.open(setup.ledger_url) as ledger:
        assert EventType.APPROVED not in [e.type for e in ledger.events(key)]

    # The operator approves with the real CLI; the call acts once.
    code, out = await temporal_cli(
        setup.address, "workflow", "update", "execute", "--workflow-id", handle.id,
        "--name", "approve", "--input", json.dumps(decision(pending)),
    )  # fmt: skip
    assert code == 0 and "approved" in out
    assert await handle.result() == {"payment_id": "P-1", "amount": 20}
    assert payments.effects == 1 and payments.posts == 1

    # The same key with the amount changed after the approval: a fingerprint mismatch.
    replanned = await start(setup, client, "refund", payments, 2000, key=key)
    with pytest.raises(WorkflowFailureError) as failed:
        await replanned.result()
    assert failed.value.cause.type == "ToolConflict"  # type: ignore[union-attr]
    assert "payload" in str(failed.value.cause)
    # The same call again replays the approved outcome without a new approval.
    again = await start(setup, client, "refund", payments, 20, key=key)
    assert await again.result() == {"payment_id": "P-1", "amount": 20}
    assert payments.effects == 1 and payments.posts == 1

    with Ledger.open(setup.ledger_url) as ledger:
        state = ledger.state(key)
        assert state.approval is not None and state.approval.state is ApprovalState.CONSUMED
        assert state.approval.actor == "lead-ann"
        assert ledger.verify().ok
    code, shown_text = await ledger_cli(setup, "show", key)
    assert code == 0 and "approved" in shown_text and "lead-ann" in shown_text

    # Seeded: drop the approval from a copy of the ledger; verify names the execution.
    path = setup.ledger_url.removeprefix("sqlite:///")
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("DELETE FROM ledger_events WHERE type = ?", (EventType.APPROVED.value,))
    code, out = await ledger_cli(setup, "verify")
    assert code == 1 and "without an approval" in out and key in out


async def test_a_rejection_ends_the_step_with_no_effect(
    world: tuple[Setup, Client], payments: Payments
) -> None:
    setup, client = world
    handle = await start(setup, client, "refund", payments, 2000)
    pending = (await wait_for(lambda: pending_approvals(setup, handle), what="approval"))[0]
    result = await handle.execute_update("approve", decision(pending, decision="reject"))
    assert result["state"] == "rejected"
    with pytest.raises(WorkflowFailureError) as failed:
        await handle.result()
    assert failed.value.cause.type == "ToolRejected"  # type: ignore[union-attr]
    assert payments.posts == 0 and payments.effects == 0
    with Ledger.open(setup.ledger_url) as ledger:
        assert ledger.state(pending["key"]).approval.state is ApprovalState.REJECTED  # type: ignore[union-attr]


@pytest.mark.parametrize("policy", [POLICY + 'capabilities = ["payments.charge"]\n'])
async def test_the_policy_gates_a_capability_whose_tool_does_not_ask(
    world: tuple[Setup, Client], payments: Payments
) -> None:
    setup, client = world
    handle = await start(setup, client, "charge", payments, 12)
    pending = (await wait_for(lambda: pending_approvals(setup, handle), what="approval"))[0]
    assert pending["tool"] == "charge" and payments.posts == 0
    result = await handle.execute_update("approve", decision(pending, actor="lead-bo"))
    assert (result["state"], result["actor"]) == ("approved", "lead-bo")
    assert await handle.result() == {"payment_id": "P-1", "amount": 12}
    assert payments.effects == 1
    with Ledger.open(setup.ledger_url) as ledger:
        assert ledger.verify(gated=["payments.charge"]).ok


async def test_a_probe_that_finds_the_effect_settles_it_without_parking(
    world: tuple[Setup, Client], payments: Payments
) -> None:
    setup, client = world
    payments.script = ["commit-then-drop"]
    handle = await start(setup, client, "charge", payments, 7)
    assert await handle.result() == {"payment_id": "P-1", "amount": 7}
    assert payments.effects == 1 and payments.posts == 1
    with Ledger.open(setup.ledger_url) as ledger:
        key = key_on_the_wire(ledger, next(iter(payments.by_key)))
        state = ledger.state(key)
        assert [(r.verdict, r.actor) for r in state.reconciliations] == [
            ("effect_confirmed", "probe:charge")
        ]
        assert state.reconciliations[0].evidence[0]["status"] == 200
        assert ledger.verify().ok
    code, shown = await ledger_cli(setup, "show", key)
    assert code == 0 and "probe:charge" in shown and "effect_confirmed" in shown


async def test_a_conclusive_absence_lets_the_step_act_again_once(
    world: tuple[Setup, Client], payments: Payments
) -> None:
    setup, client = world
    payments.script = ["drop"]  # the connection breaks before the far side commits
    handle = await start(setup, client, "charge_conclusive", payments, 9)
    assert await handle.result() == {"payment_id": "P-1", "amount": 9}
    assert payments.effects == 1 and payments.posts == 2
    with Ledger.open(setup.ledger_url) as ledger:
        key = key_on_the_wire(ledger, next(iter(payments.by_key)))
        state = ledger.state(key)
        assert [(r.verdict, r.actor) for r in state.reconciliations] == [
            ("no_effect_confirmed", "probe:charge_conclusive")
        ]
        assert ledger.verify().ok


async def test_an_absence_the_tool_does_not_call_conclusive_parks(
    world: tuple[Setup, Client], payments: Payments
) -> None:
    setup, client = world
    payments.script = ["drop"]
    handle = await start(setup, client, "charge", payments, 3)
    parked = await wait_for(lambda: open_effects(setup.address, handle.id), what="the park")
    with Ledger.open(setup.ledger_url) as ledger:
        state = ledger.state(parked[0]["key"])
        assert [(r.verdict, r.actor) for r in state.reconciliations] == [
            ("still_unknown", "probe:charge")
        ]
    await handle.terminate("done looking")
    assert payments.posts == 1 and payments.effects == 0


async def test_a_probe_that_raises_leaves_the_step_parked_as_before(
    world: tuple[Setup, Client], payments: Payments
) -> None:
    setup, client = world
    payments.script = ["commit-then-drop"]
    handle = await start(setup, client, "charge_broken_probe", payments, 5)
    parked = await wait_for(lambda: open_effects(setup.address, handle.id), what="the park")
    key = parked[0]["key"]
    with Ledger.open(setup.ledger_url) as ledger:
        assert ledger.state(key).reconciliations == []  # the failed probe recorded nothing
    verdict = {
        "key": key, "verdict": "effect_confirmed", "actor": "ops-bo", "basis": "in the books",
        "output": payments.by_key[Ledger.wire_key(key)],
    }  # fmt: skip
    await handle.execute_update("reconcile", verdict)
    assert await handle.result() == {"payment_id": "P-1", "amount": 5}
    assert payments.effects == 1 and payments.posts == 1


async def test_metrics_count_approvals_and_probe_verdicts_by_actor(
    setup: Setup, payments: Payments
) -> None:
    setup.policy.write_text(POLICY)
    port = free_port()
    runtime = Runtime(
        telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=f"127.0.0.1:{port}"))
    )
    client = await Client.connect(setup.address, plugins=[setup.plugin()], runtime=runtime)
    async with Worker(
        client,
        task_queue=setup.task_queue,
        workflows=[PaymentWorkflow],
        activities=list(PAYMENT_TOOLS.values()),
    ):
        refund = await start(setup, client, "refund", payments, 20)
        pending = (await wait_for(lambda: pending_approvals(setup, refund), what="approval"))[0]
        await refund.execute_update("approve", decision(pending))
        await refund.result()
        payments.script = ["commit-then-drop"]
        await (await start(setup, client, "charge", payments, 7)).result()

        def scrape() -> str:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as got:
                return got.read().decode()

        text = await asyncio.to_thread(scrape)
    assert re.search(r'ledger_approvals(_total)?\{[^}]*decision="approve"[^}]*\} 1', text), text
    assert re.search(
        r'ledger_reconciliations(_total)?\{[^}]*actor="probe:charge"[^}]*\} 1', text
    ), text
    assert re.search(r'ledger_tool_calls(_total)?\{[^}]*outcome="awaiting_approval"', text)
    assert payments.effects == 2


async def test_lookup_probe_reads_the_far_sides_answer(payments: Payments) -> None:
    from temporal_ledger.activities._probe import Finding
    from temporal_ledger.activities.http import lookup_probe

    from tests.approval_tools import Payment, Receipt, by_key

    key = "wf/run/pay?x=1"  # slashes and query characters stay inside one path segment
    payments.by_key[Ledger.wire_key(key)] = {"payment_id": "P-9", "amount": 4}
    arg = Payment(base_url=payments.url, amount=4)
    found = await by_key(key, arg)
    assert found.finding is Finding.PRESENT and found.output == {"payment_id": "P-9", "amount": 4}
    assert (
        found.evidence[0]["status"] == 200 and "wf~2Frun~2Fpay~3Fx~3D1" in found.evidence[0]["GET"]
    )
    assert Receipt.model_validate(found.output).payment_id == "P-9"
    missing = await by_key("other", arg)
    assert missing.finding is Finding.ABSENT and missing.evidence[0]["status"] == 404
    broken = await lookup_probe("{base_url}/payments/{key}", absent_statuses=())("other", arg)
    assert broken.finding is Finding.INCONCLUSIVE and "404" in broken.basis
    refused = await by_key(key, Payment(base_url="http://127.0.0.1:9", amount=4))
    assert refused.finding is Finding.INCONCLUSIVE and "ConnectError" in refused.basis


#: A policy whose probes name none of the payment tools.
OTHER_PROBES = """
[performers]
"agent" = ["payments.*"]

[reconcile]
actors = ["ops-*"]
probes = ["place_order"]
"""


async def _start_and_stop(setup: Setup, plugin: LedgerPlugin, *, times: int = 1) -> None:
    """Start a worker of the payment tools on ``plugin`` and stop it, ``times`` times."""
    client = await Client.connect(setup.address, plugins=[plugin])
    for _ in range(times):
        async with Worker(
            client,
            task_queue=setup.task_queue,
            workflows=[PaymentWorkflow],
            activities=list(PAYMENT_TOOLS.values()),
        ):
            pass


def _probe_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "[reconcile]" in r.getMessage()]


async def test_a_worker_warns_once_of_probes_the_policy_does_not_name(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    """Tools that declare ``probe=`` (a ``@tool``'s, a ledgered activity's rule's) that the
    policy's ``[reconcile] probes`` does not name would park every unknown effect unprobed:
    the worker says so at start, once, with the line that lets them decide."""
    from tests.approval_tools import broken_probe

    caplog.set_level(logging.WARNING)
    setup.policy.write_text(OTHER_PROBES)
    rule = LedgeredActivity("ship_parcel", probe=broken_probe)
    plugin = LedgerPlugin(setup.ledger_url, policy=setup.policy, ledger_activities=[rule])
    await _start_and_stop(setup, plugin, times=2)  # a second worker: no second warning
    [warning] = _probe_warnings(caplog)
    unnamed = ["charge", "charge_conclusive", "charge_broken_probe", "ship_parcel"]
    for name in unnamed:
        assert repr(name) in warning, warning
    assert "'refund'" not in warning  # it declares no probe
    assert str(setup.policy) in warning
    line = warning.rsplit(": ", 1)[1]
    assert line == f"probes = {json.dumps(['place_order', *unnamed])}", warning

    # The line put in the policy file, in place of its probes line: no warning.
    caplog.clear()
    setup.policy.write_text(OTHER_PROBES.replace('probes = ["place_order"]', line))
    fixed = LedgerPlugin(setup.ledger_url, policy=setup.policy, ledger_activities=[rule])
    await _start_and_stop(setup, fixed)
    assert _probe_warnings(caplog) == []
    assert all(Policy.load(setup.policy).may_probe(name) for name in unnamed)


async def test_a_policy_that_names_a_tools_probe_by_pattern_draws_no_warning_for_it(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    named = Policy(performers={"agent": ["payments.*"]}, probes=["charge"])
    await _start_and_stop(setup, LedgerPlugin(setup.ledger_url, policy=named))
    [warning] = _probe_warnings(caplog)
    assert "'charge_conclusive', 'charge_broken_probe'" in warning
    assert "'charge'," not in warning and "'charge' " not in warning
    assert 'probes=["charge", "charge_conclusive", "charge_broken_probe"]' in warning

    caplog.clear()
    everything = Policy(performers={"agent": ["payments.*"]}, probes=["charge*"])
    await _start_and_stop(setup, LedgerPlugin(setup.ledger_url, policy=everything))
    assert _probe_warnings(caplog) == []
