"""The ledger key reaches the MCP server in the request's ``_meta`` (``temporal-ledger/key``,
in its one wire form, with the worker's ``traceparent``), and a server that dedupes by it
writes one note across a retried call: against the real dev server, a real MCP server
(``tests.mcp_notes``, an ``MCPServer`` of the ``mcp`` package) and each framework's path.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic_ai.durable_exec.temporal import PydanticAIPlugin
from temporal_ledger.activities import LedgerOptions, LedgerPlugin
from temporal_ledger.activities.pydantic_ai import activity_rules
from temporal_ledger.ledger import Ledger
from temporalio.client import Client
from temporalio.worker import Worker

from tests.google_adk_support import NOTES_DIR as ADK_NOTES_DIR
from tests.google_adk_support import script as adk_script
from tests.google_adk_workflows import AdkAgentWorkflow
from tests.openai_support import LedgeredSupportWorkflow
from tests.pydantic_ai_support import NOTES_DIR
from tests.pydantic_ai_support import agent as pydantic_agent
from tests.pydantic_ai_workflows import DurableSupportWorkflow
from tests.temporal_support import confirm_no_effect, lines, open_effects, wait_for
from tests.test_google_adk import running as adk_running
from tests.test_openai_agents import Desk, call, reconcile, template_of
from tests.test_pydantic_ai_durability import Desk as PydanticDesk

pytestmark = pytest.mark.timeout(180)

EXPORTER = InMemorySpanExporter()
TOOL = "add_note_by_key_losing_first_reply"
#: Workflow ids a far side could spell in more than one way.
HOSTILE_IDS = ["order ann smith/1", "a#b&c=d+e?f%20g", "заказ-ü/ß é"]


@pytest.fixture(scope="module", autouse=True)
def tracer_provider() -> None:
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    provider.add_span_processor(SimpleSpanProcessor(EXPORTER))


def seen_meta(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in lines(folder / "meta.jsonl")]


def ledger_span_of(traceparent: str) -> list[str]:
    """The worker's ledgered-call span that ``traceparent`` names, or the parent of the
    span it names: the ``mcp`` client, instrumented itself, sends its own span's context
    (a child of the ledger's) in place of the one it was given."""
    _, trace_id, span_id, _ = traceparent.split("-")
    spans = {
        (f"{s.context.trace_id:032x}", f"{s.context.span_id:016x}"): s
        for s in EXPORTER.get_finished_spans()
        if s.context is not None
    }
    span = spans.get((trace_id, span_id))
    while span is not None and not span.name.startswith("execute_tool ") and span.parent:
        span = spans.get((trace_id, f"{span.parent.span_id:016x}"))
    return [span.name] if span is not None else []


@pytest.mark.parametrize("workflow_id", HOSTILE_IDS)
async def test_openai_agents_mcp_call_carries_the_key_and_a_retry_writes_one_note(
    temporal_address: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workflow_id: str
) -> None:
    monkeypatch.setenv("SUPPORT_DIR", str(tmp_path))
    desk = Desk(temporal_address, tmp_path)
    (tmp_path / "lose-reply").write_text("yes")
    workflow_id = f"{workflow_id} {uuid.uuid4().hex[:6]}"
    async with desk.running() as client:
        handle = await client.start_workflow(
            LedgeredSupportWorkflow.run,
            call(TOOL, ticket="T-1", text="customer called"),
            id=workflow_id,
            task_queue=desk.task_queue,
        )
        # The server added the note and died before it answered: the call parks.
        [parked] = await wait_for(
            lambda: open_effects(desk.address, handle.id), what="the MCP call to park"
        )
        assert desk.notes() == ["T-1: customer called"]
        # The operator cannot tell: no_effect_confirmed lets the key act once more.
        template = template_of(parked["update_command"])
        template.pop("output", None)
        verdict = {
            **template,
            "verdict": "no_effect_confirmed",
            "actor": "ops-ann",
            "basis": "cannot see the note",
        }
        status, answer = await reconcile(desk.address, handle.id, verdict)
        assert status == 0, answer
        result = await handle.result()
    # The server saw the same key twice and wrote one note.
    assert "note 1 on T-1" in result
    assert desk.notes() == ["T-1: customer called"]
    first, second = seen_meta(tmp_path)
    with Ledger.open(desk.ledger_url) as ledger:
        keys = {event.key for event in ledger.events() if event.key.startswith(workflow_id + "/")}
    [key] = [k for k in keys if Ledger.wire_key(k) == first["key"]]
    assert second["key"] == first["key"] == Ledger.wire_key(key)
    assert all(c.isascii() and (c.isalnum() or c in "-._~") for c in first["key"])
    # Each attempt's traceparent is in the worker's span of that ledgered call.
    for seen in (first, second):
        assert ledger_span_of(seen["traceparent"]) == [f"execute_tool {TOOL}"]


@pytest.mark.parametrize("workflow_id", HOSTILE_IDS)
async def test_pydantic_ai_mcp_call_carries_the_key_and_a_retry_writes_one_note(
    temporal_address: str, tmp_path: Path, workflow_id: str
) -> None:
    desk = PydanticDesk(temporal_address, tmp_path)
    # Given the agent itself, activity_rules puts the key hook on its MCP toolsets.
    rules = activity_rules(pydantic_agent)
    ledger = LedgerPlugin(
        desk.ledger_url,
        policy=desk.policy,
        options=LedgerOptions(lease=2.0),
        ledger_activities=rules,
    )
    (NOTES_DIR / "lose-reply").write_text("yes")
    workflow_id = f"pai {workflow_id} {uuid.uuid4().hex[:6]}"
    client = await Client.connect(temporal_address, plugins=[PydanticAIPlugin(), ledger])
    async with Worker(client, task_queue=desk.task_queue, workflows=[DurableSupportWorkflow]):
        handle = await client.start_workflow(
            DurableSupportWorkflow.run,
            args=[call(TOOL, ticket=desk.ticket, text="customer called"), str(tmp_path)],
            id=workflow_id,
            task_queue=desk.task_queue,
        )
        await confirm_no_effect(temporal_address, workflow_id)
        result = await handle.result()
    assert "note" in result and desk.ticket in result
    assert desk.notes() == [f"{desk.ticket}: customer called"]
    prefix = Ledger.wire_key(workflow_id + "/")
    first, second = [m for m in seen_meta(NOTES_DIR) if (m["key"] or "").startswith(prefix)]
    assert second["key"] == first["key"]
    with Ledger.open(desk.ledger_url) as opened:
        assert first["key"] in {Ledger.wire_key(event.key) for event in opened.events()}
    for seen in (first, second):
        assert ledger_span_of(seen["traceparent"]) == [f"execute_tool {TOOL}"]


def test_the_request_meta_is_not_identity_and_the_ledger_fields_win() -> None:
    from temporal_ledger.activities import _mcp

    plain = [{"name": "add_note", "arguments": {"ticket": "T-1"}, "meta": None}]
    resolved = [{**plain[0], "meta": {"progressToken": 7, "traceparent": "00-a-b-01"}}]
    # A call without meta fingerprints as before; one with meta as the same call.
    assert _mcp.without_meta(plain) is plain
    assert _mcp.without_meta(resolved) == plain
    ours = _mcp.request_meta("order ann smith/r1/3")
    assert ours[_mcp.KEY_FIELD] == "order~20ann~20smith~2Fr1~2F3"
    stamped = _mcp.with_meta(resolved[0], ours)
    assert stamped["meta"]["progressToken"] == 7
    assert stamped["meta"][_mcp.KEY_FIELD] == ours[_mcp.KEY_FIELD]
    assert resolved[0]["meta"] == {"progressToken": 7, "traceparent": "00-a-b-01"}  # a copy


async def test_google_adk_mcp_call_carries_the_key_and_the_workers_traceparent(
    temporal_address: str, tmp_path: Path
) -> None:
    """ADK's MCP tool sends what the OpenTelemetry propagator injects: the key as baggage,
    and the ``traceparent`` of the worker's span of the ledgered call."""
    run = f"tp-{uuid.uuid4().hex[:6]}"
    ticket = f"T-{run}"
    workflow_id = f"adk {run}/ü #%"
    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    prompt = adk_script(run, TOOL, ticket=ticket, text="traced")
    async with adk_running(temporal_address, ledger_url) as (client, task_queue):
        answer = await client.execute_workflow(
            AdkAgentWorkflow.run,
            args=[prompt, str(tmp_path)],
            id=workflow_id,
            task_queue=task_queue,
        )
    assert answer.endswith(f" on {ticket}"), answer
    prefix = Ledger.wire_key(workflow_id + "/")
    [seen] = [m for m in seen_meta(ADK_NOTES_DIR) if (m["key"] or "").startswith(prefix)]
    with Ledger.open(ledger_url) as opened:
        assert seen["key"] in {Ledger.wire_key(event.key) for event in opened.events()}
    assert ledger_span_of(seen["traceparent"]) == [f"execute_tool {TOOL}"]
