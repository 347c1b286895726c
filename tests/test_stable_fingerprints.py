"""A call's fingerprint is the same in every worker process (issue 28, item 4).

A ``set`` in a tool's argument iterates in an order that ``PYTHONHASHSEED`` picks per
process; a NaN has no JSON form. Against a real dev server and worker processes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest
from temporal_ledger.ledger import Ledger
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError

from tests.temporal_support import Setup, lines, reset_to_first_task
from tests.temporal_tools import Call, StepsWorkflow

TAGS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]


def _set_order(seed: int) -> list[str]:
    """The order a fresh process with this hash seed iterates a set of TAGS in."""
    code = f"import json; print(json.dumps(list(set({TAGS!r}))))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONHASHSEED": str(seed), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    return json.loads(out)


async def test_a_reset_served_by_a_worker_with_another_hash_seed_replays(setup: Setup) -> None:
    # The two workers iterate the set in different orders: without a canonical form the
    # second one would send another payload and be refused as a conflict.
    first_seed, second_seed = 1, 2
    assert _set_order(first_seed) != _set_order(second_seed)
    target = setup.folder / "tags.txt"
    workflow_id = f"seeds-{uuid.uuid4().hex[:8]}"
    call = Call(tool="append_tags", step="tags", arg={"path": str(target), "tags": TAGS})
    client = await setup.client()

    async with setup.tool_worker_process(workflows=True, hash_seed=first_seed):
        handle = await client.start_workflow(
            StepsWorkflow.run, [call], id=workflow_id, task_queue=setup.task_queue
        )
        assert await handle.result() == [{"lines": 1}]
    async with setup.tool_worker_process(workflows=True, hash_seed=second_seed):
        run_id = await reset_to_first_task(
            setup.address,
            client,
            workflow_id,
            handle.result_run_id,
            reason="test: a worker with another PYTHONHASHSEED",
        )
        again = await client.get_workflow_handle(workflow_id, run_id=run_id).result()
    assert again == [{"lines": 1}]  # the recorded output, replayed
    assert lines(target) == [" ".join(sorted(TAGS))]  # acted once
    with Ledger.open(setup.ledger_url) as ledger:
        events = ledger.events()
        assert not [e for e in events if e.type == "action.replay_refused"]
        completions = [e for e in events if e.type == "action.completed"]
        assert [bool(e.payload.get("replayed")) for e in completions] == [False, True]
        requested = [e.payload for e in events if e.type == "action.requested"]
        assert [r["payload"]["tags"] for r in requested] == [sorted(TAGS)] * 2
        assert requested[0]["fingerprint"] == requested[1]["fingerprint"]
        assert ledger.verify().ok


@pytest.mark.parametrize(
    ("arg", "field", "what"),
    [
        ({"weight": "NaN"}, "Tagged.weight", "NaN"),
        ({"limits": {"low": 0.5, "high": "-Infinity"}}, "Tagged.limits.high", "-infinity"),
    ],
)
async def test_a_nan_argument_is_refused_naming_its_field_and_nothing_is_recorded(
    setup: Setup, arg: dict[str, object], field: str, what: str
) -> None:
    target = setup.folder / "nan.txt"
    key = f"nan-{uuid.uuid4().hex[:8]}"
    call = Call(
        tool="append_tags", step="tags", key=key, arg={"path": str(target), "tags": [], **arg}
    )
    client = await setup.client()
    async with setup.workflow_worker(client, tools=True):
        with pytest.raises(WorkflowFailureError) as failed:
            await client.execute_workflow(
                StepsWorkflow.run, [call], id=key, task_queue=setup.task_queue
            )
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.non_retryable
    assert cause.type == "ToolInvalidRequest"
    assert f"{field}: {what} has no exact JSON form" in cause.message
    assert "cannot be fingerprinted" in cause.message
    assert not target.exists()
    with Ledger.open(setup.ledger_url) as ledger:
        assert ledger.events(key) == []
