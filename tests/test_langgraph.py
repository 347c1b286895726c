"""LangGraph graphs run by temporalio-langgraph with the ledger plugin, against the real
dev server.

Issue 31, item 1: a reset of a finished graph workflow asks the model nothing and repeats
no tool effect (the model node's output, tool call ids included, and the tool node's
result come from the ledger); the same graph without the ledger acts twice. A tool node
that acted and lost its reply parks the workflow until an operator reconciles it.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporal_ledger.activities import LedgerOptions, LedgerPlugin, Policy
from temporal_ledger.activities._generic import capability_for
from temporal_ledger.activities.langgraph import activity_rules
from temporal_ledger.ledger import Ledger
from temporal_ledger.ledger._models import LedgerEvent
from temporal_ledger.workflows._protocol import PLACEHOLDER
from temporalio.client import Client
from temporalio.langgraph import LangGraphPlugin
from temporalio.worker import Worker

from tests.langgraph_graph import (
    GRAPH_NAME,
    MODEL_CALLS,
    TOOL_CALL_IDS,
    LedgeredGraphWorkflow,
    builder,
)
from tests.temporal_support import (
    open_effects,
    reset_to_first_task,
    send_update,
    temporal_cli,
    wait_for,
)

pytestmark = pytest.mark.timeout(120)

POLICY = Policy(
    performers={"LedgeredGraphWorkflow": [f"activity.{GRAPH_NAME}.*"]}, reconcilers=["ops-*"]
)


@contextlib.asynccontextmanager
async def running(address: str, ledger_url: str | None) -> AsyncIterator[tuple[Client, str]]:
    """A worker for the graph workflow; with the ledger plugin unless ``ledger_url`` is None."""
    plugins: list[object] = [LangGraphPlugin(graphs={GRAPH_NAME: builder()})]
    if ledger_url is not None:
        rules = activity_rules(GRAPH_NAME, model_nodes=["model"], tool_nodes=["tools"])
        plugins.append(
            LedgerPlugin(
                ledger_url,
                policy=POLICY,
                options=LedgerOptions(lease=2.0),
                ledger_activities=rules,
            )
        )
    client = await Client.connect(address, plugins=plugins)  # type: ignore[arg-type]
    task_queue = f"tq-lg-{uuid.uuid4().hex[:8]}"
    async with Worker(client, task_queue=task_queue, workflows=[LedgeredGraphWorkflow]):
        yield client, task_queue


def completions(events: list[LedgerEvent]) -> list[LedgerEvent]:
    return [e for e in events if e.type == "action.completed"]


async def run_then_reset(
    address: str, ledger_url: str | None, tmp_path: Path, prompt: str
) -> tuple[str, str, str, str]:
    """Run the graph to the end, reset it to its first task; both answers and run ids."""
    target = tmp_path / "effects.txt"
    workflow_id = f"lg-{prompt}"
    async with running(address, ledger_url) as (client, task_queue):
        handle = await client.start_workflow(
            LedgeredGraphWorkflow.run,
            args=[prompt, str(target)],
            id=workflow_id,
            task_queue=task_queue,
        )
        answer = await handle.result()
        new_run = await reset_to_first_task(
            address,
            client,
            workflow_id,
            handle.result_run_id,
            reason="test: run the graph again from the start",
            within=30,
        )
        again = await client.get_workflow_handle(workflow_id, run_id=new_run).result()
    assert handle.first_execution_run_id is not None
    return answer, again, workflow_id, handle.first_execution_run_id


async def test_reset_of_finished_graph_replays_model_and_tool_node(
    temporal_address: str, tmp_path: Path
) -> None:
    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    prompt = f"reset-{uuid.uuid4().hex[:6]}"
    answer, again, workflow_id, first_run = await run_then_reset(
        temporal_address, ledger_url, tmp_path, prompt
    )
    assert answer.startswith("done: appended")
    assert again == answer
    assert MODEL_CALLS[prompt] == 2, "the reset asked the model again"
    assert len(TOOL_CALL_IDS[prompt]) == 1, "the reset ran the tool node again"
    assert (tmp_path / "effects.txt").read_text().splitlines() == [f"line for {prompt}"]
    with Ledger.open(ledger_url) as ledger:
        done = completions(ledger.events())
        # model, tools, model: each once fresh and once replayed.
        assert len(done) == 6, [e.payload for e in done]
        assert sum(bool(e.payload.get("replayed")) for e in done) == 3
        assert ledger.verify().ok
        assert {e.key for e in done} == {f"{workflow_id}/{first_run}/{n}" for n in "123"}


async def test_without_the_ledger_a_reset_acts_again(temporal_address: str, tmp_path: Path) -> None:
    """The same graph and reset with LangGraphPlugin alone: the model is asked again, its
    new tool call has a new id, and the tool appends a second line."""
    prompt = f"bare-{uuid.uuid4().hex[:6]}"
    answer, again, _, _ = await run_then_reset(temporal_address, None, tmp_path, prompt)
    assert answer.startswith("done: appended") and again.startswith("done: appended")
    assert MODEL_CALLS[prompt] == 4
    first, second = TOOL_CALL_IDS[prompt]
    assert first != second
    assert (tmp_path / "effects.txt").read_text().splitlines() == [f"line for {prompt}"] * 2


async def test_a_tool_node_that_acted_and_lost_its_reply_parks_until_reconciled(
    temporal_address: str, tmp_path: Path
) -> None:
    """The tool appends its line and then fails: the graph's workflow parks (it is not
    failed, and the tool is not run again); the operator confirms with the node's own
    return value through the real ``temporal`` CLI, and the graph finishes with it."""
    target = tmp_path / "effects.txt"
    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    prompt = f"explode-{uuid.uuid4().hex[:6]}"
    workflow_id = f"lg-{prompt}"
    async with running(temporal_address, ledger_url) as (client, tq):
        handle = await client.start_workflow(
            LedgeredGraphWorkflow.run, args=[prompt, str(target)], id=workflow_id, task_queue=tq
        )
        [parked] = await wait_for(
            lambda: open_effects(temporal_address, workflow_id), what="the tool node to park"
        )
        _, listed = await temporal_cli(
            temporal_address,
            "workflow",
            "list",
            "--query",
            f"LedgerOpenEffects > 0 AND WorkflowId = '{workflow_id}'",
            "-o",
            "json",
        )
        assert workflow_id in listed
        template = json.loads(shlex.split(parked["update_command"])[-1])
        assert template["output"] == PLACEHOLDER
        verdict = {
            **template,
            "actor": "ops-ann",
            "basis": "line 1 of the file",
            "output": {"tool_calls": [], "results": ["appended by hand-check (line 1)"]},
        }
        done, said = await send_update(temporal_address, workflow_id, "reconcile", verdict)
        assert done == 0, said
        answer = await handle.result()
    assert answer == "done: appended by hand-check (line 1)"
    assert MODEL_CALLS[prompt] == 2
    assert len(TOOL_CALL_IDS[prompt]) == 1, "the tool node ran again"
    assert target.read_text().splitlines() == [f"line for {prompt}"], "the tool acted again"
    with Ledger.open(ledger_url) as ledger:
        assert ledger.open_effects() == []
        assert ledger.verify().ok


def test_rules_and_capabilities() -> None:
    rules = activity_rules("g", model_nodes=["agent"], tool_nodes=["tools"])
    assert [(r.pattern, r.retry_safe) for r in rules] == [("g.agent", True), ("g.tools", False)]
    [tools] = activity_rules("g", tool_nodes=["tools"], tools_retry_safe=True)
    assert tools.retry_safe
    assert capability_for("g.tools") == "activity.g.tools"
    with pytest.raises(ValueError):
        activity_rules("g")
    with pytest.raises(ValueError):
        activity_rules("g", model_nodes=["x"], tool_nodes=["x"])
    with pytest.raises(ValueError):
        activity_rules("", model_nodes=["x"])
