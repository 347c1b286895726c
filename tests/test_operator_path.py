"""The operator's path on a real cluster: find every parked run, reconcile it safely from
each entry point, see it in the metrics, and recover promptly when a worker dies."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import shlex
import signal
import sqlite3
import sys
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporal_ledger.ledger import Ledger
from temporal_ledger.workflows._protocol import (
    AWAITING_APPROVAL_ATTRIBUTE,
    OPEN_EFFECTS_ATTRIBUTE,
)
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import Client, WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.testing import WorkflowEnvironment

from examples.plan.workflows import AppendLinesWorkflow, Plan, PlannedCall, ScriptedAgentWorkflow
from tests.temporal_support import (
    Setup,
    lines,
    make_setup,
    open_effects,
    query_json,
    start_dev_server,
    temporal_cli,
    wait_for,
)
from tests.temporal_tools import NotifyWorkflow, PlainCallWorkflow
from worker import free_port, temporal_binary

pytestmark = pytest.mark.timeout(240)


def lost_ack(outbox: Path, step: str = "notify") -> PlannedCall:
    """A message that is posted and whose acknowledgement is lost, every time."""
    return PlannedCall(
        step=step,
        tool="post_message",
        arg={"outbox": str(outbox), "channel": "ops", "text": "hello", "lose_ack": True},
    )


def confirmed(key: str, output: Any = None, **extra: Any) -> dict[str, Any]:
    verdict = {"key": key, "verdict": "effect_confirmed", "actor": "ops-alice", "basis": "seen"}
    if output is not None:
        verdict["output"] = output
    return {**verdict, **extra}


async def listed(address: str, task_queue: str) -> list[str]:
    """The runs of this task queue that the search attribute lists as waiting."""
    query = f"{OPEN_EFFECTS_ATTRIBUTE} > 0 AND TaskQueue = '{task_queue}'"
    _, out = await temporal_cli(address, "workflow", "list", "--query", query, "-o", "json")
    return sorted(run["execution"]["workflowId"] for run in json.loads(out or "[]"))


async def test_parked_runs_are_listed_across_workflow_types_and_leave_the_list(
    setup: Setup,
) -> None:
    outbox = setup.folder / "outbox"
    client = await setup.client()
    async with setup.workflow_worker(client, tools=True):
        plan = await client.start_workflow(
            ScriptedAgentWorkflow.run,
            Plan(calls=[lost_ack(outbox)]),
            id=f"list-plan-{uuid.uuid4().hex[:8]}",
            task_queue=setup.task_queue,
        )
        notify = await client.start_workflow(
            NotifyWorkflow.run,
            str(outbox),
            id=f"list-notify-{uuid.uuid4().hex[:8]}",
            task_queue=setup.task_queue,
        )
        done = await client.execute_workflow(
            AppendLinesWorkflow.run,
            args=[str(setup.folder / "done.txt"), ["a"]],
            id=f"list-done-{uuid.uuid4().hex[:8]}",
            task_queue=setup.task_queue,
        )
        assert done == 1
        expected = sorted([plan.id, notify.id])

        async def both_listed() -> bool:
            return await listed(setup.address, setup.task_queue) == expected

        await wait_for(both_listed, within=30, what="the two parked runs in the list")
        # The UI shows why each run waits, and the exact command that answers it.
        _, metadata = await temporal_cli(
            setup.address, "workflow", "metadata", "--workflow-id", plan.id
        )
        key = (await open_effects(setup.address, plan.id))[0]["key"]
        assert "parked" in metadata and key in metadata
        assert "temporal workflow update execute --address" in metadata
        assert '\\"message_id\\": \\"<string>\\"' in metadata or '"message_id"' in metadata

        await plan.execute_update("reconcile", confirmed(key, {"message_id": "m-1"}))
        assert (await plan.result()).steps[0].output == {"message_id": "m-1"}

        async def one_listed() -> bool:
            return await listed(setup.address, setup.task_queue) == [notify.id]

        await wait_for(one_listed, within=30, what="only the other run in the list")
        notify_key = (await open_effects(setup.address, notify.id))[0]["key"]
        await notify.execute_update("reconcile", confirmed(notify_key, {"message_id": "m-2"}))
        assert await notify.result() == "m-2"
        await wait_for(
            lambda: _empty(listed(setup.address, setup.task_queue)), within=30, what="none"
        )


async def _empty(names: Any) -> bool:
    return await names == []


async def test_every_entry_point_refuses_an_effect_confirmed_without_the_output(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    outbox = setup.folder / "outbox"
    client = await setup.client()
    async with setup.workflow_worker(client, tools=True):
        handle = await client.start_workflow(
            ScriptedAgentWorkflow.run,
            Plan(calls=[lost_ack(outbox)]),
            id=f"refuse-{uuid.uuid4().hex[:8]}",
            task_queue=setup.task_queue,
        )
        parked = (await wait_for(lambda: open_effects(setup.address, handle.id), what="park"))[0]
        key = parked["key"]
        assert '"output": {"message_id": "<string>"}' in parked["update_command"]
        with Ledger.open(setup.ledger_url) as ledger:
            before = ledger.events(key)

        # 1. The update: refused in its validator, non-retryable, naming field and type.
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update("reconcile", confirmed(key))
        cause = refused.value.cause
        assert isinstance(cause, ApplicationError) and cause.non_retryable
        assert "message_id: missing (string)" in cause.message
        # 2. The signal: a rejection in the query (and the worker log).
        await handle.signal("reconcile", confirmed(key, {"message_id": 42}))

        async def rejected() -> list[dict[str, Any]]:
            found = await query_json(setup.address, handle.id, "reconcile_rejections")
            return found if isinstance(found, list) else [found] if found else []

        reasons = [r["reason"] for r in await wait_for(rejected, what="the signal's rejection")]
        assert "message_id: expected string, got 42" in reasons[0]
        # 3. The ledger's CLI: exit 1 and the same reason.
        cli = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "temporal_ledger.ledger", "--db", setup.ledger_url,
            "reconcile", key, "--verdict", "effect_confirmed", "--actor", "ops-alice",
            "--basis", "seen", stderr=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        _, err = await cli.communicate()
        assert cli.returncode == 1 and b"message_id: missing (string)" in err
        with Ledger.open(setup.ledger_url) as ledger:
            assert ledger.events(key) == before  # no refusal changed a record
        assert await open_effects(setup.address, handle.id)  # still waiting

        result = await handle.execute_update("reconcile", confirmed(key, {"message_id": "m-7"}))
        assert result["effect"] == "observed"
        assert (await handle.result()).steps[0].output == {"message_id": "m-7"}
    assert len(lines(outbox / "ops.log")) == 1
    about_the_park = [r for r in caplog.records if key in r.getMessage() and "parked" in r.msg]
    assert len(about_the_park) == 1 and about_the_park[0].exc_info is None
    # The activity's hand-over to the workflow is not logged as a failure with a traceback.
    assert not [r for r in caplog.records if r.exc_info and "unknown" in r.getMessage()]


@contextlib.asynccontextmanager
async def dev_server_without_the_attribute() -> AsyncIterator[WorkflowEnvironment]:
    env = await start_dev_server(open_effects_attribute=False)
    try:
        yield env
    finally:
        await env.shutdown()


async def test_without_the_search_attributes_a_step_parks_and_resumes_with_one_warning_each(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    async with dev_server_without_the_attribute() as env:
        setup = make_setup(env.client.service_client.config.target_host, tmp_path)
        outbox = tmp_path / "outbox"
        client = await setup.client()
        async with setup.workflow_worker(client, tools=True):
            handle = await client.start_workflow(
                ScriptedAgentWorkflow.run,
                Plan(calls=[lost_ack(outbox)]),
                id=f"no-attr-{uuid.uuid4().hex[:8]}",
                task_queue=setup.task_queue,
            )
            key = (await wait_for(lambda: open_effects(setup.address, handle.id)))[0]["key"]
            await handle.execute_update("reconcile", confirmed(key, {"message_id": "m-2"}))
            report = await handle.result()
        assert report.steps[0].outcome == "done"
        warnings = [m for m in _messages(caplog) if "search-attribute create" in m]
        assert len(warnings) == 2, warnings
        assert f"--name {OPEN_EFFECTS_ATTRIBUTE} --type Int" in warnings[0]
        assert f"--name {AWAITING_APPROVAL_ATTRIBUTE} --type Int" in warnings[1]

        # Each names the server and namespace it came from: pasted as printed, it registers
        # the attribute there, and a worker started afterwards warns no more.
        for warning in warnings:
            printed = warning.split("register it with: ", 1)[1].split(" (then restart", 1)[0]
            command = shlex.split(printed)
            assert command[:3] == ["temporal", "operator", "search-attribute"], command
            assert command[command.index("--address") + 1] == setup.address, command
            process = await asyncio.create_subprocess_exec(
                temporal_binary(), *command[1:], stderr=asyncio.subprocess.PIPE
            )
            _, stderr = await asyncio.wait_for(process.communicate(), 60)
            assert process.returncode == 0, stderr.decode()
        caplog.clear()
        async with setup.workflow_worker(client, tools=True):
            pass
        assert not [m for m in _messages(caplog) if "search-attribute create" in m]


def _messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records]


async def test_metrics_reach_the_worker_runtimes_prometheus_endpoint(setup: Setup) -> None:
    port = free_port()
    runtime = Runtime(
        telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=f"127.0.0.1:{port}"))
    )
    client = await Client.connect(setup.address, plugins=[setup.plugin()], runtime=runtime)
    outbox = setup.folder / "outbox"
    target = setup.folder / "file.txt"
    same = {"path": str(target), "line": "once"}
    plan = Plan(
        calls=[
            PlannedCall(step="a", tool="append_line", arg=same, key=f"k-{uuid.uuid4().hex}"),
            lost_ack(outbox),
        ]
    )
    plan.calls.insert(1, plan.calls[0].model_copy(update={"step": "b"}))  # same key: replayed
    async with setup.workflow_worker(client, tools=True):
        handle = await client.start_workflow(
            ScriptedAgentWorkflow.run,
            plan,
            id=f"metrics-{uuid.uuid4().hex[:8]}",
            task_queue=setup.task_queue,
        )
        key = (await wait_for(lambda: open_effects(setup.address, handle.id)))[0]["key"]
        text = await asyncio.to_thread(scrape, port)
        assert re.search(r"ledger_parked_steps\{[^}]*\} 1", text), text
        await handle.execute_update("reconcile", confirmed(key, {"message_id": "m-3"}))
        await handle.result()
        text = await asyncio.to_thread(scrape, port)
    assert lines(target) == ["once"]
    for outcome in ("acted", "replayed", "unknown"):
        assert re.search(rf'ledger_tool_calls(_total)?\{{[^}}]*outcome="{outcome}"', text), outcome
    assert re.search(r'ledger_reconciliations(_total)?\{[^}]*verdict="effect_confirmed"', text)
    assert re.search(r'ledger_reconciliations(_total)?\{[^}]*actor="operator"', text)
    assert re.search(r"ledger_parked_steps\{[^}]*\} 0", text)


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return response.read().decode()


async def test_a_worker_killed_during_the_reconcile_activity_costs_seconds(setup: Setup) -> None:
    outbox = setup.folder / "outbox"
    client = await setup.client()
    async with setup.workflow_worker(client):  # workflows here; tools and reconcile there
        async with setup.tool_worker_process() as first:
            handle = await client.start_workflow(
                ScriptedAgentWorkflow.run,
                Plan(calls=[lost_ack(outbox)]),
                id=f"kill-reconcile-{uuid.uuid4().hex[:8]}",
                task_queue=setup.task_queue,
            )
            key = (await wait_for(lambda: open_effects(setup.address, handle.id)))[0]["key"]
            # Hold the ledger's write lock, so the reconcile activity is running when the
            # worker dies: it has started and cannot finish.
            blocker = sqlite3.connect(setup.ledger_url.removeprefix("sqlite:///"))
            blocker.execute("BEGIN IMMEDIATE")
            answer = asyncio.create_task(
                handle.execute_update("reconcile", confirmed(key, {"message_id": "m-4"}))
            )

            async def reconcile_running() -> bool:
                description = await handle.describe()
                return any(
                    a.activity_type.name == "ledger.reconcile"
                    and a.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
                    for a in description.raw_description.pending_activities
                )

            await wait_for(reconcile_running, what="the reconcile activity to run")
            os.killpg(first.pid, signal.SIGKILL)
            killed = time.monotonic()
            await first.wait()
            blocker.rollback()
            blocker.close()
        async with setup.tool_worker_process():
            restarted = time.monotonic()
            result = await asyncio.wait_for(answer, 60)
            resumed = time.monotonic()
        report = await handle.result()
    assert result["effect"] == "observed" and report.steps[0].output == {"message_id": "m-4"}
    print(
        f"\nkill during reconcile: resumed {resumed - restarted:.1f} s after the new worker "
        f"started ({resumed - killed:.1f} s after the kill)"
    )
    assert resumed - restarted <= 15


async def test_a_tool_scheduled_without_run_tool_fails_at_once_saying_so(setup: Setup) -> None:
    client = await setup.client()
    target = setup.folder / "plain.txt"
    async with setup.workflow_worker(client, tools=True):
        with pytest.raises(WorkflowFailureError) as failed:
            await client.execute_workflow(
                PlainCallWorkflow.run,
                str(target),
                id=f"plain-{uuid.uuid4().hex[:8]}",
                task_queue=setup.task_queue,
            )
    activity_error = failed.value.cause
    assert isinstance(activity_error, ActivityError)
    cause = activity_error.cause
    assert isinstance(cause, ApplicationError) and cause.non_retryable
    assert "run_tool(append_line" in cause.message
    assert not target.exists()


async def test_the_cli_prints_a_parked_runs_commands_to_paste_and_show_names_the_run(
    setup: Setup,
) -> None:
    """``temporal-ledger waiting`` prints the run's update command on a line of its own,
    pasted as it is (once filled in) it resumes the run; ``show`` names the run that
    waits, and after the verdict reads as a success confirmed by the operator."""
    import shlex
    import subprocess

    cli = Path(sys.executable).with_name("temporal-ledger")
    workflow_id = f"paste-{uuid.uuid4().hex[:8]}"
    client = await setup.client()
    async with setup.workflow_worker(client, tools=True):
        handle = await client.start_workflow(
            NotifyWorkflow.run,
            str(setup.folder / "outbox"),
            id=workflow_id,
            task_queue=setup.task_queue,
        )
        [parked] = await wait_for(lambda: open_effects(setup.address, workflow_id))
        printed = await asyncio.to_thread(
            subprocess.run,
            [str(cli), "waiting", "--workflow-id", workflow_id, "--address", setup.address],
            capture_output=True,
            text=True,
            check=False,
        )
        assert printed.returncode == 0, printed.stderr
        [command] = [line for line in printed.stdout.splitlines() if line.startswith("temporal ")]
        assert command == parked["update_command"]
        shown = await asyncio.to_thread(
            subprocess.run,
            [str(cli), "--db", setup.ledger_url, "show", parked["key"]],
            capture_output=True,
            text=True,
            check=False,
        )
        assert f"the run '{workflow_id}' waits for it, parked" in shown.stdout
        assert f"temporal-ledger waiting --namespace default --workflow-id {workflow_id}" in (
            shown.stdout
        )
        filled = (
            command.replace("YOUR-NAME", "ops-alice")
            .replace("WHAT-YOU-SAW", "the message is in the outbox")
            .replace("<string>", "m-7")
        )
        words = shlex.split(filled)
        await temporal_cli(setup.address, *words[1:])
        assert await handle.result() == "m-7"
    shown = await asyncio.to_thread(
        subprocess.run,
        [str(cli), "--db", setup.ledger_url, "show", parked["key"]],
        capture_output=True,
        text=True,
        check=False,
    )
    assert "status: succeeded: the effect was confirmed by ops-alice at" in shown.stdout
