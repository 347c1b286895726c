"""pydantic-ai's ``TemporalDurability`` capability with the ledger, against the real dev
server: a scripted model, function tools and a real MCP server (``tests.mcp_notes``)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.durable_exec.temporal import PydanticAIPlugin
from temporal_ledger.activities import LedgerOptions, LedgerPlugin, Policy
from temporal_ledger.activities.pydantic_ai import activity_rules
from temporal_ledger.ledger import Ledger
from temporal_ledger.workflows._protocol import PLACEHOLDER
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from tests.pydantic_ai_support import AGENT_NAME, MODEL_CALLS, NOTES_DIR
from tests.pydantic_ai_workflows import DurableSupportWorkflow
from tests.temporal_support import (
    keep_history,
    lines,
    listed_as_parked,
    open_effects,
    query_json,
    reset_to_first_task,
    wait_for,
    worker_in_process,
)
from tests.test_openai_agents import approve, call, reconcile, template_of

pytestmark = pytest.mark.timeout(180)

POLICY = Policy(
    performers={"DurableSupportWorkflow": [f"activity.agent.{AGENT_NAME}.*"]},
    reconcilers=["ops-*"],
    approvers=["lead-*"],
)


class Desk:
    """One test's world: its folder (the function tools' file), ledger and task queue."""

    def __init__(
        self,
        address: str,
        folder: Path,
        policy: Policy = POLICY,
        *,
        task_queue: str = "",
        lease: float = 2.0,
    ) -> None:
        self.address = address
        self.lease = lease
        self.folder = folder
        self.policy = policy
        self.ledger_url = f"sqlite:///{folder / 'ledger.db'}"
        self.task_queue = task_queue or f"tq-pai-{uuid.uuid4().hex[:8]}"
        self.ticket = f"T-{uuid.uuid4().hex[:6]}"

    def ledger_plugin(self) -> LedgerPlugin:
        return LedgerPlugin(
            self.ledger_url,
            policy=self.policy,
            options=LedgerOptions(lease=self.lease),
            ledger_activities=activity_rules(AGENT_NAME),
        )

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Client]:
        client = await Client.connect(
            self.address, plugins=[PydanticAIPlugin(), self.ledger_plugin()]
        )
        async with Worker(client, task_queue=self.task_queue, workflows=[DurableSupportWorkflow]):
            yield client

    def worker_process(self) -> contextlib.AbstractAsyncContextManager[Any]:
        """This desk's worker in a process of its own, so that a test can kill it."""
        return worker_in_process(
            "tests.pydantic_ai_worker",
            self.address,
            self.task_queue,
            str(self.folder),
            str(self.lease),
            env={"PYDANTIC_NOTES_DIR": str(NOTES_DIR)},
        )

    async def start(self, client: Client, *calls: str) -> WorkflowHandle[Any, str]:
        return await client.start_workflow(
            DurableSupportWorkflow.run,
            args=["\n".join(calls), str(self.folder)],
            id=f"pai-{uuid.uuid4().hex[:8]}",
            task_queue=self.task_queue,
        )

    def notes(self) -> list[str]:
        return [n for n in lines(NOTES_DIR / "notes.txt") if n.startswith(f"{self.ticket}: ")]

    def refunds(self) -> list[str]:
        return lines(self.folder / "refunds.jsonl")


@pytest.fixture
def desk(temporal_address: str, tmp_path: Path) -> Desk:
    return Desk(temporal_address, tmp_path)


async def test_a_finished_run_reset_to_its_start_asks_no_model_and_acts_on_nothing(
    desk: Desk,
) -> None:
    first = call("issue_refund", order="A-1", cents=1250)
    async with desk.running() as client:
        handle = await desk.start(client, first, call("add_note", ticket=desk.ticket, text="hi"))
        answer = await handle.result()
        notes_so_far = len(lines(NOTES_DIR / "notes.txt"))
        assert answer == f"done: refunded 1250 cents on A-1 | note {notes_so_far} on {desk.ticket}"
        asked = MODEL_CALLS[first]
        new_run = await reset_to_first_task(
            desk.address, client, handle.id, handle.result_run_id, reason="test: replay"
        )
        again = await client.get_workflow_handle(handle.id, run_id=new_run).result()
        await keep_history(client, handle.id, new_run, "pydantic-ai-reset")
    assert again == answer
    assert MODEL_CALLS[first] == asked, "the reset asked the model again"
    assert desk.notes() == [f"{desk.ticket}: hi"]
    assert len(desk.refunds()) == 1
    with Ledger.open(desk.ledger_url) as ledger:
        assert ledger.verify().ok


async def test_an_mcp_tool_that_acted_and_lost_its_reply_parks_the_run_until_reconciled(
    desk: Desk,
) -> None:
    async with desk.running() as client:
        handle = await desk.start(
            client, call("add_note_and_crash", ticket=desk.ticket, text="customer called")
        )
        [parked] = await wait_for(
            lambda: open_effects(desk.address, handle.id), what="the MCP call to park"
        )
        assert await listed_as_parked(desk.address, handle.id)
        assert parked["tool"] == (
            f"add_note_and_crash (agent__{AGENT_NAME}__mcp_server__notes__call_tool)"
        )
        template = template_of(parked["update_command"])
        assert template["output"] == PLACEHOLDER  # the tool's own return value
        verdict = {**template, "actor": "ops-ann", "basis": "the note is in notes.txt"}
        status, answer = await reconcile(desk.address, handle.id, verdict)
        assert status != 0 and "placeholder" in answer, answer
        status, answer = await reconcile(
            desk.address, handle.id, {**verdict, "output": "note added by hand-check"}
        )
        assert status == 0, answer
        result = await handle.result()
        await keep_history(client, handle.id, None, "pydantic-ai-mcp-reconciled")
        # Reset to the start: the operator's output is replayed from the ledger.
        new_run = await reset_to_first_task(
            desk.address, client, handle.id, handle.result_run_id, reason="test: replay"
        )
        assert await client.get_workflow_handle(handle.id, run_id=new_run).result() == result
    assert result == "done: note added by hand-check"
    assert desk.notes() == [f"{desk.ticket}: customer called"]


async def test_a_read_only_mcp_tool_the_policy_trusts_that_dies_runs_again_unparked(
    temporal_address: str, tmp_path: Path
) -> None:
    trusting = POLICY.model_copy(update={"trust_hints": ["count_notes*"]})
    desk = Desk(temporal_address, tmp_path, trusting)
    (NOTES_DIR / "crash-once").write_text("")
    async with desk.running() as client:
        handle = await desk.start(client, call("count_notes_crashing_once", ticket=desk.ticket))
        result = await handle.result()
        history = await handle.fetch_history()
    assert result == "done: 0"
    assert not (NOTES_DIR / "crash-once").exists()
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert "ledger.reconcile" not in scheduled
    with Ledger.open(desk.ledger_url) as ledger:
        requested = {
            e.action_id: e.payload["capability"]
            for e in ledger.events()
            if e.type == "action.requested"
        }
        calls = {a for a, capability in requested.items() if capability.endswith("call_tool")}
        of_calls = [e for e in ledger.events() if e.action_id in calls]
        # A retry-safe call acts before it records anything: the call that died left no
        # record, and the call again (more than once when the MCP client's reconnection
        # to the restarted server fails at first) recorded its request and its outcome
        # together, under one key, with no claim or started marker.
        assert len({e.key for e in of_calls}) == 1, of_calls
        assert "action.execution_started" not in {e.type for e in of_calls}
        outcomes = [e.payload["status"] for e in of_calls if e.type == "action.completed"]
        assert outcomes[-1] == "succeeded", of_calls
        assert ledger.open_effects() == [] and ledger.verify().ok


async def test_a_tool_that_may_destroy_waits_for_an_approval_of_its_exact_call(
    temporal_address: str, tmp_path: Path
) -> None:
    policy = POLICY.model_copy(update={"gate_destructive": True})
    desk = Desk(temporal_address, tmp_path, policy)
    async with desk.running() as client:
        handle = await desk.start(
            client,
            call("add_note", ticket=desk.ticket, text="asked to close"),
            call("close_ticket", ticket=desk.ticket, reason="solved"),
        )
        [waiting] = await wait_for(
            lambda: query_json(desk.address, handle.id, "pending_approvals"),
            what="the call to wait for an approval",
        )
        assert desk.notes() == [f"{desk.ticket}: asked to close"]
        decision = template_of(waiting["approve_command"])
        decision.update(actor="lead-ann", basis="the customer confirmed")
        status, answer = await approve(
            desk.address, handle.id, {**decision, "fingerprint": "0" * 64}
        )
        assert status != 0 and "fingerprint mismatch" in answer, answer
        status, answer = await approve(desk.address, handle.id, decision)
        assert status == 0, answer
        result = await handle.result()
        await keep_history(client, handle.id, None, "pydantic-ai-approved")
    assert result.startswith("done: note ") and f"closed {desk.ticket}" in result
    assert desk.notes() == [f"{desk.ticket}: asked to close", f"{desk.ticket}: CLOSED solved"]


async def test_a_worker_killed_between_the_effect_and_its_report_never_acts_twice(
    desk: Desk,
) -> None:
    (NOTES_DIR / "acted").unlink(missing_ok=True)
    client = await Client.connect(desk.address, plugins=[PydanticAIPlugin()])
    async with desk.worker_process() as first:
        handle = await desk.start(client, call("add_note_and_hang", ticket=desk.ticket, text="hi"))
        await wait_for(lambda: asyncio.sleep(0, (NOTES_DIR / "acted").exists()), what="the note")
        os.killpg(first.pid, signal.SIGKILL)
    async with desk.worker_process():
        [parked] = await wait_for(
            lambda: open_effects(desk.address, handle.id), what="the call to park"
        )
        verdict = {
            **template_of(parked["update_command"]),
            "actor": "ops-ann",
            "basis": "the note is in notes.txt",
            "output": "note added",
        }
        status, answer = await reconcile(desk.address, handle.id, verdict)
        assert status == 0, answer
        assert await handle.result() == "done: note added"
    assert desk.notes() == [f"{desk.ticket}: hi"]
