"""The plugin registers the run's queries and updates as it starts: an operator's query
answers before any tool ran, and a workflow's own handler of the same name stays its own."""

from __future__ import annotations

import uuid

import pytest
from temporalio.worker import Worker

from examples.plan.activities import append_line
from tests.temporal_support import Setup
from tests.temporal_tools import OwnReconcileWorkflow, WaitsBeforeToolsWorkflow

pytestmark = pytest.mark.timeout(120)


async def test_the_queries_answer_before_the_first_tool_runs(setup: Setup) -> None:
    client = await setup.client()
    async with Worker(
        client,
        task_queue=setup.task_queue,
        workflows=[WaitsBeforeToolsWorkflow],
        activities=[append_line],
    ):
        handle = await client.start_workflow(
            WaitsBeforeToolsWorkflow.run,
            str(setup.folder / "out.txt"),
            id=f"waits-{uuid.uuid4().hex[:8]}",
            task_queue=setup.task_queue,
        )
        assert await handle.query("open_effects") == []
        assert await handle.query("pending_approvals") == []
        await handle.signal(WaitsBeforeToolsWorkflow.go)
        await handle.result()
    assert (setup.folder / "out.txt").read_text() == "went\n"


async def test_a_workflows_own_handler_of_the_same_name_stays_its_own(setup: Setup) -> None:
    client = await setup.client()
    async with Worker(client, task_queue=setup.task_queue, workflows=[OwnReconcileWorkflow]):
        handle = await client.start_workflow(
            OwnReconcileWorkflow.run,
            id=f"own-{uuid.uuid4().hex[:8]}",
            task_queue=setup.task_queue,
        )
        await handle.signal("reconcile", "mine")
        assert await handle.result() == ["mine"]
