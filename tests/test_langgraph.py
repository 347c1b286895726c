"""LangGraph graphs run by temporalio-langgraph with the ledger plugin, against the real
dev server.

Issue 31, item 1: a reset of a finished graph workflow asks the model nothing and repeats
no tool effect (the model node's output, tool call ids included, and the tool node's
result come from the ledger); the same graph without the ledger acts twice. A tool node
that acted and lost its reply parks the workflow until an operator reconciles it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import signal
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    ToolMessage,
)
from temporal_ledger.activities import LedgerPlugin, Policy
from temporal_ledger.activities._generic import capability_for
from temporal_ledger.activities._langgraph_state import NodeReturn, normalize
from temporal_ledger.activities.langgraph import activity_rules
from temporal_ledger.ledger import Ledger
from temporal_ledger.ledger._models import LedgerEvent
from temporal_ledger.ledger._seam import output_misfit
from temporal_ledger.workflows._protocol import PLACEHOLDER
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError
from temporalio.langgraph import LangGraphPlugin
from temporalio.worker import Worker

from tests.langgraph_graph import (
    CALLS_GRAPH,
    GRAPH_NAME,
    HOLD,
    MESSAGES_CALLS_GRAPH,
    MESSAGES_GRAPH,
    MODEL_CALLS,
    NODE_RUNS,
    TOOL_CALL_IDS,
    LedgeredGraphWorkflow,
    MessagesGraphWorkflow,
    RevisedMessagesGraphWorkflow,
    ToolCallsGraphWorkflow,
    builder,
    calls_builder,
    messages_builder,
)
from tests.temporal_support import (
    ledger_cli,
    ledgered_graph_worker,
    lines,
    listed_as_parked,
    open_effects,
    query_json,
    reset_to_first_task,
    result_after_reset,
    send_update,
    starts_inside,
    template_of,
    temporal_cli,
    wait_for,
    worker_in_process,
)
from worker import temporal_binary

pytestmark = pytest.mark.timeout(120)

POLICY = Policy(
    performers={
        "LedgeredGraphWorkflow": [f"activity.{GRAPH_NAME}.*"],
        "ToolCallsGraphWorkflow": [f"activity.{CALLS_GRAPH}.*"],
    },
    reconcilers=["ops-*"],
)


@contextlib.asynccontextmanager
async def running(address: str, ledger_url: str | None) -> AsyncIterator[tuple[Client, str]]:
    """A worker for the graph workflow; with the ledger plugin unless ``ledger_url`` is None."""
    if ledger_url is None:
        bare = LangGraphPlugin(graphs={GRAPH_NAME: builder()})
        client = await Client.connect(address, plugins=[bare])
        task_queue = f"tq-lg-{uuid.uuid4().hex[:8]}"
        async with Worker(client, task_queue=task_queue, workflows=[LedgeredGraphWorkflow]):
            yield client, task_queue
        return
    async with ledgered_graph_worker(
        address,
        ledger_url,
        graphs={GRAPH_NAME: builder()},
        rules=activity_rules(GRAPH_NAME, model_nodes=["model"], tool_nodes=["tools"]),
        policy=POLICY,
        workflows=[LedgeredGraphWorkflow],
    ) as worker:
        yield worker


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
        again = await result_after_reset(address, client, workflow_id, handle.result_run_id)
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
        assert await listed_as_parked(temporal_address, workflow_id)
        template = template_of(parked["update_command"])
        assert template["output"] == PLACEHOLDER
        verdict = {
            **template,
            "actor": "ops-ann",
            "basis": "line 1 of the file",
            "output": {"tool_calls": [], "results": ["appended by hand-check (line 1)"]},
        }
        # "results" is not in the node's input yet (never written): a channel of the
        # graph, read in the workflow, is a key of the answer; a typo is not.
        typo = {**verdict, "output": {"result": ["appended (line 1)"]}}
        refused, said = await send_update(temporal_address, workflow_id, "reconcile", typo)
        assert refused != 0, said
        assert "result: not a key of the graph's state (its keys: answer, path, prompt, " in said
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
    assert [(r.pattern, r.retry_safe) for r in rules] == [
        ("g.agent", True),
        ("g.tools", False),
        ("g.*", False),
        ("*", False),
    ]
    tools = activity_rules("g", tool_nodes=["tools"], tools_retry_safe=True)[0]
    assert tools.retry_safe
    per_call = activity_rules("g", tool_nodes=["tools"], per_call=True)[0]
    assert per_call.retry_safe and per_call.calls_inside
    assert capability_for("g.tools.send_mail") == "activity.g.tools.send_mail"
    assert capability_for("g.tools") == "activity.g.tools"
    with pytest.raises(ValueError):
        activity_rules(model_nodes=["x"])
    with pytest.raises(ValueError):
        activity_rules("g", model_nodes=["x"], tool_nodes=["x"])
    with pytest.raises(ValueError):
        activity_rules("", model_nodes=["x"])


def test_every_node_and_task_of_the_plugin_is_covered_by_default() -> None:
    """A node nobody listed parks on an unknown effect; so does any activity the plugin
    registers (a Functional API ``@task``, named ``module.qualname``), told by its
    argument, after every rule that names an activity."""
    from temporal_ledger.workflows._seam import covers, ordered
    from temporalio.langgraph._activity import ActivityInput

    call = [ActivityInput(args=({"messages": []},), kwargs={}, langgraph_config={})]
    rules = ordered([*activity_rules("g", model_nodes=["agent"]), *activity_rules("h")])

    def covering(activity_type: str, args: list[Any] | None = call) -> Any:
        return next((r for r in rules if covers(r, activity_type, args)), None)

    assert covering("g.agent").retry_safe
    forgotten = covering("g.forgotten")
    assert forgotten.pattern == "g.*" and not forgotten.retry_safe
    task = covering("tests.langgraph_tasks.append_task")
    assert task.pattern == "*" and not task.retry_safe
    assert covering("h.node").pattern == "h.*", "a rule naming it goes before the default"
    assert covering("send_email", ["not the plugin's argument"]) is None
    # The task's fingerprint leaves LangGraph's per-run bookkeeping out.
    sent = {"args": ["p", "l"], "kwargs": {}, "langgraph_config": {"run_id": "r1"}}
    reset = {**sent, "langgraph_config": {"run_id": "r2", "checkpoint_id": "c2"}}
    assert task.normalize is not None
    assert task.normalize("t", [sent]) == task.normalize("t", [reset])


async def test_a_functional_api_task_nobody_named_is_ledgered_and_a_reset_replays_it(
    temporal_address: str, tmp_path: Path
) -> None:
    from tests.langgraph_tasks import (
        ENTRYPOINT,
        TASK_OPTIONS,
        TASK_RUNS,
        TaskWorkflow,
        append_once,
        append_task,
    )

    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    target = tmp_path / "effects.txt"
    line = f"task-{uuid.uuid4().hex[:6]}"
    plugins: list[Any] = [
        LangGraphPlugin(
            entrypoints={ENTRYPOINT: append_once},
            tasks=[append_task],
            activity_options=TASK_OPTIONS,
        ),
        # No graph, no node, no task named: the defaults cover the task.
        LedgerPlugin(ledger_url, policy=Policy.permissive(), ledger_activities=activity_rules()),
    ]
    client = await Client.connect(temporal_address, plugins=plugins)
    task_queue = f"tq-tasks-{uuid.uuid4().hex[:8]}"
    async with Worker(client, task_queue=task_queue, workflows=[TaskWorkflow]):
        handle = await client.start_workflow(
            TaskWorkflow.run, args=[str(target), line], id=f"lg-{line}", task_queue=task_queue
        )
        answer = await handle.result()
        again = await result_after_reset(temporal_address, client, handle.id, handle.result_run_id)
    assert answer == again == "appended as line 1"
    assert TASK_RUNS[line] == 1, "the reset ran the task again"
    assert target.read_text().splitlines() == [line]
    with Ledger.open(ledger_url) as ledger:
        done = completions(ledger.events())
        assert [e.payload.get("reused_from_action_id") is not None for e in done] == [False, True]
        assert ledger.verify().ok


# -- one key per tool call (ledger_tool_calls in a ToolNode) --------------------------------


@contextlib.asynccontextmanager
async def running_calls(
    address: str, ledger_url: str, policy: Policy = POLICY
) -> AsyncIterator[tuple[Client, str]]:
    """A worker for the two-call graph, its tool node ledgered per tool call."""
    rules = activity_rules(CALLS_GRAPH, model_nodes=["model"], tool_nodes=["tools"], per_call=True)
    async with ledgered_graph_worker(
        address,
        ledger_url,
        graphs={CALLS_GRAPH: calls_builder()},
        rules=rules,
        policy=policy,
        workflows=[ToolCallsGraphWorkflow],
    ) as worker:
        yield worker


@pytest.mark.parametrize("mode", ["async", "sync"])
async def test_two_tool_calls_in_one_node_get_a_key_each_and_a_reset_replays_both(
    temporal_address: str, tmp_path: Path, mode: str
) -> None:
    target = tmp_path / "effects.txt"
    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    prompt = f"two-{mode}-{uuid.uuid4().hex[:6]}"
    workflow_id = f"lg-{prompt}"
    async with running_calls(temporal_address, ledger_url) as (client, tq):
        handle = await client.start_workflow(
            ToolCallsGraphWorkflow.run, args=[prompt, str(target)], id=workflow_id, task_queue=tq
        )
        answer = await handle.result()
        again = await result_after_reset(
            temporal_address, client, workflow_id, handle.result_run_id
        )
    assert answer.startswith("done: appended 'A for") and again == answer
    # The ToolNode runs the two calls concurrently: in either order.
    assert sorted(lines(target)) == [f"A for {prompt}", f"B for {prompt}"]
    assert NODE_RUNS[prompt] == 1, "the reset ran the tool node again"
    first = handle.first_execution_run_id
    with Ledger.open(ledger_url) as ledger:
        events = ledger.events()
        keys = starts_inside(events, f"{workflow_id}/{first}/2")
        assert len(keys) == 2 and set(keys.values()) == {1}, keys
        assert ledger.verify().ok


async def test_a_lost_reply_of_one_call_parks_that_call_until_reconciled(
    temporal_address: str, tmp_path: Path, ledger_url: str
) -> None:
    """Of two calls in one node, the second appends and then fails: the workflow parks on
    that call's key (not the node's); the operator answers with the tool's output through
    the real CLI; the node runs again, the first call replays, and the graph finishes."""
    target = tmp_path / "effects.txt"
    prompt = f"boom-{uuid.uuid4().hex[:6]}"
    workflow_id = f"lg-{prompt}"
    async with running_calls(temporal_address, ledger_url) as (client, tq):
        handle = await client.start_workflow(
            ToolCallsGraphWorkflow.run, args=[prompt, str(target)], id=workflow_id, task_queue=tq
        )
        [parked] = await wait_for(
            lambda: open_effects(temporal_address, workflow_id), what="the call to park"
        )
        first = handle.first_execution_run_id
        node_key = f"{workflow_id}/{first}/2"
        assert parked["key"].startswith(node_key + "/call_"), parked
        assert "append_line" in parked["tool"]
        template = template_of(parked["update_command"])
        assert template["output"] == {"content": PLACEHOLDER}
        verdict = {
            **template,
            "actor": "ops-ann",
            "basis": "line 2 of the file",
            "output": {"content": "appended by hand-check (line 2)"},
        }
        refused, said = await send_update(
            temporal_address, workflow_id, "reconcile", {**verdict, "output": {"x": 1}}
        )
        assert refused != 0, said
        done, said = await send_update(temporal_address, workflow_id, "reconcile", verdict)
        assert done == 0, said
        answer = await handle.result()
    # The ToolNode runs the two calls concurrently: either may have written line 1.
    first_result, second_result = answer.removeprefix("done: ").split(" | ")
    assert first_result.startswith(f"appended 'A for {prompt}' (line ")
    assert second_result == "appended by hand-check (line 2)"
    assert NODE_RUNS[prompt] == 2
    assert sorted(lines(target)) == [f"A for {prompt}", f"B for {prompt} explode"]
    with Ledger.open(ledger_url) as ledger:
        assert ledger.open_effects() == []
        keys = starts_inside(ledger.events(), node_key)
        assert len(keys) == 2 and set(keys.values()) == {1}, keys
        assert ledger.verify().ok


async def test_a_retry_between_the_two_calls_does_not_repeat_the_first(
    temporal_address: str, tmp_path: Path, ledger_url: str
) -> None:
    """The first call acts; the second refuses with no effect (try again): the node
    activity fails and Temporal retries it; the first call replays, the second acts."""
    target = tmp_path / "effects.txt"
    prompt = f"flaky-{uuid.uuid4().hex[:6]}"
    workflow_id = f"lg-{prompt}"
    async with running_calls(temporal_address, ledger_url) as (client, tq):
        handle = await client.start_workflow(
            ToolCallsGraphWorkflow.run, args=[prompt, str(target)], id=workflow_id, task_queue=tq
        )
        answer = await handle.result()
    assert answer.startswith(f"done: appended 'A for {prompt}' (line 1) | appended 'B for")
    assert NODE_RUNS[prompt] == 2, "the node was not retried"
    assert target.read_text().splitlines() == [f"A for {prompt}", f"B for {prompt}"]
    with Ledger.open(ledger_url) as ledger:
        keys = starts_inside(ledger.events(), f"{workflow_id}/{handle.first_execution_run_id}/2")
        # The first call started once; the second twice, its first start refused with
        # no effect (which frees its key to act again).
        assert sorted(keys.values()) == [1, 2], keys
        assert ledger.verify().ok


async def test_a_gated_tool_call_inside_a_node_waits_for_the_approval_of_its_own_key(
    temporal_address: str, tmp_path: Path
) -> None:
    """A policy that gates the tool: each of the two calls waits for an approval of its
    own key and exact request; the node runs again after each, and nothing acts before
    its approval."""
    target = tmp_path / "effects.txt"
    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    prompt = f"gated-{uuid.uuid4().hex[:6]}"
    workflow_id = f"lg-{prompt}"
    policy = POLICY.model_copy(
        update={"gated": [f"activity.{CALLS_GRAPH}.tools.append_line"], "approvers": ["lead-*"]}
    )
    approved: list[str] = []
    async with running_calls(temporal_address, ledger_url, policy) as (client, tq):
        handle = await client.start_workflow(
            ToolCallsGraphWorkflow.run, args=[prompt, str(target)], id=workflow_id, task_queue=tq
        )
        for _ in range(2):
            [waiting] = await wait_for(
                lambda: query_json(temporal_address, workflow_id, "pending_approvals"),
                what="a call to wait for an approval",
            )
            assert waiting["key"] not in approved
            assert len(lines(target)) == len(approved), "a call acted before its approval"
            decision = json.loads(shlex.split(waiting["approve_command"])[-1])
            decision.update(actor="lead-ann", basis="the lines are expected")
            status, said = await send_update(temporal_address, workflow_id, "approve", decision)
            assert status == 0, said
            key = waiting["key"]
            approved.append(key)
            await wait_for(
                lambda key=key: _no_longer_waiting(temporal_address, workflow_id, key),  # type: ignore[misc]
                what="the approved call to stop waiting",
            )
        answer = await handle.result()
    node_key = f"{workflow_id}/{handle.first_execution_run_id}/2"
    assert all(key.startswith(node_key + "/call_") for key in approved), approved
    assert answer.startswith("done: appended 'A for")
    assert sorted(lines(target)) == [f"A for {prompt}", f"B for {prompt}"]
    with Ledger.open(ledger_url) as ledger:
        keys = starts_inside(ledger.events(), node_key)
        assert sorted(keys) == sorted(approved) and set(keys.values()) == {1}, keys
        assert ledger.verify().ok


async def _no_longer_waiting(address: str, workflow_id: str, key: str) -> bool:
    waiting = await query_json(address, workflow_id, "pending_approvals")
    return key not in {w["key"] for w in (waiting if isinstance(waiting, list) else [])}


async def test_a_worker_killed_between_the_two_calls_does_not_repeat_the_first(
    temporal_address: str, tmp_path: Path, ledger_url: str
) -> None:
    """A worker process runs the node: the first call acts and is recorded, the second is
    held before it reaches the ledger, and the process is killed (SIGKILL). A new worker
    runs the node again: the first call replays, the second acts; nothing parks."""
    target = tmp_path / "effects.txt"
    held = tmp_path / "held"
    prompt = f"crash-{uuid.uuid4().hex[:6]}"
    workflow_id = f"lg-{prompt}"
    task_queue = f"tq-lgk-{uuid.uuid4().hex[:8]}"
    client = await Client.connect(temporal_address)
    worker = ("tests.langgraph_worker", temporal_address, ledger_url, task_queue)

    async def first_call_recorded() -> bool:
        if not held.exists() or lines(target) != [f"A for {prompt}"]:
            return False
        with Ledger.open(ledger_url) as ledger:
            return any(e.key.count("/") == 3 for e in completions(ledger.events()))

    async with worker_in_process(*worker, env={HOLD: str(held)}) as doomed:
        handle = await client.start_workflow(
            "ToolCallsGraphWorkflow",
            args=[prompt, str(target)],
            id=workflow_id,
            task_queue=task_queue,
            result_type=str,
        )
        await wait_for(first_call_recorded, what="the first call's record, the second held")
        os.killpg(doomed.pid, signal.SIGKILL)
        await doomed.wait()
    async with worker_in_process(*worker):
        answer = await asyncio.wait_for(handle.result(), 60)
    assert answer.startswith(f"done: appended 'A for {prompt}' (line 1) | appended 'B for")
    assert lines(target) == [f"A for {prompt}", f"B for {prompt}"]
    node_key = f"{workflow_id}/{handle.first_execution_run_id}/2"
    with Ledger.open(ledger_url) as ledger:
        events = ledger.events()
        keys = starts_inside(events, node_key)
        assert len(keys) == 2 and set(keys.values()) == {1}, keys
        first = next(e.key for e in completions(events) if e.key in keys)
        replays = [e for e in completions(events) if e.key == first and e.payload.get("replayed")]
        assert replays, "the first call was not replayed by the new worker"
        assert ledger.open_effects() == []
        assert ledger.verify().ok


# -- a graph over LangGraph's own MessagesState, both wirings --------------------------------

MESSAGES_POLICY = Policy(
    performers={
        "MessagesGraphWorkflow": [
            f"activity.{MESSAGES_GRAPH}.*",
            f"activity.{MESSAGES_CALLS_GRAPH}.*",
        ]
    },
    reconcilers=["ops-*"],
)

#: The graph of each wiring: the tool node as the ledger's unit, or one key per call.
WIRINGS = {"node": MESSAGES_GRAPH, "per_call": MESSAGES_CALLS_GRAPH}


@contextlib.asynccontextmanager
async def running_messages(
    address: str, ledger_url: str, task_queue: str, workflow: type = MessagesGraphWorkflow
) -> AsyncIterator[Client]:
    """A worker for both messages graphs, as the docs wire them."""
    rules = [
        *activity_rules(MESSAGES_GRAPH, model_nodes=["agent"], tool_nodes=["tools"]),
        *activity_rules(
            MESSAGES_CALLS_GRAPH, model_nodes=["agent"], tool_nodes=["tools"], per_call=True
        ),
    ]
    graphs = {
        MESSAGES_GRAPH: messages_builder(),
        MESSAGES_CALLS_GRAPH: messages_builder(per_call=True),
    }
    async with ledgered_graph_worker(
        address,
        ledger_url,
        graphs=graphs,
        rules=rules,
        policy=MESSAGES_POLICY,
        workflows=[workflow],
        task_queue=task_queue,
    ) as (client, _):
        yield client


async def start_note(
    client: Client, graph: str, prompt: str, target: Path, task_queue: str
) -> WorkflowHandle[Any, str]:
    """Start ``MessagesGraphWorkflow`` (``lgm-PROMPT``): the graph ``graph`` notes
    ``prompt`` in ``target``."""
    return await client.start_workflow(
        MessagesGraphWorkflow.run,
        args=[graph, prompt, str(target)],
        id=f"lgm-{prompt}",
        task_queue=task_queue,
    )


@pytest.mark.parametrize("wiring", WIRINGS)
async def test_a_reset_of_a_finished_messages_graph_replays_every_node(
    temporal_address: str, tmp_path: Path, sqlite_url: str, wiring: str
) -> None:
    """LangGraph gives each message without an id a uuid4 drawn in the workflow: a reset
    run's messages have other ids. The fingerprint leaves them out, so the reset asks
    the model nothing and appends nothing."""
    target = tmp_path / "effects.txt"
    prompt = f"reset-{wiring}-{uuid.uuid4().hex[:6]}"
    workflow_id = f"lgm-{prompt}"
    task_queue = f"tq-lgm-{uuid.uuid4().hex[:8]}"
    async with running_messages(temporal_address, sqlite_url, task_queue) as client:
        handle = await start_note(client, WIRINGS[wiring], prompt, target, task_queue)
        answer = await handle.result()
        again = await result_after_reset(
            temporal_address, client, workflow_id, handle.result_run_id
        )
    assert answer == f"done: appended 'line for {prompt}' (line 1)" and again == answer
    assert MODEL_CALLS[prompt] == 2, "the reset asked the model again"
    assert NODE_RUNS[prompt] == 1, "the reset ran the tool node again"
    assert lines(target) == [f"line for {prompt}"]
    with Ledger.open(sqlite_url) as ledger:
        events = ledger.events()
        assert not [e for e in events if e.type == "action.replay_refused"]
        assert ledger.verify().ok


async def test_a_changed_message_after_a_reset_conflicts(
    temporal_address: str, tmp_path: Path, sqlite_url: str
) -> None:
    """The workflow's code changed between the run and its reset: its first message says
    more. That is another request: the model node's key refuses it as a conflict, and
    nothing is asked or appended again."""
    target = tmp_path / "effects.txt"
    prompt = f"changed-{uuid.uuid4().hex[:6]}"
    workflow_id = f"lgm-{prompt}"
    task_queue = f"tq-lgm-{uuid.uuid4().hex[:8]}"
    async with running_messages(temporal_address, sqlite_url, task_queue) as client:
        handle = await start_note(client, MESSAGES_GRAPH, prompt, target, task_queue)
        await handle.result()
    revised = RevisedMessagesGraphWorkflow
    async with running_messages(temporal_address, sqlite_url, task_queue, revised) as client:
        new_run = await reset_to_first_task(
            temporal_address,
            client,
            workflow_id,
            handle.result_run_id,
            reason="test: the code changed",
            until="FAILED",
            within=30,
        )
        with pytest.raises(WorkflowFailureError) as failed:
            await client.get_workflow_handle(workflow_id, run_id=new_run).result()
    cause = failed.value.cause
    while cause is not None and not isinstance(cause, ApplicationError):
        cause = cause.__cause__
    assert isinstance(cause, ApplicationError) and cause.type == "ToolConflict", failed.value
    assert cause.details[0]["dimensions"] == ["payload"]
    assert MODEL_CALLS[prompt] == 2 and NODE_RUNS[prompt] == 1
    assert lines(target) == [f"line for {prompt}"]
    with Ledger.open(sqlite_url) as ledger:
        [refused] = [e for e in ledger.events() if e.type == "action.replay_refused"]
        assert refused.key == f"{workflow_id}/{handle.first_execution_run_id}/1"
        assert ledger.verify().ok


async def current_details(address: str, workflow_id: str) -> str:
    """The run's current details, as ``temporal workflow metadata`` prints them."""
    _, out = await temporal_cli(
        address, "workflow", "metadata", "--workflow-id", workflow_id, "-o", "json"
    )
    return json.dumps(json.loads(out))


@pytest.mark.parametrize("wiring", WIRINGS)
async def test_a_lost_reply_in_a_messages_graph_parks_refuses_misfits_and_resets_cleanly(
    temporal_address: str, tmp_path: Path, sqlite_url: str, wiring: str
) -> None:
    """The tool appends its line and loses its reply: the run parks and shows the pending
    tool call (name, arguments, id) and a template that names it. An answer without
    ``tool_call_id`` and one that is not a JSON object are refused at the update with the
    reason, nothing recorded; the printed command, with only the output filled in,
    reconciles it through the real CLI; the run completes with one line, and a reset of
    the finished run asks the model nothing and appends nothing."""
    target = tmp_path / "effects.txt"
    prompt = f"lose-{wiring}-{uuid.uuid4().hex[:6]}"
    workflow_id = f"lgm-{prompt}"
    task_queue = f"tq-lgm-{uuid.uuid4().hex[:8]}"
    line = f"line for {prompt}"
    async with running_messages(temporal_address, sqlite_url, task_queue) as client:
        handle = await start_note(client, WIRINGS[wiring], prompt, target, task_queue)
        [parked] = await wait_for(
            lambda: open_effects(temporal_address, workflow_id), what="the tool call to park"
        )
        [asked] = parked["tool_calls"]
        call_id = asked["tool_call_id"]
        assert asked == {
            "name": "append_note",
            "arguments": {"path": str(target), "line": line},
            "tool_call_id": call_id,
        }
        details = await current_details(temporal_address, workflow_id)
        assert call_id in details and line in details
        template = template_of(parked["update_command"])
        if wiring == "node":
            answer = {"type": "tool", "tool_call_id": call_id, "name": "append_note"}
            assert template["output"] == {"messages": [{**answer, "content": PLACEHOLDER}]}
            no_id = {"messages": [{"type": "tool", "content": "appended"}]}
            typo = {"mesages": [{**answer, "content": "appended"}]}
            misfits = {
                "messages[0].tool_call_id: missing": no_id,
                "expected object or null": "appended (line 1)",
                "mesages: not a key of the graph's state (its keys: messages)": typo,
            }
        else:
            assert parked["key"].endswith(f"/{call_id}")
            assert template["output"] == {"content": PLACEHOLDER}
            misfits = {"messages": {"messages": []}, "expected object": "appended (line 1)"}
        for reason, output in misfits.items():
            refused, said = await send_update(
                temporal_address,
                workflow_id,
                "reconcile",
                {**template, "actor": "ops-ann", "basis": "line 1", "output": output},
            )
            assert refused != 0 and reason in said, said
        assert len(await open_effects(temporal_address, workflow_id)) == 1
        with Ledger.open(sqlite_url) as ledger:
            assert not [e for e in ledger.events() if e.type == "action.reconciled"]
        # The printed command, run as printed, with the operator's words in its input.
        command = shlex.split(parked["update_command"])
        command[-1] = (
            command[-1]
            .replace(PLACEHOLDER, "appended by hand-check (line 1)")
            .replace("YOUR-NAME", "ops-ann")
            .replace("WHAT-YOU-SAW", "line 1")
        )
        assert command[0] == "temporal"
        cli = await asyncio.create_subprocess_exec(
            temporal_binary(), *command[1:], stdout=asyncio.subprocess.PIPE
        )
        said_by_cli, _ = await asyncio.wait_for(cli.communicate(), 60)
        assert cli.returncode == 0, said_by_cli
        answer_text = await handle.result()
        assert answer_text == "done: appended by hand-check (line 1)"
        model_calls, node_runs = MODEL_CALLS[prompt], NODE_RUNS[prompt]
        assert model_calls == 2 and node_runs == (1 if wiring == "node" else 2)
        again = await result_after_reset(
            temporal_address, client, workflow_id, handle.result_run_id
        )
    assert again == answer_text
    assert (MODEL_CALLS[prompt], NODE_RUNS[prompt]) == (model_calls, node_runs)
    assert lines(target) == [line], "the tool acted again"
    with Ledger.open(sqlite_url) as ledger:
        events = ledger.events()
        assert ledger.open_effects() == []
        assert not [e for e in events if e.type == "action.replay_refused"]
        assert sum(e.type == "action.execution_started" for e in events) == 1
        assert ledger.verify().ok


async def test_an_answer_recorded_elsewhere_that_the_graph_cannot_use_fails_the_step(
    temporal_address: str, tmp_path: Path, sqlite_url: str
) -> None:
    """``temporal-ledger reconcile`` checks the schema the node's activity recorded from
    its input: a tool message without ``tool_call_id`` is refused there, nothing
    recorded. One the schema cannot judge (a status langchain does not know) is
    recorded; the update that then wakes the run answers (it does not hang), the node's
    attempt replays the recorded answer, and the run fails with the reason, once,
    instead of a workflow task that fails on it again and again."""
    target = tmp_path / "effects.txt"
    prompt = f"lose-elsewhere-{uuid.uuid4().hex[:6]}"
    workflow_id = f"lgm-{prompt}"
    task_queue = f"tq-lgm-{uuid.uuid4().hex[:8]}"
    async with running_messages(temporal_address, sqlite_url, task_queue) as client:
        handle = await start_note(client, MESSAGES_GRAPH, prompt, target, task_queue)
        [parked] = await wait_for(
            lambda: open_effects(temporal_address, workflow_id), what="the tool node to park"
        )
        template = template_of(parked["update_command"])
        tool_message = template["output"]["messages"][0]
        for output, refused in (
            ({"type": "tool", "content": "x"}, "tool_call_id: missing"),
            ({**tool_message, "content": "x", "status": "maybe"}, None),
        ):
            status, said = await ledger_cli(
                sqlite_url, "reconcile", parked["key"], "--verdict", "effect_confirmed",
                "--actor", "ops-bob", "--basis", "line 1",
                "--output", json.dumps({"messages": [output]}),
            )  # fmt: skip
            assert (status != 0 and refused in said) if refused else status == 0, said
        right = template["output"]["messages"][0] | {"content": "appended (line 1)"}
        verdict = {
            **template,
            "actor": "ops-ann",
            "basis": "line 1",
            "output": {"messages": [right]},
        }
        status, said = await send_update(temporal_address, workflow_id, "reconcile", verdict)
        assert status == 0, said
        with pytest.raises(WorkflowFailureError) as failed:
            await asyncio.wait_for(handle.result(), 30)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "ToolOutputInvalid", cause
    assert "messages[0].status: Input should be 'success' or 'error'" in cause.message
    assert parked["key"] in cause.message
    assert lines(target) == [f"line for {prompt}"]
    history = await handle.fetch_history()
    assert not [e for e in history.events if e.HasField("workflow_task_failed_event_attributes")]


def _sent(message: BaseMessage) -> dict[str, Any]:
    """A message as the plugin's converter sends it across the activity boundary."""
    [payload] = pydantic_data_converter.payload_converter.to_payloads([message])
    sent: dict[str, Any] = json.loads(payload.data)
    return sent


def _node_call(messages: list[BaseMessage]) -> list[Any]:
    """A node activity's arguments (as JSON) with ``messages`` in its input state."""
    state = {"messages": [_sent(m) for m in messages]}
    return [{"args": [state], "kwargs": {}, "langgraph_config": {"context": None}}]


def test_the_fingerprint_leaves_out_message_ids_and_keeps_what_a_model_reads() -> None:
    asked = AIMessage("", tool_calls=[{"name": "t", "args": {"a": 1}, "id": "call_1"}])

    def identity(*messages: BaseMessage) -> Any:
        return normalize(f"{MESSAGES_GRAPH}.agent", _node_call(list(messages)))

    first = identity(HumanMessage("hi", id="a"), asked, ToolMessage("ok", tool_call_id="call_1"))
    other_ids = identity(
        HumanMessage("hi", id="b"),
        asked.model_copy(update={"id": "x"}),
        ToolMessage("ok", tool_call_id="call_1", id="y"),
    )
    assert first == other_ids
    assert identity(HumanMessage("hi!", id="a"), asked) != identity(HumanMessage("hi"), asked)
    other_call = AIMessage("", tool_calls=[{"name": "t", "args": {"a": 1}, "id": "call_2"}])
    assert identity(asked) != identity(other_call)
    answered_other = identity(asked, ToolMessage("ok", tool_call_id="call_2"))
    assert answered_other != identity(asked, ToolMessage("ok", tool_call_id="call_1"))
    # A RemoveMessage's id is what it removes.
    assert identity(RemoveMessage(id="a")) != identity(RemoveMessage(id="b"))


def test_a_tool_nodes_answer_is_checked_against_its_pending_calls() -> None:
    asked = AIMessage(
        "",
        tool_calls=[
            {"name": "append_note", "args": {"line": "x"}, "id": "call_1"},
            {"name": "append_note", "args": {"line": "y"}, "id": "call_2"},
        ],
    )
    call = _node_call([HumanMessage("note"), asked, ToolMessage("done", tool_call_id="call_1")])
    answer = NodeReturn().answer_for(call)
    assert answer is not None
    assert answer.tool_calls == [
        {"name": "append_note", "arguments": {"line": "y"}, "tool_call_id": "call_2"}
    ]
    [template] = answer.template["messages"]
    assert template == {
        "type": "tool",
        "tool_call_id": "call_2",
        "name": "append_note",
        "content": PLACEHOLDER,
    }
    right = {"messages": [{**template, "content": "appended"}]}
    assert answer.misfit(right) is None
    misfits = {
        "not an array": [right],
        "not a string": "appended",
        "results: not a key of the graph's state (its keys: messages)": {"results": ["a"]},
        'messages[0]: missing "tool_call_id"': {"messages": [{"type": "tool", "content": "a"}]},
        "messages[0]: Message dict must contain 'role' and 'content'": {
            "messages": [{"content": "a"}]
        },
        "messages[0].status:": {"messages": [{**template, "content": "a", "status": "maybe"}]},
        "'call_1' is not a pending call": {
            "messages": [{**template, "tool_call_id": "call_1", "content": "a"}]
        },
        "no tool message answers the call call_2 (append_note)": {"messages": ["appended"]},
    }
    for reason, output in misfits.items():
        problem = answer.misfit(output)
        assert problem is not None and reason in problem, (reason, problem)
        assert "\n" not in problem
    # What the workflow would fail on, whoever recorded it; a node's own update passes.
    assert answer.unusable({"result": {"messages": [{"type": "tool", "content": "a"}]}})
    assert answer.unusable({"result": right}) is None
    assert answer.unusable({"result": None, "langgraph_command": {"goto": "x"}}) is None
    with pytest.raises(ValueError, match="not an array"):
        NodeReturn().result([right])


def _state_call(state: dict[str, Any]) -> list[Any]:
    """A node activity's arguments (as JSON) with ``state`` as its input."""
    return [{"args": [state], "kwargs": {}, "langgraph_config": {"context": None}}]


def _pending_state() -> dict[str, Any]:
    """A messages graph's state with one tool call pending and two other channels."""
    asked = AIMessage("", tool_calls=[{"name": "refund", "args": {"order": "A-1"}, "id": "c1"}])
    return {
        "messages": [_sent(HumanMessage("refund A-1")), _sent(asked)],
        "refund": {"state": "none"},
        "count": 2,
    }


def test_a_tool_nodes_update_without_messages_is_its_own_answer() -> None:
    """A node that returns other state than messages (``{"refund": ...}``) is answered with
    that, pending tool calls or not; messages, where given, must still answer them."""
    answer = NodeReturn().answer_for(_state_call(_pending_state()))
    assert answer is not None and answer.template == {
        "messages": [
            {"type": "tool", "tool_call_id": "c1", "name": "refund", "content": PLACEHOLDER}
        ]
    }
    assert answer.misfit({"refund": {"state": "done", "id": "r-9"}}) is None
    assert answer.misfit({"refund": {"state": "done"}, "count": 3}) is None
    assert answer.misfit(None) is None
    problem = answer.misfit({"refund": {}, "messages": [{"type": "ai", "content": "x"}]})
    assert problem == "messages: no tool message answers the call c1 (refund)"


def test_an_answer_that_would_fail_a_reducer_or_names_no_channel_is_refused() -> None:
    """Each key is one of the state's, and each value has the JSON type of the state's
    value there: a string into an ``operator.add`` int channel would fail in the workflow."""
    answer = NodeReturn().answer_for(_state_call(_pending_state()))
    assert answer is not None
    right = {"type": "tool", "tool_call_id": "c1", "content": "refunded"}
    misfits = {
        "count: a string, where the state holds a number": {"messages": [right], "count": "5"},
        "refund: an array, where the state holds an object": {"refund": [1]},
        "messages: an object, where the state holds an array": {"messages": right},
        "order: not a key of the graph's state (its keys: count, messages, refund)": {
            "messages": [right],
            "order": 5,
        },
    }
    for reason, output in misfits.items():
        assert answer.misfit(output) == reason
        assert answer.misfit({"messages": [right]}) is None
    # Recorded elsewhere: a type the reducer fails on fails the step; a key the graph
    # has no channel for is dropped by LangGraph, nothing fails.
    assert answer.unusable({"result": {"count": "5"}}) == (
        "count: a string, where the state holds a number"
    )
    assert answer.unusable({"result": {"order": 5}}) is None
    # A node's own update may hand add_messages one message instead of a list.
    assert answer.unusable({"result": {"messages": right}}) is None


def test_the_activity_side_schema_refuses_what_the_ledger_must_not_record() -> None:
    """``temporal-ledger reconcile`` checks the schema recorded with the request: a tool
    message without ``tool_call_id`` or with another call's id, a value of another type,
    and a non-object answer are refused there too; the node's real update fits."""
    schema = NodeReturn().output_schema(None, _state_call(_pending_state()))
    assert schema is not None and len(json.dumps(schema)) < 1000
    right = {"type": "tool", "tool_call_id": "c1", "content": "refunded"}
    for fits in ({"messages": [right]}, {"refund": {"id": 1}}, None, {"count": 3}):
        assert output_misfit(schema, fits) is None, fits
    misfits = {
        "messages[0].tool_call_id: missing": {"messages": [{"type": "tool", "content": "x"}]},
        "messages[0].tool_call_id: expected 'c1', got 'c2'": {
            "messages": [{**right, "tool_call_id": "c2"}]
        },
        "messages[0]: expected": {"messages": [{"content": "x"}]},
        "count: expected number": {"count": "5"},
        "output: expected object or null": "refunded",
    }
    for reason, output in misfits.items():
        problem = output_misfit(schema, output)
        assert problem is not None and reason in problem, (reason, problem)
    # Without pending calls only the types are said; not the arguments of another shape.
    settled = NodeReturn().output_schema(None, _state_call({"results": ["a"]}))
    assert settled == {"type": ["object", "null"], "properties": {"results": {"type": "array"}}}
    assert NodeReturn().output_schema(None, [{"other": 1}]) is None
