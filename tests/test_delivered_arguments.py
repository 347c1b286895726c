"""Arguments reach a ledgered activity as Temporal delivered them (issue 41, item 6).

The fingerprint is taken from the payloads Temporal delivered, never by encoding the values
the activity gets again: a value that can be read once (pydantic's ``ValidatorIterator``,
which an OpenAI Agents model call's input holds after a custom tool call) reaches the
activity, and the model, whole; an argument that cannot be fingerprinted is refused before
the activity runs. The same holds both ways: a result readable once reaches the workflow
as the ledger recorded it, and a workflow's argument readable once is sent whole on every
attempt of the call. Against the real dev server, with the OpenAI Agents SDK's Temporal
integration and a scripted model.
"""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporal_ledger.activities import LedgerOptions, LedgerPlugin, Policy
from temporal_ledger.activities.openai_agents import activity_rules
from temporal_ledger.ledger import Ledger
from temporalio.client import Client, WorkflowFailureError
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError
from temporalio.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin
from temporalio.worker import Worker

from tests.delivered_app import (
    ReadingWorkflow,
    SensorWorkflow,
    StoreWorkflow,
    log_reading,
    read_sensor,
    store_readings,
)
from tests.openai_custom_tool import PREAMBLE, CustomToolProvider, CustomToolWorkflow, forecast
from tests.temporal_support import confirm_no_effect, lines, reset_to_first_task

pytestmark = pytest.mark.timeout(180)


def plugins(folder: Path, *, ledger_first: bool) -> list[Any]:
    agents = OpenAIAgentsPlugin(
        model_provider=CustomToolProvider(folder / "model-calls.jsonl"),
        model_params=ModelActivityParameters(start_to_close_timeout=timedelta(seconds=20)),
    )
    ledger = LedgerPlugin(
        f"sqlite:///{folder / 'ledger.db'}",
        policy=Policy(performers={"CustomToolWorkflow": ["activity.*"]}, reconcilers=["ops-*"]),
        options=LedgerOptions(lease=2.0),
        ledger_activities=activity_rules(tools=[forecast]),
    )
    return [ledger, agents] if ledger_first else [agents, ledger]


def model_calls(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in lines(folder / "model-calls.jsonl")]


@pytest.mark.parametrize("ledger_first", [False, True], ids=["agents-first", "ledger-first"])
async def test_a_model_call_after_a_custom_tool_gets_its_whole_input_and_replays(
    temporal_address: str, tmp_path: Path, ledger_first: bool
) -> None:
    client = await Client.connect(
        temporal_address, plugins=plugins(tmp_path, ledger_first=ledger_first)
    )
    task_queue = f"tq-custom-{uuid.uuid4().hex[:8]}"
    workflow_id = f"custom-{uuid.uuid4().hex[:8]}"
    async with Worker(
        client, task_queue=task_queue, workflows=[CustomToolWorkflow], activities=[forecast]
    ):
        handle = await client.start_workflow(
            CustomToolWorkflow.run, "make it loud", id=workflow_id, task_queue=task_queue
        )
        assert await handle.result() == "done after 1 call"
        first, second = model_calls(tmp_path)
        # The second call holds the assistant's message from the first answer: its content
        # decoded as a read-once iterator, read here by the model, whole.
        assistant = [m for m in second["messages"] if m["role"] == "assistant"]
        assert assistant == [{"type": "message", "role": "assistant", "texts": [PREAMBLE]}]
        assert len(second["outputs"]) == 1
        assert first["outputs"] == []

        # A reset replays both model calls from the ledger: the model is not asked again.
        run_id = await reset_to_first_task(
            temporal_address, client, workflow_id, handle.result_run_id, reason="test: replay"
        )
        again = await client.get_workflow_handle(workflow_id, run_id=run_id).result()
    assert again == "done after 1 call"
    assert len(model_calls(tmp_path)) == 2
    with Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}") as ledger:
        events = ledger.events()
        assert not [e for e in events if e.type == "action.replay_refused"]
        completed = [e.payload for e in events if e.type == "action.completed"]
        assert [bool(c.get("replayed")) for c in completed] == [False, False, True, True]
        requested = [e.payload for e in events if e.type == "action.requested"]
        # What the ledger fingerprinted is what the model got: the message's text is in it.
        assert PREAMBLE in json.dumps(requested[1]["payload"])
        assert requested[1]["fingerprint"] == requested[3]["fingerprint"]
        assert ledger.verify().ok


def reading_plugin(folder: Path) -> LedgerPlugin:
    return LedgerPlugin(
        f"sqlite:///{folder / 'ledger.db'}",
        policy=Policy(performers={"ReadingWorkflow": ["activity.*"]}),
        ledger_activities=["log_reading"],
    )


async def test_an_argument_the_ledger_cannot_fingerprint_is_refused_before_the_activity_runs(
    temporal_address: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SUPPORT_DIR", str(tmp_path))
    client = await Client.connect(temporal_address, plugins=[reading_plugin(tmp_path)])
    task_queue = f"tq-reading-{uuid.uuid4().hex[:8]}"
    async with Worker(
        client, task_queue=task_queue, workflows=[ReadingWorkflow], activities=[log_reading]
    ):
        # The converter writes a NaN as JSON's NaN, which the activity would read back:
        # no canonical JSON holds it, so no fingerprint can be taken.
        with pytest.raises(WorkflowFailureError) as failed:
            await client.execute_workflow(
                ReadingWorkflow.run,
                args=["boiler", float("nan")],
                id=f"reading-{uuid.uuid4().hex[:8]}",
                task_queue=task_queue,
                execution_timeout=timedelta(seconds=60),
            )
        assert (
            await client.execute_workflow(
                ReadingWorkflow.run,
                args=["boiler", 71.5],
                id=f"reading-{uuid.uuid4().hex[:8]}",
                task_queue=task_queue,
            )
            == "logged"
        )
    cause = failed.value.cause.__cause__
    assert isinstance(cause, ApplicationError)
    assert cause.type == "ToolInvalidRequest" and cause.non_retryable
    assert "NaN" in str(cause)
    assert lines(tmp_path / "readings.txt") == ["boiler 71.5"]  # the NaN call never ran
    with Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}") as ledger:
        # Ordinary arguments are fingerprinted as before: the JSON they were sent as.
        [requested] = [e.payload for e in ledger.events() if e.type == "action.requested"]
        assert requested["payload"] == {"args": ["boiler", 71.5]}


async def test_ledger_activities_on_a_worker_whose_client_lacks_the_plugin_refuse_at_start(
    temporal_address: str, tmp_path: Path
) -> None:
    # Its converter does not show the ledger the payloads Temporal delivers.
    client = await Client.connect(temporal_address, data_converter=pydantic_data_converter)
    with pytest.raises(ValueError, match="put the plugin on the client"):
        Worker(
            client,
            task_queue="unused",
            workflows=[ReadingWorkflow],
            activities=[log_reading],
            plugins=[reading_plugin(tmp_path)],
        )


async def test_a_result_that_can_be_read_once_reaches_the_workflow_whole_and_replays(
    temporal_address: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SUPPORT_DIR", str(tmp_path))
    (tmp_path / "readings.txt").write_text("boiler 70.5\npump 3.0\nboiler 71.5\n")
    plugin = LedgerPlugin(
        f"sqlite:///{tmp_path / 'ledger.db'}",
        policy=Policy(performers={"SensorWorkflow": ["activity.*"]}),
        ledger_activities=["read_sensor"],
    )
    client = await Client.connect(temporal_address, plugins=[plugin])
    task_queue = f"tq-sensor-{uuid.uuid4().hex[:8]}"
    workflow_id = f"sensor-{uuid.uuid4().hex[:8]}"
    async with Worker(
        client, task_queue=task_queue, workflows=[SensorWorkflow], activities=[read_sensor]
    ):
        handle = await client.start_workflow(
            SensorWorkflow.run, "boiler", id=workflow_id, task_queue=task_queue
        )
        # The ledger's record read the generator: the workflow gets what was recorded.
        assert await handle.result() == [70.5, 71.5]
        (tmp_path / "readings.txt").write_text("")  # a replay must not read the log again
        run_id = await reset_to_first_task(
            temporal_address, client, workflow_id, handle.result_run_id, reason="test: replay"
        )
        assert await client.get_workflow_handle(workflow_id, run_id=run_id).result() == [
            70.5,
            71.5,
        ]
    with Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}") as ledger:
        completed = [e.payload for e in ledger.events() if e.type == "action.completed"]
        assert [bool(c.get("replayed")) for c in completed] == [False, True]
        assert completed[0]["output"] == {"sensor": "boiler", "values": [70.5, 71.5]}


async def test_a_workflow_argument_that_can_be_read_once_is_sent_whole_on_every_attempt(
    temporal_address: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SUPPORT_DIR", str(tmp_path))
    plugin = LedgerPlugin(
        f"sqlite:///{tmp_path / 'ledger.db'}",
        policy=Policy(performers={"StoreWorkflow": ["activity.*"]}, reconcilers=["ops-*"]),
        options=LedgerOptions(lease=2.0),
        ledger_activities=["store_readings"],
    )
    client = await Client.connect(temporal_address, plugins=[plugin])
    task_queue = f"tq-store-{uuid.uuid4().hex[:8]}"
    async with Worker(
        client, task_queue=task_queue, workflows=[StoreWorkflow], activities=[store_readings]
    ):
        handle = await client.start_workflow(
            StoreWorkflow.run,
            [70.5, 71.5],
            id=f"store-{uuid.uuid4().hex[:8]}",
            task_queue=task_queue,
        )
        # The lost reply parks the call; the operator's no_effect_confirmed schedules it
        # again in the run, with the payloads of the first schedule, not an empty rest.
        await confirm_no_effect(temporal_address, handle.id)
        assert await handle.result() == 2
    assert lines(tmp_path / "stored.txt") == ["[70.5, 71.5]", "[70.5, 71.5]"]
    with Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}") as ledger:
        events = ledger.events()
        assert not [e for e in events if e.type == "action.replay_refused"]
        requested = [e.payload for e in events if e.type == "action.requested"]
        assert [r["payload"] for r in requested] == [
            {"args": [{"sensor": "boiler", "values": [70.5, 71.5]}]}
        ] * 2
