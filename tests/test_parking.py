"""Parking edge cases: duplicate verdicts, verdicts given elsewhere, outputs that are gone."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from pathlib import Path

import pytest
from temporal_ledger.ledger import Ledger
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError

from examples.plan.workflows import AppendLinesWorkflow, Plan, PlannedCall, ScriptedAgentWorkflow
from tests.temporal_support import (
    ROOT,
    Setup,
    lines,
    open_effects,
    query_json,
    reset_to_first_task,
    temporal_cli,
    wait_for,
)
from tests.temporal_tools import Call, StepsWorkflow

pytestmark = pytest.mark.timeout(180)


def lost_ack_plan(outbox: Path) -> Plan:
    """A message that is posted and whose acknowledgement is lost, every time."""
    return Plan(
        calls=[
            PlannedCall(
                step="notify",
                tool="post_message",
                arg={"outbox": str(outbox), "channel": "ops", "text": "hello", "lose_ack": True},
            )
        ]
    )


def verdict(key: str, name: str, **extra: object) -> dict[str, object]:
    return {"key": key, "verdict": name, "actor": "ops-alice", "basis": "looked", **extra}


async def test_a_duplicate_verdict_is_not_applied_to_the_next_attempt(setup: Setup) -> None:
    outbox = setup.folder / "outbox"
    workflow_id = f"dup-{uuid.uuid4().hex[:8]}"
    client = await setup.client()
    async with setup.workflow_worker(client, tools=True):
        handle = await client.start_workflow(
            ScriptedAgentWorkflow.run,
            lost_ack_plan(outbox),
            id=workflow_id,
            task_queue=setup.task_queue,
        )
        first = (
            await wait_for(lambda: open_effects(setup.address, workflow_id), what="the first park")
        )[0]
        # A double click: the same verdict twice, before the first one is processed.
        await handle.signal("reconcile", verdict(first["key"], "no_effect_confirmed"))
        await handle.signal("reconcile", verdict(first["key"], "no_effect_confirmed"))

        async def parked_again() -> dict | None:
            effects = await open_effects(setup.address, workflow_id)
            return next((e for e in effects if e["action_id"] != first["action_id"]), None)

        second = await wait_for(parked_again, what="the second park")
        await asyncio.sleep(1.0)  # time for a wrongly applied leftover to act again
        assert len(lines(outbox / "ops.log")) == 2, "the leftover verdict acted a third time"
        rejected = await query_json(setup.address, workflow_id, "reconcile_rejections")
        rejected = rejected if isinstance(rejected, list) else [rejected]
        assert any(
            "no longer parked" in r["reason"] or "no parked effect" in r["reason"] for r in rejected
        )
        # A verdict naming the first action is refused for the second one.
        await handle.signal(
            "reconcile",
            verdict(
                second["key"],
                "effect_confirmed",
                action_id=first["action_id"],
                output={"message_id": "m"},
            ),
        )

        async def stale_refused() -> bool:
            found = await query_json(setup.address, workflow_id, "reconcile_rejections")
            found = found if isinstance(found, list) else [found]
            return any("the verdict is for action" in r["reason"] for r in found)

        await wait_for(stale_refused, what="the stale verdict to be refused")
        assert "action_id" in json.loads(
            second["signal_command"].split("--input ", 1)[1].strip("'")
        )
        await handle.signal(
            "reconcile",
            verdict(
                second["key"],
                "effect_confirmed",
                action_id=second["action_id"],
                output={"message_id": "m2"},
            ),
        )
        report = await handle.result()
    assert report.steps[0].output == {"message_id": "m2"}
    assert len(lines(outbox / "ops.log")) == 2


@pytest.mark.parametrize("nudge", ["signal", "update"])
async def test_a_key_reconciled_with_the_cli_lets_the_parked_step_go_on(
    setup: Setup, nudge: str
) -> None:
    outbox = setup.folder / "outbox"
    workflow_id = f"cli-{uuid.uuid4().hex[:8]}"
    client = await setup.client()
    async with setup.workflow_worker(client, tools=True):
        handle = await client.start_workflow(
            ScriptedAgentWorkflow.run,
            lost_ack_plan(outbox),
            id=workflow_id,
            task_queue=setup.task_queue,
        )
        parked = (
            await wait_for(lambda: open_effects(setup.address, workflow_id), what="the park")
        )[0]
        done = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "temporal_ledger.ledger",
            "--db",
            setup.ledger_url,
            "reconcile",
            parked["key"],
            "--verdict",
            "effect_confirmed",
            "--actor",
            "ops-bob",
            "--basis",
            "saw it in the outbox",
            "--output",
            '{"message_id": "from-cli"}',
            cwd=ROOT,
        )
        assert await done.wait() == 0
        # Any verdict wakes the step; the ledger's answer (the CLI's) stands. The update
        # that nudges it succeeds (exit status 0), answering with the verdict that stands.
        command = ["signal"] if nudge == "signal" else ["update", "execute"]
        code, answer = await temporal_cli(
            setup.address,
            "workflow",
            *command,
            "--workflow-id",
            workflow_id,
            "--name",
            "reconcile",
            "--input",
            json.dumps(verdict(parked["key"], "still_unknown")),
            check=False,
        )
        assert code == 0, answer
        if nudge == "update":
            assert "effect_confirmed" in answer and "still_unknown" not in answer, answer
        report = await handle.result()
    assert report.steps[0].outcome == "done"
    assert report.steps[0].output == {"message_id": "from-cli"}
    assert len(lines(outbox / "ops.log")) == 1


async def test_a_compacted_output_fails_the_reset_run_cleanly(setup: Setup) -> None:
    target = setup.folder / "lines.txt"
    workflow_id = f"compacted-{uuid.uuid4().hex[:8]}"
    client = await setup.client()
    async with setup.workflow_worker(client, tools=True):
        handle = await client.start_workflow(
            AppendLinesWorkflow.run,
            args=[str(target), ["a"]],
            id=workflow_id,
            task_queue=setup.task_queue,
        )
        assert await handle.result() == 1
        async with Ledger.open(setup.ledger_url) as ledger:
            assert await ledger.compact(older_than=0) == 1
        run_id = await reset_to_first_task(
            setup.address,
            client,
            workflow_id,
            handle.result_run_id,
            reason="after retention",
            until="FAILED",
        )
        with pytest.raises(WorkflowFailureError) as failed:
            await client.get_workflow_handle(workflow_id, run_id=run_id).result()
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "ToolOutputCompacted"
    assert lines(target) == ["a"]


async def test_a_bad_argument_fails_the_workflow_not_its_task(setup: Setup) -> None:
    client = await setup.client()
    async with setup.workflow_worker(client, tools=True):
        with pytest.raises(WorkflowFailureError) as failed:
            await client.execute_workflow(
                StepsWorkflow.run,
                [Call(tool="hold_and_append", step="s", arg={"path": "/tmp/x"})],  # no line
                id=f"badarg-{uuid.uuid4().hex[:8]}",
                task_queue=setup.task_queue,
            )
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "ToolInvalidRequest"
    assert "line" in cause.message
