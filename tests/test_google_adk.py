"""Google ADK agents on Temporal (``temporalio-google-adk``) with the ledger plugin,
against the real dev server: a scripted model (a ``BaseLlm``, no API key), tools run
with ``activity_as_tool`` and the MCP notes server as a ``TemporalMcpToolSet``.

A reset replays the model's answers and the tool's effect; a tool that acted and lost
its reply parks the agent's run until an operator answers with ``temporal workflow
update``; without the ledger the same app acts twice.
"""

from __future__ import annotations

import contextlib
import gc
import json
import shlex
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from google.adk.models import LlmRequest
from temporal_ledger.activities import LedgerOptions, LedgerPlugin, Policy
from temporal_ledger.activities.google_adk import activity_rules
from temporal_ledger.ledger import Ledger
from temporal_ledger.ledger._models import LedgerEvent
from temporal_ledger.workflows._protocol import PLACEHOLDER
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.google_adk import (
    GoogleAdkPlugin,
    TemporalMcpToolSetProvider,
    TemporalStatefulMcpToolSetProvider,
)
from temporalio.worker import Worker

from tests.answer_checks import answer_refused_everywhere, answer_with_the_template
from tests.google_adk_support import (
    MODEL,
    MODEL_CALLS,
    NOTES_DIR,
    TOOLS,
    TOOLSET,
    notes,
    notes_toolset,
    script,
)
from tests.google_adk_workflows import AdkAgentWorkflow, AdkStatefulWorkflow
from tests.temporal_support import (
    confirm_no_effect,
    lines,
    listed_as_parked,
    open_effects,
    query_json,
    reset_to_first_task,
    send_update,
    template_of,
    wait_for,
)

pytestmark = pytest.mark.timeout(180)

POLICY = Policy(
    performers={"Adk*Workflow": ["activity.*"]},
    reconcilers=["ops-*"],
)


def rules() -> list[Any]:
    return activity_rules(tools=TOOLS)


@contextlib.asynccontextmanager
async def running(
    address: str,
    ledger_url: str | None,
    *,
    ledger_first: bool = False,
    policy: Policy = POLICY,
    stateful: bool = False,
) -> AsyncIterator[tuple[Client, str]]:
    """A client and a worker of the ADK app, with the ledger plugin unless ``ledger_url``
    is None (the same app, unledgered); ``stateful``: its MCP toolset keeps one session
    per run, on ADK's nested worker."""
    provider: Any = (
        TemporalStatefulMcpToolSetProvider(TOOLSET, notes_toolset)
        if stateful
        else TemporalMcpToolSetProvider(TOOLSET, notes_toolset)
    )
    adk = GoogleAdkPlugin(toolset_providers=[provider])
    plugins: list[Any] = [adk]
    if ledger_url is not None:
        ledger = LedgerPlugin(
            ledger_url,
            policy=policy,
            options=LedgerOptions(lease=2.0),
            ledger_activities=rules(),
        )
        plugins = [ledger, adk] if ledger_first else [adk, ledger]
    client = await Client.connect(address, plugins=plugins)
    task_queue = f"tq-adk-{uuid.uuid4().hex[:8]}"
    try:
        async with Worker(
            client,
            task_queue=task_queue,
            workflows=[AdkAgentWorkflow, AdkStatefulWorkflow],
            activities=TOOLS,
        ):
            yield client, task_queue
    finally:
        # The runs the worker evicted leave ADK's async generators behind; collected
        # later, their finalizers would run wherever the collector happens to start
        # (inside a compile(), where CPython 3.11 then fails): collect them here.
        gc.collect()


def completions(events: list[LedgerEvent]) -> list[LedgerEvent]:
    return [e for e in events if e.type == "action.completed"]


def refunds(folder: Path) -> list[dict[str, Any]]:
    path = folder / "refunds.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_plugins_combine_in_either_order_and_keep_adks_converter() -> None:
    """ADK installs its converter (pydantic, without unset fields) only over the default;
    the ledger leaves the choice to it, whichever plugin comes first."""
    adk_converter = None
    for order in ("adk-first", "ledger-first"):
        ledger = LedgerPlugin("sqlite:///unused.db", ledger_activities=rules())
        plugins: list[Any] = [GoogleAdkPlugin(), ledger]
        if order == "ledger-first":
            plugins.reverse()
        config: Any = {"data_converter": None, "interceptors": [], "plugins": plugins}
        for each in plugins:
            config = each.configure_client(config)
        kind = config["data_converter"].payload_converter_class
        assert kind.__module__.startswith("temporalio.google_adk"), (order, kind)
        adk_converter = adk_converter or kind
        assert kind is adk_converter


def test_adks_model_activity_is_told_from_one_of_the_same_name() -> None:
    """Strands' model activity is ``invoke_model`` too: the rule takes ADK's by its
    argument's type, on both sides."""
    from temporal_ledger.workflows._seam import covers

    [model, streaming] = [r for r in rules() if r.pattern.startswith("invoke_model")]
    request = LlmRequest(model=MODEL)
    assert covers(model, "invoke_model", [request])
    assert not covers(model, "invoke_model", [{"messages": []}])
    assert not covers(model, "invoke_model", ["a prompt", {}])

    class Streaming:
        llm_request = request

    assert covers(streaming, "invoke_model_streaming", [Streaming()])


async def test_reset_of_finished_agent_run_replays_model_and_tool(
    temporal_address: str, tmp_path: Path
) -> None:
    run = f"reset-{uuid.uuid4().hex[:6]}"
    prompt = script(run, "issue_refund", order="A-1", cents=500)
    workflow_id = f"adk-{run}"
    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    async with running(temporal_address, ledger_url) as (client, task_queue):
        handle = await client.start_workflow(
            AdkAgentWorkflow.run,
            args=[prompt, str(tmp_path)],
            id=workflow_id,
            task_queue=task_queue,
        )
        answer = await handle.result()
        assert answer == "done: refunded 500 cents on A-1"
        assert MODEL_CALLS[run] == 2
        assert refunds(tmp_path) == [{"order": "A-1", "cents": 500}]
        # ADK schedules its activities without a heartbeat timeout: each ledgered one
        # (model calls, the tool, the MCP toolset's) gets the ledger's, 5 s by default.
        scheduled = {
            event.activity_task_scheduled_event_attributes.activity_type.name: (
                event.activity_task_scheduled_event_attributes.heartbeat_timeout.ToTimedelta()
            )
            async for event in handle.fetch_history_events()
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        }
        assert {"invoke_model", "issue_refund"} <= set(scheduled), scheduled
        assert set(scheduled.values()) == {timedelta(seconds=5)}, scheduled

        new_run = await reset_to_first_task(
            temporal_address,
            client,
            workflow_id,
            handle.result_run_id,
            reason="test: replay the ADK agent from the ledger",
            within=60,
        )
        again = await client.get_workflow_handle(workflow_id, run_id=new_run).result()

    assert again == answer
    assert MODEL_CALLS[run] == 2, "the reset asked the model again"
    assert refunds(tmp_path) == [{"order": "A-1", "cents": 500}], "the tool acted again"
    with Ledger.open(ledger_url) as ledger:
        done = completions(ledger.events())
        by_type = sorted(
            e.payload["instruction"] for e in ledger.events() if e.type == "action.requested"
        )
        # Two model calls, the MCP tool list, one tool call: each fresh, then replayed.
        assert [e.payload.get("replayed", False) for e in done].count(True) == len(done) // 2
        assert by_type.count("invoke_model") == 4 and by_type.count("issue_refund") == 2
        assert ledger.verify().ok


async def test_without_the_ledger_a_reset_acts_again(temporal_address: str, tmp_path: Path) -> None:
    """The same app and the same reset, without ``LedgerPlugin``: the model is asked
    again and the refund is paid twice. This is what the test above prevents."""
    run = f"plain-{uuid.uuid4().hex[:6]}"
    prompt = script(run, "issue_refund", order="B-2", cents=700)
    workflow_id = f"adk-{run}"
    async with running(temporal_address, None) as (client, task_queue):
        handle = await client.start_workflow(
            AdkAgentWorkflow.run,
            args=[prompt, str(tmp_path)],
            id=workflow_id,
            task_queue=task_queue,
        )
        answer = await handle.result()
        new_run = await reset_to_first_task(
            temporal_address,
            client,
            workflow_id,
            handle.result_run_id,
            reason="test: the unledgered app acts again",
            within=60,
        )
        assert await client.get_workflow_handle(workflow_id, run_id=new_run).result() == answer
    assert MODEL_CALLS[run] == 4
    assert refunds(tmp_path) == [{"order": "B-2", "cents": 700}] * 2


async def reconcile_parked(address: str, workflow_id: str, output: Any) -> dict[str, Any]:
    """Find the parked call with ``temporal workflow list``, try its template as it is
    (refused: a placeholder), then answer with ``output`` through the real CLI."""
    [parked] = await wait_for(
        lambda: open_effects(address, workflow_id), what="the tool call to park", within=90
    )
    assert await listed_as_parked(address, workflow_id)
    template = template_of(parked["update_command"])
    verdict = {**template, "actor": "ops-ann", "basis": "checked the far side"}
    refused, said = await send_update(address, workflow_id, "reconcile", verdict)
    assert refused != 0 and "placeholder" in said, said
    verdict["output"] = output
    done, said = await send_update(address, workflow_id, "reconcile", verdict)
    assert done == 0, said
    return template


async def test_a_tool_that_acted_and_lost_its_reply_parks_until_reconciled(
    temporal_address: str, tmp_path: Path
) -> None:
    """The tool refunds and then fails: the run parks (the tool is not run again, the
    run does not fail); ``temporal workflow update ... reconcile`` answers with the
    tool's return value, and the agent finishes with it."""
    run = f"lost-{uuid.uuid4().hex[:6]}"
    prompt = script(run, "refund_and_lose_reply", order="C-3", cents=900)
    workflow_id = f"adk-{run}"
    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    async with running(temporal_address, ledger_url) as (client, task_queue):
        handle = await client.start_workflow(
            AdkAgentWorkflow.run,
            args=[prompt, str(tmp_path)],
            id=workflow_id,
            task_queue=task_queue,
        )
        template = await reconcile_parked(
            temporal_address, workflow_id, "refunded 900 cents on C-3 (seen in the books)"
        )
        assert template["output"] == "<string>"  # the tool's return type, as a template
        answer = await handle.result()
    assert answer == "done: refunded 900 cents on C-3 (seen in the books)"
    assert refunds(tmp_path) == [{"order": "C-3", "cents": 900}], "the tool acted again"
    assert MODEL_CALLS[run] == 2
    with Ledger.open(ledger_url) as ledger:
        assert ledger.open_effects() == []
        assert ledger.verify().ok


async def test_without_the_ledger_a_lost_reply_acts_again(
    temporal_address: str, tmp_path: Path
) -> None:
    """The same tool without the ledger: Temporal retries the activity, and every attempt
    refunds again (here until the test stops the run)."""
    run = f"lost-plain-{uuid.uuid4().hex[:6]}"
    prompt = script(run, "refund_and_lose_reply", order="D-4", cents=100)
    async with running(temporal_address, None) as (client, task_queue):
        handle = await client.start_workflow(
            AdkAgentWorkflow.run,
            args=[prompt, str(tmp_path)],
            id=f"adk-{run}",
            task_queue=task_queue,
        )
        await wait_for(lambda: _at_least(tmp_path, 2), what="a second refund", within=60)
        await handle.terminate("test: seen it act twice")
    assert len(refunds(tmp_path)) >= 2


async def _at_least(folder: Path, count: int) -> bool:
    return len(refunds(folder)) >= count


async def test_an_mcp_call_that_lost_its_reply_parks_until_reconciled(
    temporal_address: str, tmp_path: Path
) -> None:
    """The MCP server adds the note and dies before it answers. ADK hands that back as a
    result (``{"error": ...}``, its graceful error handling); the ledger reads it as an
    unknown effect and parks the call; the operator answers with the MCP result."""
    run = f"mcp-{uuid.uuid4().hex[:6]}"
    ticket = f"T-{run}"
    prompt = script(run, "add_note_and_crash", ticket=ticket, text="refund issued")
    workflow_id = f"adk-{run}"
    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    async with running(temporal_address, ledger_url) as (client, task_queue):
        handle = await client.start_workflow(
            AdkAgentWorkflow.run,
            args=[prompt, str(tmp_path)],
            id=workflow_id,
            task_queue=task_queue,
        )
        template = await reconcile_parked(
            temporal_address,
            workflow_id,
            {"content": [{"type": "text", "text": "note 1 (checked by hand)"}]},
        )
        assert template["output"] == {"content": [{"type": "text", "text": PLACEHOLDER}]}
        answer = await handle.result()
    assert answer == "done: note 1 (checked by hand)"
    assert notes(ticket) == [f"{ticket}: refund issued"], "the MCP tool acted again"
    with Ledger.open(ledger_url) as ledger:
        assert ledger.open_effects() == []
        assert ledger.verify().ok


@pytest.mark.parametrize(
    ("tool", "misfit", "reason", "right", "said"),
    [
        (
            ("refund_and_lose_reply", {"order": "E-5", "cents": 300}),
            {"unexpected": ["refund"]},
            "output: expected string, got {'unexpected': ['refund']}",
            "refunded 300 cents on E-5 (seen in the books)",
            "refunded 300 cents on E-5 (seen in the books)",
        ),
        (
            ("add_note_and_crash", {"text": "refund issued"}),
            {"content": [{"type": "text"}]},
            "content[0].text: missing (string)",
            {"content": [{"type": "text", "text": "note 1 (checked by hand)"}]},
            "note 1 (checked by hand)",
        ),
    ],
    ids=["activity_as_tool", "mcp"],
)
async def test_an_answer_that_does_not_fit_the_call_is_refused_and_a_right_one_completes(
    temporal_address: str,
    tmp_path: Path,
    tool: tuple[str, dict[str, Any]],
    misfit: Any,
    reason: str,
    right: Any,
    said: str,
) -> None:
    run = f"misfit-{uuid.uuid4().hex[:6]}"
    name, arguments = tool
    if name == "add_note_and_crash":
        arguments = {"ticket": f"T-{run}", **arguments}
    workflow_id = f"adk-{run}"
    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    async with running(temporal_address, ledger_url) as (client, task_queue):
        handle = await client.start_workflow(
            AdkAgentWorkflow.run,
            args=[script(run, name, **arguments), str(tmp_path)],
            id=workflow_id,
            task_queue=task_queue,
        )
        parked = await answer_refused_everywhere(
            temporal_address, workflow_id, ledger_url, misfit, reason
        )
        await answer_with_the_template(
            temporal_address, workflow_id, parked, right, basis="checked the far side"
        )
        answer = await handle.result()
    assert answer == f"done: {said}"


def seen_keys(workflow_id: str) -> list[str | None]:
    """The ledger keys the notes server saw in the calls of ``workflow_id`` (meta.jsonl)."""
    prefix = Ledger.wire_key(f"{workflow_id}/")
    seen = [json.loads(line) for line in lines(NOTES_DIR / "meta.jsonl")]
    return [m["key"] for m in seen if (m["key"] or "").startswith(prefix)]


def mcp_call_keys(ledger_url: str, workflow_id: str) -> set[str]:
    """The wire forms of the ledger keys of ``workflow_id``'s MCP tool calls."""
    with Ledger.open(ledger_url) as ledger:
        return {
            Ledger.wire_key(e.key)
            for e in ledger.events()
            if e.type == "action.requested"
            and e.key.startswith(f"{workflow_id}/")
            and e.payload["instruction"].endswith("-call-tool")
        }


async def test_an_mcp_call_carries_the_key_in_baggage_and_a_retry_writes_one_note(
    temporal_address: str, tmp_path: Path
) -> None:
    """ADK's MCP tool sends what the OpenTelemetry propagator injects as the request's
    ``_meta``: the ledger's key rides in its baggage. The server adds the note and dies
    before it answers; the call parks; ``no_effect_confirmed`` lets the key act once more,
    and the server, seeing the same key, answers the first note and adds none."""
    run = f"meta-{uuid.uuid4().hex[:6]}"
    ticket = f"T-{run}"
    tool = "add_note_by_key_losing_first_reply"
    prompt = script(run, tool, ticket=ticket, text="customer called")
    workflow_id = f"adk {run}/ü"
    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    (NOTES_DIR / "lose-reply").write_text("yes")
    async with running(temporal_address, ledger_url) as (client, task_queue):
        handle = await client.start_workflow(
            AdkAgentWorkflow.run,
            args=[prompt, str(tmp_path)],
            id=workflow_id,
            task_queue=task_queue,
        )

        def the_server_wrote() -> None:
            assert notes(ticket) == [f"{ticket}: customer called"]

        # The server added the note and died: the operator cannot tell.
        await confirm_no_effect(temporal_address, workflow_id, while_parked=the_server_wrote)
        answer = await handle.result()
    # The note's number counts every ticket's notes in the server's file.
    assert answer.startswith("done: note ") and answer.endswith(f" on {ticket}"), answer
    assert notes(ticket) == [f"{ticket}: customer called"], "the MCP tool acted again"
    first, second = seen_keys(workflow_id)
    assert first == second and first in mcp_call_keys(ledger_url, workflow_id)


async def test_a_stateful_mcp_toolsets_call_carries_the_key_in_baggage(
    temporal_address: str, tmp_path: Path
) -> None:
    """The stateful toolset's calls run on ADK's nested worker, in the ledger's context
    too: the server sees the key."""
    run = f"smeta-{uuid.uuid4().hex[:6]}"
    ticket = f"T-{run}"
    prompt = script(run, "add_note_by_key_losing_first_reply", ticket=ticket, text="kept")
    workflow_id = f"adk-{run}"
    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    async with running(temporal_address, ledger_url, stateful=True) as (client, task_queue):
        answer = await client.execute_workflow(
            AdkStatefulWorkflow.run,
            args=[prompt, str(tmp_path)],
            id=workflow_id,
            task_queue=task_queue,
        )
    assert answer.startswith("done: note ") and answer.endswith(f" on {ticket}"), answer
    assert notes(ticket) == [f"{ticket}: kept"]
    [key] = seen_keys(workflow_id)
    assert key in mcp_call_keys(ledger_url, workflow_id)


async def test_an_mcp_tool_that_may_destroy_waits_for_an_approval_of_its_exact_call(
    temporal_address: str, tmp_path: Path
) -> None:
    """ADK's tool list carries no MCP annotations, so its MCP tools have the MCP defaults
    (they may destroy): with ``[approve] destructive = true`` the call waits for update
    ``approve`` of its exact fingerprint, then acts once."""
    policy = Policy(
        performers={"Adk*Workflow": ["activity.*"]},
        reconcilers=["ops-*"],
        approvers=["lead-*"],
        gate_destructive=True,
    )
    run = f"gate-{uuid.uuid4().hex[:6]}"
    ticket = f"T-{run}"
    prompt = script(run, "add_note", ticket=ticket, text="asked to close")
    workflow_id = f"adk-{run}"
    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    async with running(temporal_address, ledger_url, policy=policy) as (client, task_queue):
        handle = await client.start_workflow(
            AdkAgentWorkflow.run,
            args=[prompt, str(tmp_path)],
            id=workflow_id,
            task_queue=task_queue,
        )
        [waiting] = await wait_for(
            lambda: query_json(temporal_address, workflow_id, "pending_approvals"),
            what="the call to wait for an approval",
            within=90,
        )
        assert waiting["tool"] == f"add_note ({TOOLSET}-call-tool)"
        assert notes(ticket) == [], "the gated call acted before its approval"
        decision = json.loads(shlex.split(waiting["approve_command"])[-1])
        decision.update(actor="lead-ann", basis="the customer asked for it")
        status, said = await send_update(
            temporal_address, workflow_id, "approve", {**decision, "fingerprint": "0" * 64}
        )
        assert status != 0 and "fingerprint mismatch" in said, said
        status, said = await send_update(temporal_address, workflow_id, "approve", decision)
        assert status == 0, said
        answer = await handle.result()
    assert answer.startswith("done: note ") and answer.endswith(f"on {ticket}")
    assert notes(ticket) == [f"{ticket}: asked to close"]
    with Ledger.open(ledger_url) as ledger:
        assert ledger.verify().ok


async def test_a_stateful_mcp_toolsets_calls_are_ledgered_on_adks_nested_worker(
    temporal_address: str, tmp_path: Path
) -> None:
    """A stateful toolset's calls run on the worker ADK's ``-server-session`` activity
    starts from the client: with ``LedgerPlugin`` on the client they are ledgered there,
    and a reset replays the note instead of adding it again (the session itself, not
    ledgered, starts anew for the new run)."""
    run = f"stateful-{uuid.uuid4().hex[:6]}"
    ticket = f"T-{run}"
    prompt = script(run, "add_note", ticket=ticket, text="kept in one session")
    workflow_id = f"adk-{run}"
    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    async with running(temporal_address, ledger_url, stateful=True) as (client, task_queue):
        handle = await client.start_workflow(
            AdkStatefulWorkflow.run,
            args=[prompt, str(tmp_path)],
            id=workflow_id,
            task_queue=task_queue,
        )
        answer = await handle.result()
        assert answer.startswith("done: note ") and answer.endswith(f"on {ticket}")
        new_run = await reset_to_first_task(
            temporal_address,
            client,
            workflow_id,
            handle.result_run_id,
            reason="test: replay the stateful toolset's call",
            within=90,
        )
        again = await client.get_workflow_handle(workflow_id, run_id=new_run).result()
    assert again == answer
    assert notes(ticket) == [f"{ticket}: kept in one session"], "the MCP tool acted again"
    with Ledger.open(ledger_url) as ledger:
        called = [
            e.payload
            for e in completions(ledger.events())
            if e.key.startswith(f"{workflow_id}/")
            and e.action_id
            in {
                r.action_id
                for r in ledger.events()
                if r.type == "action.requested"
                and r.payload["instruction"] == f"{TOOLSET}-stateful-call-tool"
            }
        ]
        assert [bool(p.get("replayed")) for p in called] == [False, True]
        assert ledger.verify().ok
