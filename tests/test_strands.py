"""Strands' TemporalAgent (temporalio-strands-agents) with the ledger plugin, against the
real dev server: a reset replays the model and the tool; a tool that acted and lost its
reply parks the run until an operator reconciles it with the ``temporal`` CLI; and the
same app without the ledger acts twice.

Runs in .venv-strands (scripts/test-strands); skips where strands is not installed.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("strands", reason="the `strands` extra is not installed")
pytest.importorskip("temporalio.strands_agents", reason="the `strands` extra is not installed")

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporal_ledger.activities import LedgerOptions, LedgerPlugin, Policy
from temporal_ledger.activities.strands import activity_rules, ledger_transport
from temporal_ledger.ledger import Ledger
from temporalio.client import Client
from temporalio.strands_agents import StrandsPlugin
from temporalio.worker import Worker

from tests.answer_checks import answer_refused_everywhere, answer_with_the_template
from tests.strands_app import (
    MCP_SERVER,
    MODEL_CALLS,
    MODEL_NAME,
    TARGETS,
    TOOL_RUNS,
    ScriptedModel,
    StrandsAgentWorkflow,
    StrandsMcpWorkflow,
    append_line,
)
from tests.temporal_support import (
    confirm_no_effect,
    listed_as_parked,
    open_effects,
    query_json,
    reset_to_first_task,
    send_update,
    template_of,
    wait_for,
)

pytestmark = pytest.mark.timeout(120)
ROOT = Path(__file__).resolve().parent.parent

POLICY = Policy(
    performers={
        "StrandsAgentWorkflow": ["activity.invoke_model", "activity.append_line"],
        "StrandsMcpWorkflow": ["activity.invoke_model", "activity.notes-*"],
    },
    reconcilers=["ops-*"],
)


def notes_client() -> Any:
    from mcp import StdioServerParameters, stdio_client
    from strands.tools.mcp import MCPClient

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "tests.strands_mcp_server"], cwd=str(ROOT)
    )
    return MCPClient(ledger_transport(lambda: stdio_client(params)))


def strands_plugin() -> StrandsPlugin:
    return StrandsPlugin(models={MODEL_NAME: ScriptedModel}, mcp_clients={MCP_SERVER: notes_client})


@contextlib.asynccontextmanager
async def running(
    address: str, ledger_url: str | None, policy: Policy = POLICY
) -> AsyncIterator[tuple[Client, str]]:
    plugins: list[Any] = [strands_plugin()]
    if ledger_url is not None:
        plugins.append(
            LedgerPlugin(
                ledger_url,
                policy=policy,
                options=LedgerOptions(lease=2.0),
                ledger_activities=activity_rules(tools=[append_line]),
            )
        )
    client = await Client.connect(address, plugins=plugins)
    task_queue = f"tq-strands-{uuid.uuid4().hex[:8]}"
    async with Worker(
        client,
        task_queue=task_queue,
        workflows=[StrandsAgentWorkflow, StrandsMcpWorkflow],
        activities=[append_line],
    ):
        yield client, task_queue


def new_prompt(kind: str, tmp_path: Path) -> str:
    prompt = f"{kind}-{uuid.uuid4().hex[:6]}"
    TARGETS[prompt] = str(tmp_path / "effects.txt")
    return prompt


def lines(prompt: str) -> list[str]:
    return Path(TARGETS[prompt]).read_text().splitlines()


def test_rules_name_the_integrations_activities() -> None:
    rules = activity_rules(tools=[append_line, "renamed"])
    assert [r.pattern for r in rules] == [
        "invoke_model",
        "invoke_model_streaming",
        "append_line",
        "renamed",
        "*-list-tools",
        "*-call-tool",
    ]
    model, mcp_call = rules[0], rules[-1]
    assert model.retry_safe and not rules[2].retry_safe and not mcp_call.retry_safe
    assert model.normalize is not None and mcp_call.normalize is not None
    # Strands' invocation_state and the per-call toolUseId are not the request.
    call = {"model_name": "m", "messages": [{"role": "user"}], "invocation_state": {"a": 1}}
    assert model.normalize("invoke_model", [call]) == model.normalize(
        "invoke_model", [{**call, "invocation_state": {"b": 2}}]
    )
    assert model.normalize("invoke_model", [call]) != model.normalize(
        "invoke_model", [{**call, "messages": []}]
    )
    # Another integration's invoke_model (Google ADK's) is fingerprinted whole.
    assert model.normalize("invoke_model", [{"llm_request": 1}]) == {"args": [{"llm_request": 1}]}
    mcp = {"tool_name": "write", "arguments": {"x": 1}, "tool_use_id": "t-1"}
    assert mcp_call.normalize("files-call-tool", [mcp]) == mcp_call.normalize(
        "files-call-tool", [{**mcp, "tool_use_id": "t-2"}]
    )
    assert mcp_call.tool_name is not None and mcp_call.tool_name([mcp]) == "write"
    assert mcp_call.output.result("ok") == {
        "status": "success",
        "toolUseId": "",
        "content": [{"text": "ok"}],
    }
    answered = {"toolUseId": "t-1", "content": [{"text": "ok"}]}
    assert mcp_call.output.result(answered) == {"status": "success", **answered}
    with pytest.raises(ValueError):
        mcp_call.output.result({"content": []})
    with pytest.raises(TypeError):
        activity_rules(tools=[""])
    # A call that raised comes back as Strands' error result: a lost reply, not an
    # answer; the server's own error result (isError) is an answer.
    lost = getattr(mcp_call, "lost_reply", None)
    assert lost is not None
    failed = {
        "status": "error",
        "toolUseId": "t-1",
        "content": [{"text": "Tool execution failed: Connection closed"}],
    }
    assert lost(failed) and "Connection closed" in lost(failed)
    assert lost({**failed, "isError": True}) is None
    assert lost({**failed, "status": "success"}) is None
    assert lost({**failed, "content": [{"text": "the ticket is closed"}]}) is None


def test_strands_first_keeps_its_failure_converter() -> None:
    from temporalio.contrib.pydantic import pydantic_data_converter

    plugin = LedgerPlugin("sqlite:///:memory:", ledger_activities=activity_rules())
    config: Any = {"data_converter": None, "interceptors": []}
    for each in (strands_plugin(), plugin):
        config = each.configure_client(config)
    converter = config["data_converter"]
    assert converter.payload_converter_class is pydantic_data_converter.payload_converter_class
    assert converter.failure_converter_class.__name__ == "StrandsFailureConverter"


@pytest.mark.parametrize("ledgered", [True, False], ids=["ledgered", "without-ledger"])
async def test_reset_of_finished_agent_run(
    temporal_address: str, tmp_path: Path, ledgered: bool
) -> None:
    """With the ledger a reset asks the model nothing and appends nothing; without it the
    same app asks the model again and appends the line a second time."""
    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}" if ledgered else None
    prompt = new_prompt("reset", tmp_path)
    workflow_id = f"strands-{prompt}"
    async with running(temporal_address, ledger_url) as (client, task_queue):
        handle = await client.start_workflow(
            StrandsAgentWorkflow.run, prompt, id=workflow_id, task_queue=task_queue
        )
        answer = await handle.result()
        assert answer == "done: appended (line 1)"
        assert MODEL_CALLS[prompt] == 2
        new_run = await reset_to_first_task(
            temporal_address,
            client,
            workflow_id,
            handle.result_run_id,
            reason="test: replay the Strands agent",
            within=30,
        )
        again = await client.get_workflow_handle(workflow_id, run_id=new_run).result()

    if not ledgered:
        assert again == "done: appended (line 2)"
        assert MODEL_CALLS[prompt] == 4, "without the ledger the reset asks the model again"
        assert lines(prompt) == [f"line for {prompt}"] * 2, "and the tool acts again"
        return
    assert again == answer
    assert MODEL_CALLS[prompt] == 2, "the reset asked the model again"
    assert lines(prompt) == [f"line for {prompt}"], "the tool acted again"
    assert ledger_url is not None
    with Ledger.open(ledger_url) as ledger:
        done = [e for e in ledger.events() if e.type == "action.completed"]
        # Two model calls and one tool call, each once fresh and once replayed.
        assert len(done) == 6, [e.payload for e in done]
        assert sum(bool(e.payload.get("replayed")) for e in done) == 3
        assert {e.key for e in done} == {
            f"{workflow_id}/{handle.first_execution_run_id}/{n}" for n in "123"
        }
        assert ledger.verify().ok


async def test_without_the_ledger_a_lost_reply_acts_twice(
    temporal_address: str, tmp_path: Path
) -> None:
    """The tool appends and then fails: Temporal retries it and it appends again."""
    prompt = new_prompt("explode", tmp_path)
    async with running(temporal_address, None) as (client, task_queue):
        handle = await client.start_workflow(
            StrandsAgentWorkflow.run, prompt, id=f"strands-{prompt}", task_queue=task_queue
        )
        await wait_for(lambda: _async(TOOL_RUNS.get(prompt, 0) >= 2), what="the tool to run twice")
        await handle.terminate("test: seen the tool act twice")
    assert lines(prompt)[:2] == [f"line for {prompt}"] * 2


async def _async(value: Any) -> Any:
    return value


async def test_a_tool_that_acted_and_lost_its_reply_parks_until_reconciled(
    temporal_address: str, tmp_path: Path
) -> None:
    """The tool appends and then fails: the run parks (the tool does not run again), is
    found by ``LedgerOpenEffects > 0``, the operator answers with the tool's return value
    through ``temporal workflow update``, and the agent finishes with it."""
    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    prompt = new_prompt("explode", tmp_path)
    workflow_id = f"strands-{prompt}"
    async with running(temporal_address, ledger_url) as (client, task_queue):
        handle = await client.start_workflow(
            StrandsAgentWorkflow.run, prompt, id=workflow_id, task_queue=task_queue
        )
        [parked] = await wait_for(
            lambda: open_effects(temporal_address, workflow_id), what="the tool call to park"
        )
        assert await listed_as_parked(temporal_address, workflow_id)
        template = template_of(parked["update_command"])
        verdict = {
            **template,
            "actor": "ops-ann",
            "basis": "line 1 of the file",
            "output": "appended by hand-check (line 1)",
        }
        done, answer = await send_update(temporal_address, workflow_id, "reconcile", verdict)
        assert done == 0, answer
        answer = await handle.result()
    assert answer == "done: appended by hand-check (line 1)"
    assert TOOL_RUNS[prompt] == 1, "the tool ran again"
    assert MODEL_CALLS[prompt] == 2
    assert lines(prompt) == [f"line for {prompt}"]
    with Ledger.open(ledger_url) as ledger:
        assert ledger.open_effects() == []
        assert ledger.verify().ok


@pytest.mark.parametrize(
    ("kind", "misfit", "reason", "right", "said"),
    [
        (
            "explode",
            {"unexpected": ["line"]},
            "output: expected string, got {'unexpected': ['line']}",
            "appended by hand-check (line 1)",
            "appended by hand-check (line 1)",
        ),
        (
            "mcp",
            [{"type": "text"}],
            "output[0]: expected object with document or object with image or object with "
            "json or object with text, got {'type': 'text'}",
            [{"text": "noted by hand-check (line 1)"}],
            "noted by hand-check (line 1)",
        ),
    ],
    ids=["activity_as_tool", "mcp"],
)
async def test_an_answer_that_does_not_fit_the_call_is_refused_and_a_right_one_completes(
    temporal_address: str,
    tmp_path: Path,
    kind: str,
    misfit: Any,
    reason: str,
    right: Any,
    said: str,
) -> None:
    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    prompt = new_prompt(kind, tmp_path)
    workflow = StrandsMcpWorkflow.run if kind == "mcp" else StrandsAgentWorkflow.run
    if kind == "mcp":
        Path(TARGETS[prompt] + ".lose-reply").touch()  # the server appends and dies
    workflow_id = f"strands-{prompt}"
    async with running(temporal_address, ledger_url) as (client, task_queue):
        handle = await client.start_workflow(
            workflow, prompt, id=workflow_id, task_queue=task_queue
        )
        parked = await answer_refused_everywhere(
            temporal_address, workflow_id, ledger_url, misfit, reason
        )
        await answer_with_the_template(
            temporal_address, workflow_id, parked, right, basis="line 1 of the file"
        )
        answer = await handle.result()
    assert answer == f"done: {said}"
    assert lines(prompt) == [f"line for {prompt}"], "the tool acted again"


async def test_a_gated_tool_waits_for_an_approval_of_its_exact_call(
    temporal_address: str, tmp_path: Path
) -> None:
    """The policy gates ``append_line``: the agent's run waits, nothing is appended until
    update ``approve`` of the call's fingerprint, then the tool acts once."""
    policy = POLICY.model_copy(update={"gated": ["activity.append_line"], "approvers": ["lead-*"]})
    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    prompt = new_prompt("gated", tmp_path)
    workflow_id = f"strands-{prompt}"
    async with running(temporal_address, ledger_url, policy) as (client, task_queue):
        handle = await client.start_workflow(
            StrandsAgentWorkflow.run, prompt, id=workflow_id, task_queue=task_queue
        )
        [waiting] = await wait_for(
            lambda: query_json(temporal_address, workflow_id, "pending_approvals"),
            what="the tool call to wait for an approval",
        )
        assert not Path(TARGETS[prompt]).exists(), "the gated call acted before approval"
        decision = json.loads(shlex.split(waiting["approve_command"])[-1])
        decision.update(actor="lead-ann", basis="checked the line")
        status, answer = await send_update(temporal_address, workflow_id, "approve", decision)
        assert status == 0, answer
        result = await handle.result()
    assert result == "done: appended (line 1)"
    assert TOOL_RUNS[prompt] == 1
    assert lines(prompt) == [f"line for {prompt}"]


async def test_reset_replays_the_mcp_call_and_the_tool_listing(
    temporal_address: str, tmp_path: Path
) -> None:
    """An MCP tool of a stdio server (``TemporalMCPClient``): its call and the server's
    tool listings are recorded, and a reset replays them: the note is written once."""
    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    prompt = new_prompt("mcp", tmp_path)
    workflow_id = f"strands-{prompt}"
    async with running(temporal_address, ledger_url) as (client, task_queue):
        handle = await client.start_workflow(
            StrandsMcpWorkflow.run, prompt, id=workflow_id, task_queue=task_queue
        )
        answer = await handle.result()
        assert answer == "done: noted (line 1)"
        new_run = await reset_to_first_task(
            temporal_address,
            client,
            workflow_id,
            handle.result_run_id,
            reason="test: replay the MCP call",
            within=30,
        )
        again = await client.get_workflow_handle(workflow_id, run_id=new_run).result()
    assert again == answer
    assert MODEL_CALLS[prompt] == 2
    assert lines(prompt) == [f"line for {prompt}"], "the MCP tool acted again"
    with Ledger.open(ledger_url) as ledger:
        done = [e for e in ledger.events() if e.type == "action.completed"]
        # Two listings, two model calls and one MCP call, each fresh and then replayed.
        assert len(done) == 10, [e.payload for e in done]
        assert sum(bool(e.payload.get("replayed")) for e in done) == 5
        assert ledger.verify().ok


def span_exporter() -> InMemorySpanExporter:
    """An exporter of the worker's spans, on the process's tracer provider."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


async def test_the_mcp_server_gets_the_key_and_a_retry_after_a_lost_reply_writes_once(
    temporal_address: str, tmp_path: Path
) -> None:
    """The call's transport (``ledger_transport``) puts the key and the worker's
    ``traceparent`` in the request's ``_meta``. The server appends and dies before it
    answers: Strands hands the failure back as the tool's result, the ledger takes it for
    a lost reply and parks; the operator cannot tell and answers ``no_effect_confirmed``;
    the call runs again under the same key and the server, deduping by it, answers
    without a second line."""
    exporter = span_exporter()
    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    prompt = new_prompt("mcp", tmp_path)
    Path(TARGETS[prompt] + ".lose-reply").touch()
    # Workflow ids are user text: a space, '/', '#&=+?%' and non-ASCII.
    workflow_id = f"strands ann/ü #&=+?% {prompt}"
    async with running(temporal_address, ledger_url) as (client, task_queue):
        handle = await client.start_workflow(
            StrandsMcpWorkflow.run, prompt, id=workflow_id, task_queue=task_queue
        )

        def the_server_wrote() -> None:
            assert lines(prompt) == [f"line for {prompt}"]

        # The server appended and died: the operator cannot tell, and lets it run again.
        await confirm_no_effect(temporal_address, workflow_id, while_parked=the_server_wrote)
        answer = await handle.result()
    assert answer == "done: noted (line 1)"
    assert lines(prompt) == [f"line for {prompt}"], "the retried call wrote a second line"
    seen = [
        json.loads(line) for line in Path(TARGETS[prompt] + ".meta.jsonl").read_text().splitlines()
    ]
    first, second = seen
    with Ledger.open(ledger_url) as ledger:
        keys = {event.key for event in ledger.events() if event.key.startswith(workflow_id + "/")}
        assert ledger.verify().ok
    [key] = [k for k in keys if Ledger.wire_key(k) == first["key"]]
    assert second["key"] == first["key"] == Ledger.wire_key(key)
    # Each attempt's traceparent names the worker's span of that ledgered call.
    spans = {
        (f"{s.context.trace_id:032x}", f"{s.context.span_id:016x}"): s.name
        for s in exporter.get_finished_spans()
        if s.context is not None
    }
    for each in (first, second):
        _, trace_id, span_id, _ = each["traceparent"].split("-")
        assert spans.get((trace_id, span_id)) == "execute_tool append_note", each
