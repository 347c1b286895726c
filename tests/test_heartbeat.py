"""Dead workers noticed in seconds: a ledgered activity that its framework schedules with
no heartbeat timeout gets one (``LedgerOptions.heartbeat_timeout``), the worker heartbeats
it while the ledger runs it, and its claim's lease lasts no longer, so a killed worker's
tool call parks within seconds, not after the start-to-close timeout (issue 31, item 3)."""

from __future__ import annotations

import asyncio
import datetime
import os
import signal
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.durable_exec.temporal import PydanticAIPlugin
from temporal_ledger.activities import LedgeredActivity, LedgerOptions, LedgerPlugin
from temporal_ledger.activities._attempt import HeartbeatDetails, _lease
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from tests.heartbeat_workflows import (
    HeartbeatDetailsWorkflow,
    HeartbeatOptionsWorkflow,
    echo,
    progress,
    unledgered,
)
from tests.pydantic_ai_support import NOTES_DIR
from tests.temporal_support import open_effects, wait_for
from tests.test_openai_agents import call, reconcile, template_of
from tests.test_pydantic_ai_durability import Desk

pytestmark = pytest.mark.timeout(180)


async def _scheduled(handle: WorkflowHandle[Any, Any]) -> list[Any]:
    return [
        event.activity_task_scheduled_event_attributes
        async for event in handle.fetch_history_events()
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]


async def _run_options_workflow(
    address: str, tmp_path: Path, options: LedgerOptions
) -> list[timedelta]:
    plugin = LedgerPlugin(
        f"sqlite:///{tmp_path / f'ledger-{uuid.uuid4().hex[:6]}.db'}",
        options=options,
        ledger_activities=[LedgeredActivity("hb_other_*")],
    )
    client = await Client.connect(address, plugins=[plugin])
    task_queue = f"tq-hb-{uuid.uuid4().hex[:8]}"
    async with Worker(
        client,
        task_queue=task_queue,
        workflows=[HeartbeatOptionsWorkflow],
        activities=[echo, unledgered],
    ):
        handle = await client.start_workflow(
            HeartbeatOptionsWorkflow.run, id=f"hb-{uuid.uuid4().hex[:8]}", task_queue=task_queue
        )
        assert await handle.result() == ["none set", "its own", "not ledgered"]
    return [a.heartbeat_timeout.ToTimedelta() for a in await _scheduled(handle)]


async def test_a_ledgered_activity_scheduled_without_a_heartbeat_timeout_gets_one(
    temporal_address: str, tmp_path: Path
) -> None:
    none_set, its_own, unledgered_one = await _run_options_workflow(
        temporal_address, tmp_path, LedgerOptions()
    )
    assert none_set == timedelta(seconds=5)  # the default
    assert its_own == timedelta(seconds=11)  # the framework's (or user's) own is kept
    assert unledgered_one == timedelta(0)  # an activity the ledger does not cover: untouched


@pytest.mark.parametrize("off", [None, timedelta(0)])
async def test_no_heartbeat_timeout_is_added_when_the_option_is_off(
    temporal_address: str, tmp_path: Path, off: timedelta | None
) -> None:
    scheduled = await _run_options_workflow(
        temporal_address, tmp_path, LedgerOptions(heartbeat_timeout=off)
    )
    assert scheduled == [timedelta(0), timedelta(seconds=11), timedelta(0)]


def test_a_claims_lease_lasts_no_longer_than_the_attempts_heartbeat_timeout() -> None:
    assert _lease(30.0, timedelta(seconds=5)) == 5.0
    assert _lease(2.0, timedelta(seconds=5)) == 2.0  # a shorter ledger lease stays
    assert _lease(30.0, None) == 30.0
    assert _lease(30.0, timedelta(0)) == 30.0
    with pytest.raises(TypeError, match="heartbeat_timeout"):
        LedgerOptions(heartbeat_timeout=5)  # type: ignore[arg-type]


def test_the_ledgers_heartbeats_send_the_details_the_activity_last_gave() -> None:
    sent: list[tuple[Any, ...]] = []

    class Outbound:
        def heartbeat(self, *details: Any) -> None:
            sent.append(details)

    details = HeartbeatDetails(Outbound())  # type: ignore[arg-type]
    details.again()  # before the activity heartbeats: none
    details.heartbeat({"page": 3})  # the activity's own
    details.again()  # the ledger's: the activity's details, not empty ones
    assert sent == [(), ({"page": 3},), ({"page": 3},)]


async def test_an_activity_that_heartbeats_itself_keeps_its_details(
    temporal_address: str, tmp_path: Path
) -> None:
    plugin = LedgerPlugin(
        f"sqlite:///{tmp_path / 'ledger.db'}", ledger_activities=[LedgeredActivity("hb_other_*")]
    )
    client = await Client.connect(temporal_address, plugins=[plugin])
    task_queue = f"tq-hb-{uuid.uuid4().hex[:8]}"
    async with Worker(
        client, task_queue=task_queue, workflows=[HeartbeatDetailsWorkflow], activities=[progress]
    ):
        found = await client.execute_workflow(
            HeartbeatDetailsWorkflow.run, id=f"hb-{uuid.uuid4().hex[:8]}", task_queue=task_queue
        )
    # The ledger heartbeat the attempt after the activity did: with its details, not none.
    assert found == ["page 3"]


async def test_a_worker_killed_during_a_pydantic_ai_tool_call_parks_it_within_seconds(
    temporal_address: str, tmp_path: Path
) -> None:
    # The ledger's default lease (30 s): the claim's lease follows the heartbeat timeout.
    desk = Desk(temporal_address, tmp_path, lease=30.0)
    acted = NOTES_DIR / "acted"
    acted.unlink(missing_ok=True)
    client = await Client.connect(desk.address, plugins=[PydanticAIPlugin()])
    # Two workers from the start, so that the time measured is the ledger's and Temporal's,
    # not a new worker's start: the one that runs the tool is killed, the other one goes on.
    async with desk.worker_process() as one, desk.worker_process() as other:
        handle = await desk.start(client, call("add_note_and_hang", ticket=desk.ticket, text="hi"))
        await wait_for(lambda: asyncio.sleep(0, acted.exists()), what="the note")
        caller = int(acted.read_text())
        assert caller in (one.pid, other.pid)
        os.killpg(caller, signal.SIGKILL)
        killed, killed_at = time.monotonic(), time.time()
        [parked] = await wait_for(
            lambda: open_effects(desk.address, handle.id), within=30, what="the call to park"
        )
        elapsed = time.monotonic() - killed
        print(f"parked {elapsed:.1f}s after the worker was killed")
        assert elapsed < 15, f"parked only {elapsed:.1f}s after the kill"
        verdict = {
            **template_of(parked["update_command"]),
            "actor": "ops-ann",
            "basis": "the note is in notes.txt",
            "output": "note added",
        }
        status, answer = await reconcile(desk.address, handle.id, verdict)
        assert status == 0, answer
        assert await handle.result() == "done: note added"
    assert desk.notes() == [f"{desk.ticket}: hi"]
    # When the ledger decided (the retry found the dead attempt's claim expired and
    # failed with the unknown effect), on the dev server's clock (this machine's).
    [decided] = [
        event.event_time.ToDatetime(tzinfo=datetime.UTC).timestamp() - killed_at
        async for event in handle.fetch_history_events()
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED
        and "is unknown" in event.activity_task_failed_event_attributes.failure.message
    ]
    print(f"the ledger found the effect unknown {decided:.1f}s after the kill")
    assert decided < 10, decided  # the 5 s heartbeat timeout, a retry, and slack
    scheduled = await _scheduled(handle)
    tool_calls = [a for a in scheduled if a.activity_type.name.endswith("__call_tool")]
    assert tool_calls, [a.activity_type.name for a in scheduled]
    for attributes in tool_calls:  # pydantic-ai sets none: the ledger's default
        assert attributes.heartbeat_timeout.ToTimedelta() == timedelta(seconds=5)
