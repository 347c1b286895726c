"""The user's retry bounds stand (issue 41, item 7), against the real dev server.

A ledgered call that times out or fails is tried again only within the ``RetryPolicy``
and timeouts the user gave it (``maximum_attempts``, ``non_retryable_error_types``, a
node's own options over the plugin's defaults); then the step fails as it would without
the ledger, with the same error, and promptly. A call that is not retry-safe and timed out
after it acted still parks for an operator instead: the attempt that only asks the ledger
finds its unknown effect. In the shape of temporalio's own LangGraph tests
(``test_timeout``, ``test_per_task_activity_options_override``), written here.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporal_ledger.activities import Policy
from temporal_ledger.activities.langgraph import activity_rules
from temporal_ledger.ledger import Ledger
from temporal_ledger.workflows._protocol import PLACEHOLDER
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.common import RetryPolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    TimeoutError,
    TimeoutType,
)

from tests.retry_bounds_app import (
    CALLS_GRAPH,
    GRAPH,
    TRIES,
    BoundedCallsWorkflow,
    BoundedGraphWorkflow,
    BoundedStepWorkflow,
    bounded_append,
    bounded_checked,
    bounded_lookup,
    builder,
    calls_builder,
)
from tests.temporal_support import (
    ledgered_graph_worker,
    lines,
    open_effects,
    send_update,
    template_of,
    wait_for,
)

pytestmark = pytest.mark.timeout(120)

POLICY = Policy(
    performers={
        "BoundedGraphWorkflow": [f"activity.{GRAPH}.*"],
        "BoundedStepWorkflow": ["bounded.*"],
        "BoundedCallsWorkflow": [f"activity.{CALLS_GRAPH}.*"],
    },
    reconcilers=["ops-*"],
)

#: A bound no test reaches unless the ledger overrides the user's: the tests fail well
#: before it, and promptly.
EXECUTION_TIMEOUT = timedelta(seconds=45)
PROMPTLY = 15.0


def hung_node(**retry: Any) -> dict[str, Any]:
    """A node's options: 100 ms to close, the given retry policy, quick retries."""
    return {
        "start_to_close_timeout": timedelta(milliseconds=100),
        "retry_policy": RetryPolicy(
            initial_interval=timedelta(milliseconds=100), backoff_coefficient=1.0, **retry
        ),
    }


@contextlib.asynccontextmanager
async def running(
    address: str,
    ledger_url: str,
    node_options: dict[str, Any],
    default_options: dict[str, Any] | None = None,
) -> AsyncIterator[tuple[Client, str]]:
    """A worker for the graphs (model node retry-safe, tool node not; a tool node whose
    calls have keys of their own) and the steps."""
    rules = [
        *activity_rules(GRAPH, model_nodes=["model"], tool_nodes=["tools"]),
        *activity_rules(CALLS_GRAPH, tool_nodes=["tools"], per_call=True),
    ]
    async with ledgered_graph_worker(
        address,
        ledger_url,
        graphs={GRAPH: builder(node_options), CALLS_GRAPH: calls_builder(node_options)},
        rules=rules,
        policy=POLICY,
        workflows=[BoundedGraphWorkflow, BoundedStepWorkflow, BoundedCallsWorkflow],
        activities=[bounded_lookup, bounded_append, bounded_checked],
        default_activity_options=default_options,
    ) as worker:
        yield worker


async def start(
    client: Client, workflow: Any, prompt: str, path: Path, tq: str
) -> WorkflowHandle[Any, Any]:
    """Start the workflow ``bounds-PROMPT`` on ``path``, under the execution timeout."""
    return await client.start_workflow(
        workflow,
        args=[prompt, str(path)],
        id=f"bounds-{prompt}",
        task_queue=tq,
        execution_timeout=EXECUTION_TIMEOUT,
    )


async def failure_of(client: Client, workflow: Any, prompt: str, path: Path, tq: str) -> Any:
    """Run the workflow to its failure; the failure and the seconds it took."""
    started = time.monotonic()
    handle = await start(client, workflow, prompt, path, tq)
    with pytest.raises(WorkflowFailureError) as failed:
        await handle.result()
    return failed.value.cause, time.monotonic() - started


#: What the operator who saw the line answers for a parked call; the run returns it.
SEEN = "appended, seen by ops"


async def answered_when_parked(
    address: str, client: Client, workflow: Any, prompt: str, path: Path, tq: str, field: str
) -> dict[str, Any]:
    """Start the workflow; once its one call parks, answer it through the real CLI with
    the printed template, ``{field: SEEN}`` as the output; the run must then return
    ``SEEN``. Returns the parked call (its ``open_effects`` entry)."""
    handle = await start(client, workflow, prompt, path, tq)
    [parked] = await wait_for(
        lambda: open_effects(address, handle.id), within=30, what=f"{prompt} to park"
    )
    answer = {
        **template_of(parked["update_command"]),
        "actor": "ops-ann",
        "basis": "the line is in the file",
        "output": {field: SEEN},
    }
    done, said = await send_update(address, handle.id, "reconcile", answer)
    assert done == 0, said
    assert await handle.result() == SEEN
    return parked


def timed_out(failure: BaseException | None) -> TimeoutType | None:
    """The type of the activity timeout that failed the run (its cause chain's)."""
    while failure is not None:
        if isinstance(failure, ActivityError) and isinstance(failure.cause, TimeoutError):
            return failure.cause.type
        failure = failure.__cause__
    return None


async def refused_asks(client: Client, prompt: str) -> int:
    """How often an ask-only attempt of the run ``bounds-PROMPT`` found the call free to
    act, and did not act (its activity failed with ``ToolAttemptsSpent``)."""
    history = await client.get_workflow_handle(f"bounds-{prompt}").fetch_history()
    return sum(
        1
        for event in history.events
        if event.HasField("activity_task_failed_event_attributes")
        and event.activity_task_failed_event_attributes.failure.application_failure_info.type
        == "ToolAttemptsSpent"
    )


def recorded(ledger_url: str, prompt: str) -> list[str]:
    """The types of the ledger's records of the run ``bounds-PROMPT``'s keys."""
    with Ledger.open(ledger_url) as ledger:
        events = ledger.events()
    keys = {
        e.key
        for e in events
        if e.type == "action.requested"
        and e.payload.get("context", {}).get("workflow_id") == f"bounds-{prompt}"
    }
    return [e.type for e in events if e.key in keys]


@pytest.mark.parametrize("attempts", [1, 3])
async def test_a_hanging_model_node_is_tried_as_often_as_its_policy_says_then_fails(
    temporal_address: str, tmp_path: Path, attempts: int
) -> None:
    """``start_to_close_timeout=100ms`` and ``maximum_attempts`` of 1 or 3: the node is
    tried that often and the workflow fails with the timeout, as it would without the
    ledger (before, the ledger scheduled the node again forever)."""
    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    prompt = f"hang-{attempts}-{uuid.uuid4().hex[:6]}"
    options = hung_node(maximum_attempts=attempts)
    async with running(temporal_address, ledger_url, options) as (client, tq):
        failure, took = await failure_of(client, BoundedGraphWorkflow.run, prompt, tmp_path, tq)
        # The last word was the ledger's: asked what the timed-out node did, it had
        # nothing, and recorded nothing (the node acts first and never got to record).
        assert await refused_asks(client, prompt) == 1
    assert timed_out(failure) is TimeoutType.START_TO_CLOSE, failure
    assert took < PROMPTLY, f"the run failed after {took:.1f} s"
    assert TRIES[prompt] == attempts
    assert recorded(ledger_url, prompt) == []


async def test_a_hanging_model_node_stops_at_its_schedule_to_close_timeout(
    temporal_address: str, tmp_path: Path
) -> None:
    """Attempts without limit, but 1.5 s from schedule to close: the node is tried within
    it, and then the run fails with the timeout (the ledger asks, and never acts again)."""
    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    prompt = f"hang-deadline-{uuid.uuid4().hex[:6]}"
    options = {**hung_node(), "schedule_to_close_timeout": timedelta(seconds=1.5)}
    async with running(temporal_address, ledger_url, options) as (client, tq):
        failure, took = await failure_of(client, BoundedGraphWorkflow.run, prompt, tmp_path, tq)
        # However often Temporal tried it in that time, the ledger was asked once, and
        # had nothing.
        assert await refused_asks(client, prompt) == 1
    assert timed_out(failure) in (TimeoutType.SCHEDULE_TO_CLOSE, TimeoutType.START_TO_CLOSE)
    assert took < PROMPTLY, f"the run failed after {took:.1f} s"
    assert TRIES[prompt] >= 1
    assert recorded(ledger_url, prompt) == []


async def test_a_node_option_over_the_plugins_defaults_is_honoured(
    temporal_address: str, tmp_path: Path
) -> None:
    """The plugin's defaults allow 30 s and 5 attempts; the node's own options say 100 ms
    and one attempt: the run fails on the node's timeout within seconds, not on its
    execution timeout."""
    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    prompt = f"hang-override-{uuid.uuid4().hex[:6]}"
    defaults = {
        "start_to_close_timeout": timedelta(seconds=30),
        "retry_policy": RetryPolicy(maximum_attempts=5),
    }
    options = hung_node(maximum_attempts=1)
    async with running(temporal_address, ledger_url, options, defaults) as (client, tq):
        failure, took = await failure_of(client, BoundedGraphWorkflow.run, prompt, tmp_path, tq)
    assert timed_out(failure) is TimeoutType.START_TO_CLOSE, failure
    assert took < PROMPTLY, f"the run failed after {took:.1f} s"
    assert TRIES[prompt] == 1


async def test_non_retryable_error_types_end_a_model_node_at_its_first_failure(
    temporal_address: str, tmp_path: Path
) -> None:
    """Five attempts allowed, but ``ValueError`` is non-retryable: one try, and the
    workflow gets the node's own error."""
    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    prompt = f"bad-{uuid.uuid4().hex[:6]}"
    options = {
        "start_to_close_timeout": timedelta(seconds=10),
        "retry_policy": RetryPolicy(
            initial_interval=timedelta(milliseconds=100),
            maximum_attempts=5,
            non_retryable_error_types=["ValueError"],
        ),
    }
    async with running(temporal_address, ledger_url, options) as (client, tq):
        failure, took = await failure_of(client, BoundedGraphWorkflow.run, prompt, tmp_path, tq)
    assert isinstance(failure, ActivityError), failure
    assert isinstance(failure.cause, ApplicationError) and failure.cause.type == "ValueError"
    assert f"the model refused {prompt}" in failure.cause.message
    assert TRIES[prompt] == 1
    assert took < PROMPTLY


async def test_a_tool_node_that_acted_and_timed_out_parks_instead_of_failing(
    temporal_address: str, tmp_path: Path
) -> None:
    """The tool node (not retry-safe) appends its line and hangs past its 100 ms under
    ``maximum_attempts=1``: the policy is spent, but its effect is unknown, so the run
    parks; the operator's answer completes it, and the tool never ran twice."""
    target = tmp_path / "effects.txt"
    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    prompt = f"tool-stall-{uuid.uuid4().hex[:6]}"
    options = hung_node(maximum_attempts=1)
    async with running(temporal_address, ledger_url, options) as (client, tq):
        parked = await answered_when_parked(
            temporal_address, client, BoundedGraphWorkflow.run, prompt, target, tq, "answer"
        )
        assert await refused_asks(client, prompt) == 0
    assert template_of(parked["update_command"])["output"] == PLACEHOLDER
    assert TRIES[prompt] == 1, "the tool node ran again"
    assert lines(target) == [f"line for {prompt}"]


async def test_run_tool_keeps_the_bounds_too(temporal_address: str, tmp_path: Path) -> None:
    """``run_tool`` under ``maximum_attempts=1`` and 500 ms: a retry-safe tool that hangs
    fails the step with its timeout after one try; a tool that may not repeat, which
    acted and hung, parks (before, the step failed with its effect unknown)."""
    target = tmp_path / "effects.txt"
    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    hang, stall = (f"{word}-{uuid.uuid4().hex[:6]}" for word in ("hang", "stall"))
    async with running(temporal_address, ledger_url, hung_node()) as (client, tq):
        failure, took = await failure_of(client, BoundedStepWorkflow.run, hang, target, tq)
        assert timed_out(failure) is TimeoutType.START_TO_CLOSE, failure
        assert took < PROMPTLY
        assert TRIES[hang] == 1

        await answered_when_parked(
            temporal_address, client, BoundedStepWorkflow.run, stall, target, tq, "text"
        )
        assert (await refused_asks(client, hang), await refused_asks(client, stall)) == (1, 0)
    assert TRIES[stall] == 1
    assert lines(target) == [f"line for {stall}"]
    # The retry-safe tool acts first and records after: its hung attempt, and the ask
    # that found nothing, left no record.
    assert recorded(ledger_url, hang) == []


async def test_a_call_inside_a_node_that_acted_and_timed_out_parks_on_its_own_key(
    temporal_address: str, tmp_path: Path
) -> None:
    """A ``per_call`` node's tool call appends its line and stalls past the node's
    100 ms under ``maximum_attempts=1``: the node runs once more on the attempt that only
    asks, its call asks the ledger, and the run parks on the call's key; answered, it
    completes with the operator's output, and the tool never ran twice."""
    target = tmp_path / "effects.txt"
    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    prompt = f"stall-calls-{uuid.uuid4().hex[:6]}"
    options = hung_node(maximum_attempts=1)
    async with running(temporal_address, ledger_url, options) as (client, tq):
        parked = await answered_when_parked(
            temporal_address, client, BoundedCallsWorkflow.run, prompt, target, tq, "content"
        )
    assert parked["key"].endswith("/call_append"), parked
    assert TRIES[prompt] == 1, "the tool ran again"
    assert lines(target) == [f"line for {prompt}"]


async def test_an_ask_only_attempt_records_nothing_where_the_call_would_act(
    temporal_address: str, tmp_path: Path
) -> None:
    """A tool that may not repeat claims its key, then hangs reading the state its
    precondition is compared with, past its 500 ms under ``maximum_attempts=1``: it never
    acted. The ask-only attempt waits out the claim if it is still live (``ToolInProgress``),
    then finds the key free to act and fails the step with the timeout, writing nothing: no
    ``execution_started`` of an execution that never was, no completion of its own (before,
    it claimed the key and recorded a start and a no-effect completion)."""
    target = tmp_path / "effects.txt"
    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    prompt = f"checked-hang-{uuid.uuid4().hex[:6]}"
    async with running(temporal_address, ledger_url, hung_node()) as (client, tq):
        failure, took = await failure_of(client, BoundedStepWorkflow.run, prompt, target, tq)
        assert timed_out(failure) is TimeoutType.START_TO_CLOSE, failure
        assert took < PROMPTLY, f"the run failed after {took:.1f} s"
        assert await refused_asks(client, prompt) == 1
    assert TRIES.get(prompt, 0) == 0, "the tool acted"
    # The timed-out attempt's request (its claim holds no event of its own), and, if the
    # ask came while that claim was live, the ask's request and its deferral: nothing
    # that says an execution started or ended.
    types = recorded(ledger_url, prompt)
    assert types[0] == "action.requested", types
    assert set(types) <= {"action.requested", "action.deferred"}, types


async def test_a_call_no_worker_ever_started_fails_at_its_schedule_to_close_timeout(
    temporal_address: str, tmp_path: Path
) -> None:
    """A tool that may not repeat, scheduled on a task queue no worker polls, with 1 s from
    schedule to close: no attempt ever started, so nothing can have acted, and the step
    fails with Temporal's timeout, promptly, with no ask-only attempt (which would have no
    timeout on that queue: the run would wait for its execution timeout)."""
    target = tmp_path / "effects.txt"
    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    prompt = f"unpolled-{uuid.uuid4().hex[:6]}"
    async with running(temporal_address, ledger_url, hung_node()) as (client, tq):
        failure, took = await failure_of(client, BoundedStepWorkflow.run, prompt, target, tq)
        history = await client.get_workflow_handle(f"bounds-{prompt}").fetch_history()
    # Temporal says schedule-to-start of an attempt that never reached a worker, even
    # where only the schedule-to-close timeout is set.
    assert timed_out(failure) in (TimeoutType.SCHEDULE_TO_START, TimeoutType.SCHEDULE_TO_CLOSE)
    assert took < PROMPTLY, f"the run failed after {took:.1f} s"
    scheduled = [
        e for e in history.events if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert len(scheduled) == 1, "an ask-only attempt was scheduled"
    assert TRIES.get(prompt, 0) == 0
    assert recorded(ledger_url, prompt) == []
