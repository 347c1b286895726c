"""A confirmed output that was recorded and still does not convert to the activity's
result fails that call with a clear error: never a workflow task that fails over and
over, leaving the run stuck."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from temporal_ledger.activities import (
    LedgeredActivity,
    LedgerOptions,
    LedgerPlugin,
    Policy,
    ProbeAnswer,
)
from temporal_ledger.ledger import Ledger
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.worker import Worker

from tests.misfit_workflows import ChargeWorkflow, charge_and_lose_reply

pytestmark = pytest.mark.timeout(120)


async def finds_a_negative_charge(key: str, args: Any) -> ProbeAnswer:
    # Fits the result's JSON schema (an integer), not its bound (gt=0), which only the
    # type's own validation checks.
    return ProbeAnswer.present({"amount": -5}, ["ledger row 7"], basis="the far side's row")


async def test_a_recorded_output_that_does_not_convert_fails_the_call_once(
    temporal_address: str, tmp_path: Path
) -> None:
    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    plugin = LedgerPlugin(
        ledger_url,
        policy=Policy(
            performers={"ChargeWorkflow": ["activity.*"]},
            reconcilers=["ops-*"],
            probes=["charge_and_lose_reply"],
        ),
        options=LedgerOptions(lease=2.0),
        ledger_activities=[
            LedgeredActivity("charge_and_lose_reply", probe=finds_a_negative_charge)
        ],
    )
    client = await Client.connect(temporal_address, plugins=[plugin])
    task_queue = f"tq-misfit-{uuid.uuid4().hex[:8]}"
    async with Worker(
        client,
        task_queue=task_queue,
        workflows=[ChargeWorkflow],
        activities=[charge_and_lose_reply],
    ):
        handle = await client.start_workflow(
            ChargeWorkflow.run, "A-1", id=f"misfit-{uuid.uuid4().hex[:8]}", task_queue=task_queue
        )
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
    error = failed.value.cause
    assert isinstance(error, ActivityError) or isinstance(error, ApplicationError), error
    cause = error.cause if isinstance(error, ActivityError) else error
    assert isinstance(cause, ApplicationError) and cause.type == "ToolOutputInvalid", cause
    assert "cannot be the call's result" in cause.message
    assert "amount: Input should be greater than 0" in cause.message and "\n" not in cause.message
    history = await handle.fetch_history()
    assert not [
        e for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
    ], "a workflow task failed"
    with Ledger.open(ledger_url) as ledger:
        [key] = {e.key for e in ledger.events()}
        assert ledger.state(key).reconciliations[-1].actor == "probe:charge_and_lose_reply"
