"""Workflow replay (determinism) with the plugin, and the README's main job end to end."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from temporal_ledger.activities import LedgerPlugin
from temporal_ledger.activities._replay import replay_histories
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer
from temporalio.workflow import NondeterminismError

from examples.agent.workflows import AGENT_WORKFLOWS
from examples.approval.workflows import APPROVAL_WORKFLOWS
from examples.plan.workflows import EXAMPLE_WORKFLOWS, AppendLinesWorkflow
from examples.probe.workflows import PROBE_WORKFLOWS
from tests.changed_workflows import ChangedAppendLinesWorkflow
from tests.temporal_support import ROOT, Setup, temporal_cli

HISTORIES = sorted((ROOT / "tests" / "histories").glob("*.json"))
ALL_WORKFLOWS = [*EXAMPLE_WORKFLOWS, *AGENT_WORKFLOWS, *APPROVAL_WORKFLOWS, *PROBE_WORKFLOWS]
CLI = Path(sys.executable).with_name("temporal-ledger")

pytestmark = pytest.mark.timeout(300)


def test_checked_in_histories_include_a_reconciled_park() -> None:
    names = {path.name for path in HISTORIES}
    assert {
        "scripted-agent-reconciled.json",
        "scripted-agent-reset.json",
        "agent-reconciled.json",
        "agent-reset.json",
        "approval-approved.json",
        "approval-rejected.json",
        "probe-present.json",
    } <= names
    text = (ROOT / "tests" / "histories" / "scripted-agent-reconciled.json").read_text()
    assert "WORKFLOW_EXECUTION_SIGNALED" in text.upper().replace("EVENT_TYPE_", "")
    assert "ledger.reconcile" in text
    assert "ledger.approve" in (ROOT / "tests" / "histories" / "approval-approved.json").read_text()
    assert "ledger.probe" in (ROOT / "tests" / "histories" / "probe-present.json").read_text()


async def test_checked_in_histories_replay_with_the_plugin() -> None:
    reports = await replay_histories(HISTORIES, workflows=ALL_WORKFLOWS)
    assert reports and all(r.ok for r in reports), [r.error for r in reports]


def test_the_replay_command_replays_checked_in_histories() -> None:
    done = subprocess.run(
        [
            str(CLI),
            "replay",
            *map(str, HISTORIES),
            *(f"--workflow={w.__module__}:{w.__qualname__}" for w in ALL_WORKFLOWS),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(HISTORIES)} replayed, 0 failed" in done.stdout


def test_replaying_an_unregistered_workflow_type_says_how_to_register_it() -> None:
    """One line naming the type and the option that registers it: no core WARN line, no
    traceback, and a non-zero exit status."""
    history = ROOT / "tests" / "histories" / "probe-present.json"
    other = "examples.plan.workflows:AppendLinesWorkflow"
    done = subprocess.run(
        [str(CLI), "replay", str(history), "--workflow", other],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "WARN" not in done.stderr, done.stderr
    [line] = [line for line in done.stdout.splitlines() if line.startswith("FAIL")]
    assert "workflow type 'OrderWorkflow' is not registered" in line, done.stdout
    assert "--workflow MODULE:CLASS" in line and "AppendLinesWorkflow" in line, line
    assert "0 replayed, 1 failed" in done.stdout


async def test_exported_history_replays_and_a_changed_workflow_does_not(setup: Setup) -> None:
    target = setup.folder / "lines.txt"
    workflow_id = f"replay-{uuid.uuid4().hex[:8]}"
    client = await setup.client()
    async with setup.workflow_worker(client, tools=True):
        await client.execute_workflow(
            AppendLinesWorkflow.run,
            args=[str(target), ["a", "b"]],
            id=workflow_id,
            task_queue=setup.task_queue,
        )
    _, exported = await temporal_cli(
        setup.address, "workflow", "show", "--workflow-id", workflow_id, "-o", "json"
    )
    history = setup.folder / f"{workflow_id}.json"
    history.write_text(exported)
    # As the README shows it: temporalio's Replayer with the plugin, no ledger.
    recorded = WorkflowHistory.from_json(workflow_id, exported)
    good = Replayer(workflows=EXAMPLE_WORKFLOWS, plugins=[LedgerPlugin()])
    await good.replay_workflow(recorded)
    bad = Replayer(workflows=[ChangedAppendLinesWorkflow], plugins=[LedgerPlugin()])
    with pytest.raises(NondeterminismError):
        await bad.replay_workflow(recorded)
    code = await asyncio.create_subprocess_exec(
        str(CLI),
        "replay",
        str(history),
        "--workflow",
        "tests.changed_workflows:ChangedAppendLinesWorkflow",
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await code.communicate()
    assert code.returncode == 1, out.decode()
    assert b"FAIL" in out and b"Nondeterminism" in out


def test_the_main_job_runs_to_exit_0(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "demo.py"), "--workdir", str(tmp_path / "demo")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "every effect happened exactly once" in done.stdout
    assert "Signal workflow succeeded" in done.stdout
    # Every effect the demo shows: 3 lines, 2 messages, the refund and the order.
    assert "effects caused               7" in done.stdout
    assert "refused as conflicts         2  (the plan's conflicting call, asked again" in (
        done.stdout
    )
    assert "[ok] no new model call on reset" in done.stdout
    assert "FAILED" not in done.stdout
