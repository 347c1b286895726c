"""The plugin registers the run's queries and updates as it starts: an operator's query
answers before any tool ran, and a workflow's own handler of the same name stays its own."""

from __future__ import annotations

import uuid

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from examples.plan.activities import append_line
from tests.temporal_support import Setup
from tests.temporal_tools import (
    OwnReconcileWorkflow,
    ToolFromUpdateWorkflow,
    WaitsBeforeToolsWorkflow,
)

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


async def test_a_tool_called_from_an_update_leaves_the_workflow_object_alone(
    setup: Setup,
) -> None:
    client = await setup.client()
    async with Worker(
        client,
        task_queue=setup.task_queue,
        workflows=[ToolFromUpdateWorkflow],
        activities=[append_line],
    ):
        handle = await client.start_workflow(
            ToolFromUpdateWorkflow.run,
            id=f"update-tool-{uuid.uuid4().hex[:8]}",
            task_queue=setup.task_queue,
        )
        path = str(setup.folder / "out.txt")
        assert await handle.execute_update(ToolFromUpdateWorkflow.append, path) == ["_done"]
        await handle.result()
    assert (setup.folder / "out.txt").read_text() == "from an update\n"


async def test_run_tool_without_the_plugin_fails_the_run_saying_so(setup: Setup) -> None:
    client = await Client.connect(setup.address, data_converter=pydantic_data_converter)
    async with Worker(
        client,
        task_queue=setup.task_queue,
        workflows=[WaitsBeforeToolsWorkflow],
        # The plugin's sandbox passes this library through; without it, no sandbox.
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):
        handle = await client.start_workflow(
            WaitsBeforeToolsWorkflow.run,
            str(setup.folder / "out.txt"),
            id=f"no-plugin-{uuid.uuid4().hex[:8]}",
            task_queue=setup.task_queue,
        )
        await handle.signal(WaitsBeforeToolsWorkflow.go)
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
    assert "needs the LedgerPlugin" in str(failed.value.cause)
    assert not (setup.folder / "out.txt").exists()
