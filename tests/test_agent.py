"""Durable agents: model calls and tool calls both replay from the ledger (issue 5, 1-2, 4, 7)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from temporal_ledger.activities import LedgerOptions, LedgerPlugin
from temporal_ledger.ledger import Ledger
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.workflow import ActivityConfig

from examples.agent.models import ChatMessage, ModelRequest
from examples.agent.workflows import AgentInput, AgentResult, AgentWorkflow
from tests.fake_model import FakeModelServer
from tests.temporal_support import (
    Setup,
    lines,
    open_effects,
    reset_to_first_task,
    temporal_cli,
    wait_for,
)
from tests.temporal_tools import ModelCallWorkflow

pytestmark = pytest.mark.timeout(180)
#: The heartbeat timeout of the tool calls of the test that kills their worker.
BEAT = timedelta(seconds=5)


def ledger_counts(url: str) -> dict[str, int]:
    """Executions and replays, per capability, from the ledger. An execution is a started
    marker, or the original outcome of a retry-safe call (recorded with its request, no
    marker before it: it acts first)."""
    with Ledger.open(url) as ledger:
        events = ledger.events()
    capability = {
        e.action_id: e.payload["capability"] for e in events if e.type == "action.requested"
    }
    started = {e.action_id for e in events if e.type == "action.execution_started"}
    acted_first = {
        e.action_id
        for e in events
        if e.type == "action.requested"
        and e.payload.get("retry_safe")
        and e.action_id not in started
    }
    counts: dict[str, int] = {}
    for event in events:
        original = event.type == "action.completed" and not event.payload.get("replayed")
        if event.type == "action.execution_started" or (
            original and event.action_id in acted_first and event.payload["status"] != "denied"
        ):
            name = f"executed {capability[event.action_id]}"
        elif event.type == "action.completed" and event.payload.get("replayed"):
            name = f"replayed {capability[event.action_id]}"
        else:
            continue
        counts[name] = counts.get(name, 0) + 1
    return counts


def script(target: Path, notes: Path) -> list[dict]:
    return [
        {
            "tool_calls": [
                {"name": "append_line", "arguments": {"path": str(notes), "line": "plan: restart"}},
                {
                    "name": "hold_and_append",
                    "arguments": {
                        "path": str(target),
                        "line": "restarted",
                        "acted_file": str(target) + ".acted",
                        "hold_after": 60,
                    },
                },
            ]
        },
        {"content": "The api was restarted and the notes are written."},
    ]


async def _reset_and_wait(setup: Setup, client, workflow_id: str, old_run: str | None) -> dict:
    run_id = await reset_to_first_task(setup.address, client, workflow_id, old_run, reason="test")
    return await client.get_workflow_handle(workflow_id, run_id=run_id).result()


# 1, 2 --------------------------------------------------------------------------------
async def test_agent_killed_after_a_tool_effect_parks_finishes_and_resets_clean(
    setup: Setup,
) -> None:
    target = setup.folder / "target.txt"
    notes = setup.folder / "notes.txt"
    acted = Path(str(target) + ".acted")
    workflow_id = f"agent-{uuid.uuid4().hex[:8]}"
    agent = AgentInput(goal="restart the api", tools=["append_line", "hold_and_append"])
    # The killed attempt ends when its heartbeat timeout runs out: 5 s (the ledger's for
    # framework activities) rather than the tool default's 30 s, which the test would wait.
    options = LedgerOptions(lease=setup.lease, tool=ActivityConfig(heartbeat_timeout=BEAT))
    plugin = LedgerPlugin(setup.ledger_url, policy=setup.policy, options=options)
    with FakeModelServer(script(target, notes)) as model:
        client = await Client.connect(setup.address, plugins=[plugin])
        async with setup.workflow_worker(client):
            async with setup.tool_worker_process(model.url) as tools:
                handle = await client.start_workflow(
                    AgentWorkflow.run, agent, id=workflow_id, task_queue=setup.task_queue
                )
                await wait_for(lambda: asyncio.to_thread(acted.exists), what="the effect")
                os.killpg(tools.pid, signal.SIGKILL)
            async with setup.tool_worker_process(model.url):
                parked = await wait_for(
                    lambda: open_effects(setup.address, workflow_id), what="the parked tool step"
                )
                assert parked[0]["tool"] == "hold_and_append"
                assert parked[0]["step"] == "turn-0/call-1"
                await temporal_cli(
                    setup.address,
                    "workflow",
                    "signal",
                    "--workflow-id",
                    workflow_id,
                    "--name",
                    "reconcile",
                    "--input",
                    json.dumps(
                        {
                            "key": parked[0]["key"],
                            "verdict": "effect_confirmed",
                            "actor": "ops-alice",
                            "basis": "line is in the file",
                            "output": {"lines": 1},
                        }
                    ),
                )
                result = AgentResult.model_validate(await handle.result())
                assert result.status == "answered"
                assert result.answer == "The api was restarted and the notes are written."
                assert [o.outcome for o in result.observations] == ["done", "done"]
                calls_before_reset = len(model.calls)
                counts_before = ledger_counts(setup.ledger_url)

                again = AgentResult.model_validate(
                    await _reset_and_wait(setup, client, workflow_id, handle.result_run_id)
                )
    assert calls_before_reset == 2
    assert len(model.calls) == 2, "the reset called the model again"
    assert again.answer == result.answer and again.observations == result.observations
    assert lines(target) == ["restarted"] and lines(notes) == ["plan: restart"]
    counts_after = ledger_counts(setup.ledger_url)
    assert counts_after["executed model.chat"] == counts_before["executed model.chat"] == 2
    assert counts_after["executed files.append"] == counts_before["executed files.append"]
    assert counts_after["replayed model.chat"] == counts_before.get("replayed model.chat", 0) + 2
    # The model saw keys from the conversation position, not from its own tool-call ids.
    # (The Idempotency-Key header carries each key in its one wire form.)
    ends = (Ledger.wire_key("/turn-0/model"), Ledger.wire_key("/turn-1/model"))
    assert all(key and key.endswith(ends) for key in model.keys), model.keys
    with Ledger.open(setup.ledger_url) as ledger:
        assert ledger.verify().ok


# 4 -----------------------------------------------------------------------------------
async def test_a_different_prompt_under_a_used_model_key_is_refused(setup: Setup) -> None:
    key = f"model-{uuid.uuid4().hex[:8]}"
    first = ModelRequest(model="m", messages=[ChatMessage(role="user", content="hello")])
    other = ModelRequest(model="m", messages=[ChatMessage(role="user", content="goodbye")])
    with FakeModelServer([{"content": "hi"}]) as model:
        client = await setup.client()
        async with setup.workflow_worker(client, tools=True, model_url=model.url):
            answer = await client.execute_workflow(
                ModelCallWorkflow.run, args=[first, key], id=f"{key}-a", task_queue=setup.task_queue
            )
            replay = await client.execute_workflow(
                ModelCallWorkflow.run, args=[first, key], id=f"{key}-b", task_queue=setup.task_queue
            )
            with pytest.raises(WorkflowFailureError) as refused:
                await client.execute_workflow(
                    ModelCallWorkflow.run,
                    args=[other, key],
                    id=f"{key}-c",
                    task_queue=setup.task_queue,
                )
    assert answer["message"]["content"] == "hi" and replay == answer
    assert len(model.calls) == 1
    cause = refused.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "ToolConflict"
    assert cause.details[0]["dimensions"] == ["payload"]
    with Ledger.open(setup.ledger_url) as ledger:
        refusal = ledger.events(key)[-1]
        assert refusal.type == "action.replay_refused"
        assert refusal.payload["dimensions"] == ["payload"]
        requested = ledger.events(key)[0]
        assert requested.payload["payload"]["messages"][0]["content"] == "hello"


# 7 -----------------------------------------------------------------------------------
async def test_the_step_budget_stops_the_agent_with_a_clear_outcome(setup: Setup) -> None:
    notes = setup.folder / "notes.txt"
    forever = [
        {
            "tool_calls": [
                {"name": "append_line", "arguments": {"path": str(notes), "line": "again"}}
            ]
        }
    ]
    with FakeModelServer(forever) as model:
        client = await setup.client()
        async with setup.workflow_worker(client, tools=True, model_url=model.url):
            result = AgentResult.model_validate(
                await client.execute_workflow(
                    AgentWorkflow.run,
                    AgentInput(goal="loop", tools=["append_line"], max_model_calls=3),
                    id=f"budget-{uuid.uuid4().hex[:8]}",
                    task_queue=setup.task_queue,
                )
            )
    assert result.status == "step_budget_exhausted" and result.answer is None
    assert result.model_calls == 3 and len(model.calls) == 3
    assert len(result.observations) == 3 and lines(notes) == ["again"] * 3
    assert ledger_counts(setup.ledger_url)["executed model.chat"] == 3
