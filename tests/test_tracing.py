"""A span per ledgered call that says what the ledger decided, and decisions as span
events emitted once, with the OpenTelemetry SDK's in-memory exporter."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
import uuid
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporal_ledger.activities._replay import replay_histories
from temporalio.client import Client, WorkflowFailureError
from temporalio.contrib.opentelemetry import TracingInterceptor

from examples.plan.workflows import EXAMPLE_WORKFLOWS
from tests.temporal_support import ROOT, Setup, open_effects, temporal_cli, wait_for
from tests.temporal_tools import Call, NotifyWorkflow, StepsWorkflow

pytestmark = pytest.mark.timeout(120)

EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="module", autouse=True)
def tracer_provider() -> Iterator[None]:
    # One provider per process (OpenTelemetry allows setting it once, and another test
    # module may have set it): this module's exporter is added to it, and cleared before
    # each test.
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
    yield


@pytest.fixture(autouse=True)
def fresh_exporter() -> None:
    EXPORTER.clear()


def tool_spans() -> list[ReadableSpan]:
    return [s for s in EXPORTER.get_finished_spans() if s.name.startswith("execute_tool ")]


def outcomes() -> list[str]:
    return [str(s.attributes["temporal_ledger.outcome"]) for s in tool_spans()]


async def traced_client(setup: Setup) -> Client:
    plain = await setup.client()
    config = plain.config()
    config["interceptors"] = [TracingInterceptor()]
    return Client(**config)


def append(step: str, line: str, folder: str, key: str | None = None) -> Call:
    arg = {"path": f"{folder}/lines.txt", "line": line}
    return Call(tool="hold_and_append", arg=arg, step=step, key=key)


async def test_each_call_has_a_span_saying_what_the_ledger_did(setup: Setup) -> None:
    client = await traced_client(setup)
    folder = str(setup.folder)
    key = f"shared-{uuid.uuid4().hex[:6]}"
    async with setup.workflow_worker(client, tools=True):
        await client.execute_workflow(
            StepsWorkflow.run,
            [append("a", "one", folder, key), append("b", "one", folder, key)],
            id=f"trace-{uuid.uuid4().hex[:8]}",
            task_queue=setup.task_queue,
        )
        with pytest.raises(WorkflowFailureError):  # same key, another line: refused
            await client.execute_workflow(
                StepsWorkflow.run,
                [append("c", "two", folder, key)],
                id=f"trace-{uuid.uuid4().hex[:8]}",
                task_queue=setup.task_queue,
            )
    assert outcomes() == ["acted", "replayed", "refused"]
    acted, replayed, refused = tool_spans()
    for span in (acted, replayed, refused):
        assert span.name == "execute_tool hold_and_append"
        assert span.attributes["gen_ai.operation.name"] == "execute_tool"
        assert span.attributes["gen_ai.tool.name"] == "hold_and_append"
        assert span.attributes["temporal_ledger.key"] == key
        assert len(str(span.attributes["temporal_ledger.fingerprint"])) == 64
        # A child of temporalio's activity span.
        assert span.parent is not None
        parents = {s.context.span_id: s.name for s in EXPORTER.get_finished_spans()}
        assert parents[span.parent.span_id].startswith("RunActivity:")
        assert "gen_ai.tool.call.arguments" not in span.attributes  # opt-in only
    assert "temporal_ledger.lease_token" in acted.attributes
    assert (
        replayed.attributes["temporal_ledger.reused_from_action_id"]
        == (acted.attributes["temporal_ledger.action_id"])
    )
    assert refused.attributes["temporal_ledger.conflict.dimensions"] == ("payload",)
    assert refused.attributes["error.type"] == "ToolConflict"


async def test_a_parked_call_and_its_verdict_are_traced_once_and_never_on_replay(
    setup: Setup,
) -> None:
    client = await traced_client(setup)
    workflow_id = f"trace-park-{uuid.uuid4().hex[:8]}"
    async with setup.workflow_worker(client, tools=True):
        handle = await client.start_workflow(
            NotifyWorkflow.run,
            str(setup.folder / "outbox"),
            id=workflow_id,
            task_queue=setup.task_queue,
        )
        [parked] = await wait_for(lambda: open_effects(setup.address, workflow_id))
        verdict = {
            "key": parked["key"],
            "verdict": "effect_confirmed",
            "actor": "ops-ann",
            "basis": "in the outbox",
            "output": {"message_id": "m-1"},
        }
        await temporal_cli(
            setup.address, "workflow", "update", "execute", "--workflow-id", workflow_id,
            "--name", "reconcile", "--input", json.dumps(verdict),
        )  # fmt: skip
        assert await handle.result() == "m-1"
        history = await handle.fetch_history()
    assert outcomes() == ["unknown"]
    [unknown] = tool_spans()
    assert unknown.attributes["error.type"] == "ToolEffectUnknown"
    events = [e for s in EXPORTER.get_finished_spans() for e in s.events]
    verdicts = [e for e in events if e.name == "temporal_ledger.verdict"]
    assert len(verdicts) == 1
    assert verdicts[0].attributes["temporal_ledger.verdict"] == "effect_confirmed"
    assert verdicts[0].attributes["temporal_ledger.actor"] == "ops-ann"

    EXPORTER.clear()
    path = setup.folder / f"{workflow_id}.json"
    path.write_text(history.to_json())
    [report] = await replay_histories([path], workflows=[NotifyWorkflow, *EXAMPLE_WORKFLOWS])
    assert report.ok, report.error
    assert EXPORTER.get_finished_spans() == ()


def test_without_opentelemetry_a_worker_runs_the_same_workflows(setup: Setup) -> None:
    """OpenTelemetry made unimportable in a fresh interpreter: nothing imports it, and a
    ledgered call and a parked-free run complete as before."""
    code = f"""
import asyncio, sys, uuid
sys.modules["opentelemetry"] = None  # as if the [otel] extra were not installed
sys.path.insert(0, {str(ROOT)!r})
from tests.temporal_support import make_setup
from tests.temporal_tools import Call, StepsWorkflow
from pathlib import Path

async def main():
    setup = make_setup({setup.address!r}, Path({str(setup.folder)!r}))
    client = await setup.client()
    async with setup.workflow_worker(client, tools=True):
        arg = {{"path": str(setup.folder / "plain.txt"), "line": "x"}}
        out = await client.execute_workflow(
            StepsWorkflow.run, [Call(tool="hold_and_append", arg=arg, step="s")],
            id=f"no-otel-{{uuid.uuid4().hex[:8]}}", task_queue=setup.task_queue)
    assert out == [{{"lines": 1}}], out
    assert not any(m.startswith("opentelemetry") and sys.modules[m] for m in sys.modules)
    print("ran without opentelemetry")

asyncio.run(main())
"""
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=90
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ran without opentelemetry" in done.stdout


def test_the_otel_extra_brings_the_sdk_and_the_documented_setup_exports_spans() -> None:
    """``pip install '.[otel]'`` gets what records spans, not just the API, and the setup
    that docs/operating.md (Traces) shows really exports a span."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    names = {re.split(r"[<>=!~\[ ;]", requirement, maxsplit=1)[0] for requirement in extras["otel"]}
    assert {"opentelemetry-api", "opentelemetry-sdk"} <= names, extras["otel"]

    page = (ROOT / "docs" / "operating.md").read_text()
    section = page.split("## Traces", 1)[1].split("\n## ", 1)[0]
    [setup] = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    script = (
        setup
        + "\nwith trace.get_tracer('temporal_ledger').start_as_current_span('execute_tool x'):\n"
        "    pass\nprovider.shutdown()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert '"name": "execute_tool x"' in done.stdout, done.stdout + done.stderr
