"""How the ledger's activities are scheduled: temporalio's ``ActivityConfig`` per call, the
plugin's ``LedgerOptions`` for every run, and the ledger's defaults under both."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from temporal_ledger.activities import LedgerOptions, LedgerPlugin
from temporal_ledger.workflows._protocol import FINAL_ERROR_TYPES, ErrorType
from temporal_ledger.workflows._scheduling import scheduling
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.worker import Worker
from temporalio.workflow import ActivityConfig

from examples.plan.activities import append_line
from tests.temporal_support import Setup
from tests.temporal_tools import OptionsWorkflow

pytestmark = pytest.mark.timeout(120)


def test_the_defaults_are_the_ledgers_own() -> None:
    tool = scheduling("tool")
    assert tool["start_to_close_timeout"] == timedelta(minutes=5)
    assert tool["heartbeat_timeout"] == timedelta(seconds=30)
    assert tool["task_queue"] is None
    assert tool["retry_policy"] == RetryPolicy(
        initial_interval=timedelta(seconds=1),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=60),
        maximum_attempts=0,
        non_retryable_error_types=list(FINAL_ERROR_TYPES),
    )
    reconcile = scheduling("reconcile")
    assert (reconcile["start_to_close_timeout"], reconcile["heartbeat_timeout"]) == (
        timedelta(seconds=10),
        timedelta(seconds=3),
    )
    assert reconcile["retry_policy"].non_retryable_error_types == [
        ErrorType.RECONCILE_REFUSED,
        ErrorType.RECONCILE_NOT_ALLOWED,
    ]
    probe = scheduling("probe", task_queue="tools")
    assert probe["start_to_close_timeout"] == timedelta(seconds=30)
    assert "heartbeat_timeout" not in probe
    assert probe["retry_policy"].maximum_attempts == 3
    assert probe["task_queue"] == "tools"  # the tool's, where no option names one


def test_a_call_overrides_the_run_which_overrides_the_ledger_field_by_field() -> None:
    run = LedgerOptions(
        tool=ActivityConfig(start_to_close_timeout=timedelta(seconds=42), task_queue="run-q")
    )
    given = ActivityConfig(heartbeat_timeout=timedelta(seconds=7), task_queue="call-q")
    chosen = scheduling("tool", given, run=run)
    assert chosen["start_to_close_timeout"] == timedelta(seconds=42)  # the run's
    assert chosen["heartbeat_timeout"] == timedelta(seconds=7)  # the call's
    assert chosen["task_queue"] == "call-q"  # the call's over the run's
    assert chosen["retry_policy"].maximum_interval == timedelta(seconds=60)  # the ledger's


def test_a_retry_policy_of_ones_own_still_ends_the_step_on_final_outcomes() -> None:
    mine = RetryPolicy(maximum_attempts=4, non_retryable_error_types=["MyError", "ToolDenied"])
    policy = scheduling("tool", ActivityConfig(retry_policy=mine))["retry_policy"]
    assert policy.maximum_attempts == 4
    assert policy.non_retryable_error_types[:2] == ["MyError", "ToolDenied"]
    assert set(FINAL_ERROR_TYPES) <= set(policy.non_retryable_error_types)
    assert len(policy.non_retryable_error_types) == len(set(policy.non_retryable_error_types))
    assert mine.non_retryable_error_types == ["MyError", "ToolDenied"]  # not changed


def test_the_plugins_probe_queue_wins_over_the_tools() -> None:
    run = LedgerOptions(probe=ActivityConfig(task_queue="probes"))
    assert scheduling("probe", run=run, task_queue="tools")["task_queue"] == "probes"


def test_the_plugins_lease_comes_from_its_options_unless_given() -> None:
    assert LedgerPlugin("sqlite:///x.db").options.lease == 30.0
    assert LedgerPlugin("sqlite:///x.db", options=LedgerOptions(lease=5.0)).options.lease == 5.0


def test_every_field_of_activity_config_reaches_the_activity_and_a_wrong_one_is_named() -> None:
    given = ActivityConfig(
        schedule_to_close_timeout=timedelta(minutes=9), summary="charge", heartbeat_timeout=None
    )
    chosen = scheduling("tool", given)
    assert chosen["schedule_to_close_timeout"] == timedelta(minutes=9)
    assert chosen["summary"] == "charge"
    assert chosen["heartbeat_timeout"] == timedelta(seconds=30)  # None: the next default's
    assert "heartbeat_timeout" not in scheduling("tool", {"heartbeat_timeout": timedelta(0)})
    with pytest.raises(TypeError, match="ActivityConfig has no field 'start_to_close'"):
        scheduling("tool", {"start_to_close": timedelta(seconds=1)})  # type: ignore[typeddict-unknown-key]  # the mistake under test
    with pytest.raises(TypeError, match="ActivityConfig, not"):
        LedgerOptions(tool=timedelta(seconds=1))  # type: ignore[arg-type]  # the mistake under test


async def test_the_plugins_options_and_a_calls_own_reach_the_scheduled_activities(
    setup: Setup,
) -> None:
    plugin = LedgerPlugin(
        setup.ledger_url,
        policy=setup.policy,
        options=LedgerOptions(
            tool=ActivityConfig(
                start_to_close_timeout=timedelta(seconds=42),
                heartbeat_timeout=timedelta(seconds=7),
            )
        ),
    )
    client = await Client.connect(setup.address, plugins=[plugin])
    workflow_id = f"options-{uuid.uuid4().hex[:8]}"
    async with Worker(
        client,
        task_queue=setup.task_queue,
        workflows=[OptionsWorkflow],
        activities=[append_line],
    ):
        handle = await client.start_workflow(
            OptionsWorkflow.run,
            str(setup.folder / "out.txt"),
            id=workflow_id,
            task_queue=setup.task_queue,
        )
        await handle.result()
    scheduled = [
        event.activity_task_scheduled_event_attributes
        async for event in handle.fetch_history_events()
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    assert len(scheduled) == 2
    plugins, own = scheduled
    assert plugins.start_to_close_timeout.ToTimedelta() == timedelta(seconds=42)
    assert plugins.heartbeat_timeout.ToTimedelta() == timedelta(seconds=7)
    assert own.start_to_close_timeout.ToTimedelta() == timedelta(seconds=50)
    assert own.heartbeat_timeout.ToTimedelta() == timedelta(0)  # timedelta(0): none
    for attributes in scheduled:
        assert set(FINAL_ERROR_TYPES) <= set(attributes.retry_policy.non_retryable_error_types)
