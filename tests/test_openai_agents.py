"""The OpenAI Agents SDK's Temporal integration with the ledger, against the real dev server.

A scripted model (no network, no API key), a real MCP server from the ``mcp`` package
over stdio whose tools append lines to a file, and function tools that append to another.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from agents.mcp import MCPServerStdio
from temporal_ledger.activities import LedgerOptions, LedgerPlugin, Policy
from temporal_ledger.activities.openai_agents import activity_rules
from temporal_ledger.ledger import Ledger
from temporalio.client import Client, WorkflowHandle
from temporalio.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin
from temporalio.worker import Worker

from examples.openai_agents.model import ScriptedProvider
from tests.answer_checks import answer_refused_everywhere, answer_with_the_template
from tests.openai_support import PROBES, TOOLS, LedgeredSupportWorkflow
from tests.temporal_support import (
    ROOT,
    keep_history,
    lines,
    listed_as_parked,
    open_effects,
    query_json,
    reset_to_first_task,
    send_update,
    template_of,
    wait_for,
    worker_in_process,
)

pytestmark = pytest.mark.timeout(180)


def notes_server(folder: Path) -> MCPServerStdio:
    return MCPServerStdio(
        params={
            "command": sys.executable,
            "args": ["-m", "tests.mcp_notes"],
            "env": {**os.environ, "SUPPORT_DIR": str(folder), "PYTHONPATH": str(ROOT)},
            "cwd": str(ROOT),
        },
        name="notes",
        cache_tools_list=True,
    )


def agents_plugin(folder: Path) -> OpenAIAgentsPlugin:
    return OpenAIAgentsPlugin(
        model_provider=ScriptedProvider(folder / "model-calls.txt"),
        model_params=ModelActivityParameters(start_to_close_timeout=timedelta(seconds=20)),
        mcp_servers={"notes": lambda: notes_server(folder)},
    )


class Desk:
    """One test's support desk: its folder (the tools' files), ledger and task queue."""

    def __init__(
        self,
        address: str,
        folder: Path,
        policy: Policy | None = None,
        *,
        task_queue: str | None = None,
    ) -> None:
        self.address = address
        self.folder = folder
        self.ledger_url = f"sqlite:///{folder / 'ledger.db'}"
        self.task_queue = task_queue or f"tq-oai-{uuid.uuid4().hex[:8]}"
        self.policy = policy or Policy(
            performers={
                "LedgeredSupportWorkflow": ["activity.*"],
                "StatelessProviderWorkflow": ["activity.*"],
            },
            reconcilers=["ops-*"],
            probes=["refund_and_lose_reply"],
            approvers=["lead-*"],
        )

    def ledger_plugin(self, *, probes: bool = False) -> LedgerPlugin:
        rules = activity_rules(tools=TOOLS, probes=PROBES if probes else None)
        return LedgerPlugin(
            self.ledger_url,
            policy=self.policy,
            options=LedgerOptions(lease=2.0),
            ledger_activities=rules,
        )

    @contextlib.asynccontextmanager
    async def running(
        self, *, ledger_first: bool = False, probes: bool = False
    ) -> AsyncIterator[Client]:
        plugins: list[Any] = [agents_plugin(self.folder), self.ledger_plugin(probes=probes)]
        if ledger_first:
            plugins.reverse()
        client = await Client.connect(self.address, plugins=plugins)
        async with Worker(
            client,
            task_queue=self.task_queue,
            workflows=[LedgeredSupportWorkflow],
            activities=TOOLS,
        ):
            yield client

    def worker_process(self) -> contextlib.AbstractAsyncContextManager[Any]:
        """This desk's worker in a process of its own, so that a test can kill it."""
        return worker_in_process(
            "tests.openai_worker",
            self.address,
            self.task_queue,
            str(self.folder),
            env={"SUPPORT_DIR": str(self.folder)},
        )

    async def start(self, client: Client, *calls: str) -> WorkflowHandle[Any, str]:
        workflow_id = f"support-{uuid.uuid4().hex[:8]}"
        return await client.start_workflow(
            LedgeredSupportWorkflow.run,
            "\n".join(calls),
            id=workflow_id,
            task_queue=self.task_queue,
        )

    def notes(self) -> list[str]:
        return lines(self.folder / "notes.txt")

    def refunds(self) -> list[str]:
        return lines(self.folder / "refunds.jsonl")

    def model_calls(self) -> int:
        return len(lines(self.folder / "model-calls.txt"))


def call(tool: str, **arguments: Any) -> str:
    return f"{tool} {json.dumps(arguments)}"


@pytest.fixture
def desk(temporal_address: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Desk:
    monkeypatch.setenv("SUPPORT_DIR", str(tmp_path))  # issue_refund runs in this process
    return Desk(temporal_address, tmp_path)


async def test_a_finished_run_reset_to_its_start_asks_no_model_and_acts_on_nothing(
    desk: Desk,
) -> None:
    async with desk.running() as client:
        handle = await desk.start(
            client,
            call("issue_refund", order="A-1", cents=1250),
            call("add_note", ticket="T-7", text="refunded A-1"),
        )
        answer = await handle.result()
        assert answer == "done: refunded 1250 cents on A-1 | note 1 on T-7"
        assert desk.model_calls() == 3
        new_run = await reset_to_first_task(
            desk.address, client, handle.id, handle.result_run_id, reason="test: replay"
        )
        again = await client.get_workflow_handle(handle.id, run_id=new_run).result()
        await keep_history(client, handle.id, new_run, "openai-reset")
    assert again == answer
    assert desk.model_calls() == 3, "the reset asked the model again"
    assert desk.notes() == ["T-7: refunded A-1"]
    assert len(desk.refunds()) == 1
    with Ledger.open(desk.ledger_url) as ledger:
        assert ledger.verify().ok


async def reconcile(address: str, workflow_id: str, verdict: dict[str, Any]) -> tuple[int, str]:
    return await send_update(address, workflow_id, "reconcile", verdict)


async def test_an_mcp_tool_that_acted_and_lost_its_reply_parks_the_run_until_reconciled(
    desk: Desk,
) -> None:
    async with desk.running() as client:
        handle = await desk.start(
            client,
            call("add_note_and_crash", ticket="T-9", text="customer called"),
            call("count_notes", ticket="T-9"),
        )
        [parked] = await wait_for(
            lambda: open_effects(desk.address, handle.id), what="the MCP call to park"
        )
        assert await listed_as_parked(desk.address, handle.id)
        assert parked["tool"] == "add_note_and_crash (temporalio.mcp.notes.call-tool)"
        template = template_of(parked["update_command"])
        # The operator answers with the tool's result content, not the activity's record.
        assert template["output"] == [{"type": "text", "text": "<what the tool returned>"}]
        verdict = {**template, "actor": "ops-ann", "basis": "the note is line 1 of notes.txt"}
        status, answer = await reconcile(desk.address, handle.id, verdict)
        assert status != 0 and "placeholder" in answer, answer
        verdict["output"] = [{"type": "text", "text": "note 1 on T-9"}]
        status, answer = await reconcile(desk.address, handle.id, verdict)
        assert status == 0, answer
        result = await handle.result()
        await keep_history(client, handle.id, None, "openai-mcp-reconciled")
        # Reset to the start: the operator's output is replayed from the ledger.
        new_run = await reset_to_first_task(
            desk.address, client, handle.id, handle.result_run_id, reason="test: replay"
        )
        assert await client.get_workflow_handle(handle.id, run_id=new_run).result() == result
    # The agent went on with the operator's output, and the note was added once.
    assert result == "done: note 1 on T-9 | 1"
    assert desk.notes() == ["T-9: customer called"]
    with Ledger.open(desk.ledger_url) as ledger:
        assert ledger.open_effects() == [] and ledger.verify().ok


async def test_a_function_tool_that_acted_and_lost_its_reply_parks_instead_of_failing_the_run(
    desk: Desk,
) -> None:
    async with desk.running() as client:
        handle = await desk.start(client, call("refund_and_lose_reply", order="B-2", cents=700))
        [parked] = await wait_for(
            lambda: open_effects(desk.address, handle.id), what="the refund to park"
        )
        template = template_of(parked["update_command"])
        # activity_as_tool schedules by name; the tool's worker tells its result type.
        assert template["output"] == "<string>"
        verdict = {
            **template,
            "actor": "ops-ann",
            "basis": "the refund is in refunds.jsonl",
            "output": "refunded 700 cents on B-2 (confirmed by ops)",
        }
        status, answer = await reconcile(desk.address, handle.id, verdict)
        assert status == 0, answer
        result = await handle.result()
    assert result == "done: refunded 700 cents on B-2 (confirmed by ops)"
    assert len(desk.refunds()) == 1


@pytest.mark.parametrize(
    ("tool", "misfit", "reason", "right", "said"),
    [
        (
            call("refund_and_lose_reply", order="B-3", cents=900),
            {"unexpected": ["refund"]},
            "output: expected string, got {'unexpected': ['refund']}",
            "refunded 900 cents on B-3 (confirmed by ops)",
            "refunded 900 cents on B-3 (confirmed by ops)",
        ),
        (
            call("add_note_and_crash", ticket="T-4", text="called back"),
            [{"type": "text"}],
            "output[0].text: missing (string)",
            [{"type": "text", "text": "note 1 on T-4"}],
            "note 1 on T-4",
        ),
    ],
    ids=["activity_as_tool", "mcp"],
)
async def test_an_answer_that_does_not_fit_the_call_is_refused_and_a_right_one_completes(
    desk: Desk, tool: str, misfit: Any, reason: str, right: Any, said: str
) -> None:
    async with desk.running() as client:
        handle = await desk.start(client, tool)
        parked = await answer_refused_everywhere(
            desk.address, handle.id, desk.ledger_url, misfit, reason
        )
        await answer_with_the_template(
            desk.address, handle.id, parked, right, basis="seen on the far side"
        )
        result = await handle.result()
    assert result == f"done: {said}"


async def test_a_read_only_mcp_tool_of_a_trusted_server_that_dies_runs_again_unparked(
    temporal_address: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SUPPORT_DIR", str(tmp_path))
    trusting = Desk(temporal_address, tmp_path).policy.model_copy(
        update={"trust_hints": ["notes/count_notes*"]}
    )
    desk = Desk(temporal_address, tmp_path, trusting)
    (desk.folder / "notes.txt").write_text("T-1: one\nT-1: two\n")
    (desk.folder / "crash-once").write_text("")
    async with desk.running() as client:
        handle = await desk.start(client, call("count_notes_crashing_once", ticket="T-1"))
        result = await handle.result()
        history = await handle.fetch_history()
    assert result == "done: 2"
    assert not (desk.folder / "crash-once").exists()
    # Never parked: no verdict was asked for or recorded.
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert "ledger.reconcile" not in scheduled
    with Ledger.open(desk.ledger_url) as ledger:
        of_call = [e for e in ledger.events() if e.key.endswith("/3")]
        # A retry-safe call acts before it records anything: the call that died (it
        # removed crash-once) left no record, the call again recorded its request and
        # its outcome together, with no claim or started marker.
        assert "action.execution_started" not in {e.type for e in of_call}
        outcomes = [e.payload["status"] for e in of_call if e.type == "action.completed"]
        assert outcomes[-1:] == ["succeeded"], "the read-only call was not run again"
        assert ledger.open_effects() == [] and ledger.verify().ok


async def test_a_server_that_says_read_only_of_a_tool_that_acts_is_not_believed(
    desk: Desk,
) -> None:
    """Under the default policy no hint relaxes the ledger: the lost reply parks the run,
    and the operator's verdict finishes it with the one note the tool added."""
    async with desk.running() as client:
        handle = await desk.start(client, call("add_note_claiming_to_read", ticket="T-8", text="x"))
        [parked] = await wait_for(
            lambda: open_effects(desk.address, handle.id), what="the call to park"
        )
        assert desk.notes() == ["T-8: x"]
        verdict = {
            **template_of(parked["update_command"]),
            "actor": "ops-ann",
            "basis": "the note is in notes.txt",
            "output": "note 1 on T-8",
        }
        status, answer = await reconcile(desk.address, handle.id, verdict)
        assert status == 0, answer
        assert await handle.result() == "done: note 1 on T-8"
    assert desk.notes() == ["T-8: x"]


async def approve(address: str, workflow_id: str, decision: dict[str, Any]) -> tuple[int, str]:
    return await send_update(address, workflow_id, "approve", decision)


async def test_a_tool_that_may_destroy_waits_for_an_approval_of_its_exact_call(
    temporal_address: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SUPPORT_DIR", str(tmp_path))
    policy = Policy(
        performers={"LedgeredSupportWorkflow": ["activity.*"]},
        reconcilers=["ops-*"],
        approvers=["lead-*"],
        gate_destructive=True,  # close_ticket says nothing to the contrary: it may destroy
    )
    desk = Desk(temporal_address, tmp_path, policy)
    async with desk.running() as client:
        handle = await desk.start(
            client,
            call("add_note", ticket="T-3", text="asked to close"),  # not destructive: acts
            call("close_ticket", ticket="T-3", reason="solved"),
        )
        [waiting] = await wait_for(
            lambda: query_json(desk.address, handle.id, "pending_approvals"),
            what="the call to wait for an approval",
        )
        assert waiting["tool"] == "close_ticket (temporalio.mcp.notes.call-tool)"
        assert desk.notes() == ["T-3: asked to close"], "the gated call acted before approval"
        decision = template_of(waiting["approve_command"])
        decision.update(actor="lead-ann", basis="the customer confirmed")
        status, answer = await approve(
            desk.address, handle.id, {**decision, "fingerprint": "0" * 64}
        )
        assert status != 0 and "fingerprint mismatch" in answer, answer
        status, answer = await approve(desk.address, handle.id, decision)
        assert status == 0, answer
        result = await handle.result()
        await keep_history(client, handle.id, None, "openai-approved")
    assert result == "done: note 1 on T-3 | closed T-3 (note 2)"
    assert desk.notes() == ["T-3: asked to close", "T-3: CLOSED solved"]
    with Ledger.open(desk.ledger_url) as ledger:
        assert ledger.verify(gated=["activity.temporalio.mcp.notes.call-tool"]).ok is False
        assert ledger.verify().ok


async def test_either_plugin_order_leaves_an_app_without_ledgered_activities_as_it_was(
    temporal_address: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The example's app, its plugin beside a bare LedgerPlugin (no ledgered activity):
    the same answer, the same history as without LedgerPlugin, in either order."""
    from examples.openai_agents.workflows import SupportWorkflow

    prompt = "\n".join(
        [call("issue_refund", order="C-3", cents=5), call("add_note", ticket="T-1", text="hi")]
    )
    outcomes = []
    for n, plugins in enumerate(("agents only", "agents, ledger", "ledger, agents")):
        folder = tmp_path / str(n)
        folder.mkdir()
        monkeypatch.setenv("SUPPORT_DIR", str(folder))
        chosen: list[Any] = [agents_plugin(folder)]
        if plugins != "agents only":
            bare = LedgerPlugin(f"sqlite:///{folder / 'ledger.db'}")
            chosen = [*chosen, bare] if plugins.startswith("agents") else [bare, *chosen]
        client = await Client.connect(temporal_address, plugins=chosen)
        task_queue = f"tq-bare-{uuid.uuid4().hex[:8]}"
        async with Worker(
            client, task_queue=task_queue, workflows=[SupportWorkflow], activities=[TOOLS[0]]
        ):
            handle = await client.start_workflow(
                SupportWorkflow.run,
                prompt,
                id=f"bare-{uuid.uuid4().hex[:8]}",
                task_queue=task_queue,
            )
            answer = await handle.result()
            history = await handle.fetch_history()
        kinds = [e.event_type for e in history.events]
        outcomes.append((answer, kinds))
    assert outcomes[1] == outcomes[0] and outcomes[2] == outcomes[0]
    assert outcomes[0][0] == "done: refunded 5 cents on C-3 | note 1 on T-1"


async def test_a_worker_killed_between_the_effect_and_its_report_never_acts_twice(
    desk: Desk,
) -> None:
    """The MCP tool adds its note and hangs; the worker (and its MCP server) is killed
    there. A new worker takes the call over: the ledger finds the dead attempt's lease
    expired, the run parks, and the operator's verdict finishes it."""
    client = await Client.connect(desk.address, plugins=[agents_plugin(desk.folder)])
    async with desk.worker_process() as first:
        handle = await desk.start(client, call("add_note_and_hang", ticket="T-4", text="hello"))
        await wait_for(lambda: asyncio.sleep(0, (desk.folder / "acted").exists()), what="the note")
        os.killpg(first.pid, signal.SIGKILL)
    async with desk.worker_process():
        [parked] = await wait_for(
            lambda: open_effects(desk.address, handle.id), what="the call to park"
        )
        verdict = {
            **template_of(parked["update_command"]),
            "actor": "ops-ann",
            "basis": "the note is in notes.txt",
            "output": "note 1 on T-4",
        }
        status, answer = await reconcile(desk.address, handle.id, verdict)
        assert status == 0, answer
        assert await handle.result() == "done: note 1 on T-4"
    assert desk.notes() == ["T-4: hello"]
    with Ledger.open(desk.ledger_url) as ledger:
        assert ledger.verify().ok


async def test_a_probe_finds_the_lost_refund_and_the_run_goes_on_without_parking(
    desk: Desk,
) -> None:
    async with desk.running(probes=True) as client:
        handle = await desk.start(client, call("refund_and_lose_reply", order="D-4", cents=90))
        result = await handle.result()
        history = await handle.fetch_history()
    assert result == "done: refunded 90 cents on D-4"
    assert len(desk.refunds()) == 1
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert "ledger.probe" in scheduled and "ledger.reconcile" not in scheduled
    with Ledger.open(desk.ledger_url) as ledger:
        shown = ledger.state(next(e.key for e in ledger.events() if e.key.endswith("/3")))
        assert shown.effect.value == "observed"
        assert ledger.verify().ok


async def test_the_deprecated_stateless_mcp_provider_parks_and_resumes_the_same_way(
    desk: Desk,
) -> None:
    """``StatelessMCPServerProvider`` wiring: its ``notes-stateless-call-tool-v2`` call
    acts, loses its reply and parks; the verdict's content becomes its ``CallToolResult``."""
    import warnings

    from temporalio.openai_agents import StatelessMCPServerProvider

    from tests.openai_support import StatelessProviderWorkflow

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        provider = StatelessMCPServerProvider("notes", lambda _=None: notes_server(desk.folder))
        agents = OpenAIAgentsPlugin(
            model_provider=ScriptedProvider(desk.folder / "model-calls.txt"),
            model_params=ModelActivityParameters(start_to_close_timeout=timedelta(seconds=20)),
            mcp_server_providers=[provider],
        )
    client = await Client.connect(desk.address, plugins=[agents, desk.ledger_plugin()])
    async with Worker(client, task_queue=desk.task_queue, workflows=[StatelessProviderWorkflow]):
        handle = await client.start_workflow(
            StatelessProviderWorkflow.run,
            call("add_note_and_crash", ticket="T-5", text="legacy"),
            id=f"legacy-{uuid.uuid4().hex[:8]}",
            task_queue=desk.task_queue,
        )
        [parked] = await wait_for(
            lambda: open_effects(desk.address, handle.id), what="the legacy MCP call to park"
        )
        assert parked["tool"] == "add_note_and_crash (notes-stateless-call-tool-v2)"
        verdict = {
            **template_of(parked["update_command"]),
            "actor": "ops-ann",
            "basis": "the note is in notes.txt",
            "output": "note 1 on T-5",
        }
        status, answer = await reconcile(desk.address, handle.id, verdict)
        assert status == 0, answer
        assert await handle.result() == "done: note 1 on T-5"
    assert desk.notes() == ["T-5: legacy"]


async def test_a_tool_renamed_by_activity_defn_given_as_a_function_is_ledgered(
    temporal_address: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``tools=[fn]`` matches the activity by its function where it runs, so a name given
    with ``@activity.defn(name=...)`` still goes through the ledger: a reset replays it."""
    from tests.openai_support import RenamedToolWorkflow, refund_renamed

    monkeypatch.setenv("SUPPORT_DIR", str(tmp_path))
    desk = Desk(temporal_address, tmp_path)
    plugins = [
        OpenAIAgentsPlugin(
            model_provider=ScriptedProvider(tmp_path / "model-calls.txt"),
            model_params=ModelActivityParameters(start_to_close_timeout=timedelta(seconds=20)),
        ),
        LedgerPlugin(
            desk.ledger_url,
            options=LedgerOptions(lease=2.0),
            ledger_activities=activity_rules(tools=[refund_renamed]),
        ),
    ]
    client = await Client.connect(temporal_address, plugins=plugins)
    async with Worker(
        client,
        task_queue=desk.task_queue,
        workflows=[RenamedToolWorkflow],
        activities=[refund_renamed],
    ):
        handle = await client.start_workflow(
            RenamedToolWorkflow.run,
            call("refund_renamed", order="R-1", cents=300),
            id=f"renamed-{uuid.uuid4().hex[:8]}",
            task_queue=desk.task_queue,
        )
        answer = await handle.result()
        assert answer == "done: refunded 300 cents on R-1"
        new_run = await reset_to_first_task(
            temporal_address, client, handle.id, handle.result_run_id, reason="test: replay"
        )
        again = await client.get_workflow_handle(handle.id, run_id=new_run).result()
        history = await handle.fetch_history()
    assert again == answer
    assert len(desk.refunds()) == 1, "the reset refunded again"
    scheduled = {
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    }
    assert "refund-under-another-name" in scheduled
    with Ledger.open(desk.ledger_url) as ledger:
        ledgered = {
            e.payload["context"]["activity_type"]
            for e in ledger.events()
            if e.type == "action.requested"
        }
        assert ledger.verify().ok
    assert "refund-under-another-name" in ledgered, ledgered
