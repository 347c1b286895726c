"""pydantic-ai's TemporalAgent with the ledger plugin, against the real dev server.

Item 3 of the issue: a reset of a finished agent workflow asks the model nothing and
repeats no tool effect; the model responses and the tool result come from the ledger.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.durable_exec.temporal import PydanticAIPlugin
from temporal_ledger.activities import LedgerOptions, LedgerPlugin, Policy
from temporal_ledger.activities._attempt import run_attempt
from temporal_ledger.activities._generic import activity_attempt, capability_for
from temporal_ledger.activities._rules import LedgeredActivity
from temporal_ledger.activities._runtime import Runtime
from temporal_ledger.activities.pydantic_ai import activity_rules
from temporal_ledger.ledger import Ledger
from temporal_ledger.ledger._models import LedgerEvent
from temporal_ledger.workflows._protocol import ANCHOR_HEADER
from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
    Worker,
)

from tests.answer_checks import answer_refused_everywhere, answer_with_the_template
from tests.pydantic_ai_agent import AGENT_NAME, MODEL_CALLS, LedgeredAgentWorkflow, temporal_agent
from tests.temporal_support import (
    listed_as_parked,
    open_effects,
    reset_to_first_task,
    send_update,
    template_of,
    wait_for,
)

pytestmark = pytest.mark.timeout(120)

POLICY = Policy(
    performers={"LedgeredAgentWorkflow": [f"activity.agent.{AGENT_NAME}.*"]}, reconcilers=["ops-*"]
)


@contextlib.asynccontextmanager
async def running(
    address: str, ledger_url: str, *, interceptors: list[Interceptor] | None = None
) -> AsyncIterator[tuple[Client, str]]:
    plugin = LedgerPlugin(
        ledger_url,
        policy=POLICY,
        options=LedgerOptions(lease=2.0),
        ledger_activities=activity_rules(temporal_agent),
    )
    # pydantic-ai's plugin first or last: both install a pydantic converter; ours keeps
    # pydantic-ai's subclass (checked below).
    client = await Client.connect(address, plugins=[PydanticAIPlugin(), plugin])
    task_queue = f"tq-ai-{uuid.uuid4().hex[:8]}"
    async with Worker(
        client,
        task_queue=task_queue,
        workflows=[LedgeredAgentWorkflow],
        interceptors=interceptors or [],
    ):
        yield client, task_queue


def completions(events: list[LedgerEvent]) -> list[LedgerEvent]:
    return [e for e in events if e.type == "action.completed"]


async def test_plugins_combine_and_keep_pydantic_ai_converter(tmp_path: Path) -> None:
    from pydantic_ai.durable_exec.temporal import PydanticAIPayloadConverter

    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    for order in ("ai-first", "ledger-first"):
        plugin = LedgerPlugin(
            ledger_url, policy=POLICY, ledger_activities=activity_rules(AGENT_NAME)
        )
        plugins: list[Any] = [PydanticAIPlugin(), plugin]
        if order == "ledger-first":
            plugins.reverse()
        config: Any = {"data_converter": None, "interceptors": []}
        for each in plugins:
            config = each.configure_client(config)
        assert config["data_converter"].payload_converter_class is PydanticAIPayloadConverter


async def test_reset_of_finished_agent_run_replays_model_and_tool(
    temporal_address: str, tmp_path: Path
) -> None:
    target = tmp_path / "effects.txt"
    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    prompt = f"reset-{uuid.uuid4().hex[:6]}"
    workflow_id = f"ai-{prompt}"
    async with running(temporal_address, ledger_url) as (client, task_queue):
        handle = await client.start_workflow(
            LedgeredAgentWorkflow.run,
            args=[prompt, str(target)],
            id=workflow_id,
            task_queue=task_queue,
        )
        answer = await handle.result()
        assert answer.startswith("done: appended")
        assert MODEL_CALLS[prompt] == 2
        assert target.read_text().splitlines() == [f"line for {prompt}"]

        new_run = await reset_to_first_task(
            temporal_address,
            client,
            workflow_id,
            handle.result_run_id,
            reason="test: replay the agent from the ledger",
            within=30,
        )
        again = await client.get_workflow_handle(workflow_id, run_id=new_run).result()

    assert again == answer
    assert MODEL_CALLS[prompt] == 2, "the reset asked the model again"
    assert target.read_text().splitlines() == [f"line for {prompt}"], "the tool acted again"
    with Ledger.open(ledger_url) as ledger:
        done = completions(ledger.events())
        # Two model requests and one tool call, each once fresh and once replayed.
        assert len(done) == 6, [e.payload for e in done]
        replayed = [e for e in done if e.payload.get("replayed")]
        assert len(replayed) == 3
        assert ledger.verify().ok
        # Keyed by the first execution's run id, which the reset run keeps.
        keys = {e.key for e in done}
        assert keys == {f"{workflow_id}/{handle.first_execution_run_id}/{n}" for n in "123"}


class _FailOnceAfterLedger(Interceptor):
    """Outside the ledger's interceptor: lets the attempt act and be recorded, then fails
    it, as a worker that dies between the ledger's record and Temporal's would."""

    def __init__(self) -> None:
        self.failed: list[str] = []

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        outer = self

        class Inbound(ActivityInboundInterceptor):
            async def execute_activity(self, input: ExecuteActivityInput) -> Any:
                result = await self.next.execute_activity(input)
                info = activity.info()
                if info.attempt == 1:
                    outer.failed.append(info.activity_type)
                    raise RuntimeError("injected: attempt lost after the ledger recorded it")
                return result

        return Inbound(next)


async def test_activity_retry_after_recorded_effect_replays(
    temporal_address: str, tmp_path: Path
) -> None:
    target = tmp_path / "effects.txt"
    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    prompt = f"retry-{uuid.uuid4().hex[:6]}"
    flaky = _FailOnceAfterLedger()
    async with running(temporal_address, ledger_url, interceptors=[flaky]) as (client, tq):
        answer = await client.execute_workflow(
            LedgeredAgentWorkflow.run, args=[prompt, str(target)], id=f"ai-{prompt}", task_queue=tq
        )
    assert answer.startswith("done: appended")
    # Every ledgered activity failed once after acting, and was retried by Temporal.
    assert len(flaky.failed) == 3, flaky.failed
    assert MODEL_CALLS[prompt] == 2, "a retried model request asked the model again"
    assert target.read_text().splitlines() == [f"line for {prompt}"], "a retry acted again"
    with Ledger.open(ledger_url) as ledger:
        done = completions(ledger.events())
        assert sum(bool(e.payload.get("replayed")) for e in done) == 3
        assert ledger.verify().ok


async def test_a_tool_that_acted_and_lost_its_reply_parks_the_agent_until_reconciled(
    temporal_address: str, tmp_path: Path
) -> None:
    """The tool appends its line and then fails: the agent's run parks (it is not failed,
    and the tool is not run again); the operator confirms with the tool's own return
    value through the real ``temporal`` CLI, and the agent finishes with it."""
    target = tmp_path / "effects.txt"
    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    prompt = f"explode-{uuid.uuid4().hex[:6]}"
    workflow_id = f"ai-{prompt}"
    async with running(temporal_address, ledger_url) as (client, tq):
        handle = await client.start_workflow(
            LedgeredAgentWorkflow.run, args=[prompt, str(target)], id=workflow_id, task_queue=tq
        )
        [parked] = await wait_for(
            lambda: open_effects(temporal_address, workflow_id), what="the tool call to park"
        )
        assert await listed_as_parked(temporal_address, workflow_id)
        # The template asks for the tool's own return value (append_line returns a str),
        # not pydantic-ai's record of it.
        template = template_of(parked["update_command"])
        assert template["output"] == "<string>"
        verdict = {**template, "actor": "ops-ann", "basis": "line 1 of the file"}
        refused, answer = await send_update(temporal_address, workflow_id, "reconcile", verdict)
        assert refused != 0 and "placeholder" in answer, answer
        verdict["output"] = "appended by hand-check (line 1)"
        done, answer = await send_update(temporal_address, workflow_id, "reconcile", verdict)
        assert done == 0, answer
        answer = await handle.result()
    assert answer == "done: appended by hand-check (line 1)"
    assert MODEL_CALLS[prompt] == 2
    assert target.read_text().splitlines() == [f"line for {prompt}"], "the tool acted again"
    with Ledger.open(ledger_url) as ledger:
        assert ledger.open_effects() == []
        assert ledger.verify().ok


async def test_an_answer_that_does_not_fit_the_tool_is_refused_and_a_right_one_completes(
    temporal_address: str, tmp_path: Path
) -> None:
    """``append_line`` is annotated ``-> str``: an object is no answer for it, by update,
    signal or CLI, whatever pydantic-ai's untyped record of a tool's return would take."""
    target = tmp_path / "effects.txt"
    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    prompt = f"explode-{uuid.uuid4().hex[:6]}"
    workflow_id = f"ai-{prompt}"
    async with running(temporal_address, ledger_url) as (client, tq):
        handle = await client.start_workflow(
            LedgeredAgentWorkflow.run, args=[prompt, str(target)], id=workflow_id, task_queue=tq
        )
        parked = await answer_refused_everywhere(
            temporal_address,
            workflow_id,
            ledger_url,
            {"unexpected": ["line"]},
            "output: expected string, got {'unexpected': ['line']}",
        )
        await answer_with_the_template(
            temporal_address,
            workflow_id,
            parked,
            "appended by hand-check (line 1)",
            basis="line 1 of the file",
        )
        answer = await handle.result()
    assert answer == "done: appended by hand-check (line 1)"
    assert target.read_text().splitlines() == [f"line for {prompt}"], "the tool acted again"


async def test_activity_without_run_anchor_is_refused_before_acting(tmp_path: Path) -> None:
    """A workflow worker without the anchor interceptor: no safe key, so nothing runs."""
    ran: list[object] = []

    class Next(ActivityInboundInterceptor):
        def __init__(self) -> None:
            pass

        async def execute_activity(self, input: ExecuteActivityInput) -> Any:
            ran.append(input)
            return "acted"

    async def attempt() -> Any:
        with Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}") as ledger:
            runtime = Runtime(ledger=ledger, policy=POLICY)
            call = ExecuteActivityInput(fn=attempt, args=["x"], executor=None, headers={})
            rule = LedgeredActivity("attempt")
            return await run_attempt(runtime, activity_attempt(runtime, call, Next(), rule))

    with pytest.raises(ApplicationError) as refused:
        await ActivityEnvironment().run(attempt)
    assert refused.value.non_retryable and ANCHOR_HEADER in str(refused.value)
    assert ran == []


def test_keys_and_capabilities() -> None:
    assert (
        capability_for(f"agent__{AGENT_NAME}__toolset__<agent>__call_tool")
        == f"activity.agent.{AGENT_NAME}.toolset._agent_.call_tool"
    )
    assert capability_for("9lives.do it") == "activity._9lives.do_it"
    assert Ledger.step_key("wf", "run-1", "3") == "wf/run-1/3"
    assert Ledger.step_key("wf", "run-1", "3", continued_from="run-2") == "wf/run-1/run-2/3"
    long = Ledger.step_key("w" * 300, "run-1", "3")
    assert len(long) <= 255 and long.startswith("w" * 120 + "/sha256:")
