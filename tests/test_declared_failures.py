"""A tool's own failures, declared as "failed before acting", fail as the framework
intends; undeclared, they park (issue 41, item 8). Against the real dev server.

``forecast`` raises ``ApplicationError("No weather for ...", non_retryable=True)``. With
``no_effect_errors=(NonRetryableApplicationError,)`` the run ends exactly as it does
without the ledger, and the ledger records the call as no effect; without it, the call
parks as an unknown effect (the ledger cannot tell that the tool did nothing).
"""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from temporal_ledger.activities import (
    LedgerOptions,
    LedgerPlugin,
    NonRetryableApplicationError,
    Policy,
    tool,
)
from temporal_ledger.activities.openai_agents import activity_rules
from temporal_ledger.ledger import Ledger
from temporalio.client import Client, WorkflowFailureError
from temporalio.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin
from temporalio.worker import Worker

from tests.declared_tools import PostWorkflow, post_on_board
from tests.openai_custom_tool import CustomToolProvider, CustomToolWorkflow, forecast
from tests.temporal_support import lines, open_effects, wait_for

pytestmark = pytest.mark.timeout(180)


def agents_plugin(folder: Path) -> OpenAIAgentsPlugin:
    return OpenAIAgentsPlugin(
        model_provider=CustomToolProvider(folder / "model-calls.jsonl"),
        model_params=ModelActivityParameters(start_to_close_timeout=timedelta(seconds=20)),
    )


def ledger_plugin(folder: Path, declared: tuple[type[BaseException], ...]) -> LedgerPlugin:
    return LedgerPlugin(
        f"sqlite:///{folder / 'ledger.db'}",
        policy=Policy(performers={"CustomToolWorkflow": ["activity.*"]}, reconcilers=["ops-*"]),
        options=LedgerOptions(lease=2.0),
        ledger_activities=activity_rules(tools=[forecast], no_effect_errors=declared),
    )


async def outcome(client: Client, task_queue: str, prompt: str) -> tuple[str, str]:
    """How the run ended: ``("result", ...)`` or ``("failure", <the chain of causes>)``."""
    workflow_id = f"weather-{uuid.uuid4().hex[:8]}"
    try:
        result = await client.execute_workflow(
            CustomToolWorkflow.run, prompt, id=workflow_id, task_queue=task_queue
        )
    except WorkflowFailureError as exc:
        causes: list[str] = []
        cause: BaseException | None = exc.cause
        while cause is not None:
            causes.append(f"{type(cause).__name__}: {cause}")
            cause = cause.__cause__
        return "failure", " <- ".join(causes)
    return "result", result


async def test_a_declared_non_retryable_tool_error_fails_as_without_the_ledger(
    temporal_address: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SUPPORT_DIR", str(tmp_path))
    task_queue = f"tq-weather-{uuid.uuid4().hex[:8]}"
    bare = await Client.connect(temporal_address, plugins=[agents_plugin(tmp_path)])
    async with Worker(
        bare, task_queue=task_queue, workflows=[CustomToolWorkflow], activities=[forecast]
    ):
        without_ledger = await outcome(bare, task_queue, "forecast Atlantis")

    task_queue = f"tq-weather-{uuid.uuid4().hex[:8]}"
    plugins = [agents_plugin(tmp_path), ledger_plugin(tmp_path, (NonRetryableApplicationError,))]
    client = await Client.connect(temporal_address, plugins=plugins)
    async with Worker(
        client, task_queue=task_queue, workflows=[CustomToolWorkflow], activities=[forecast]
    ):
        with_ledger = await outcome(client, task_queue, "forecast Atlantis")
        # A declared error is a failure only: a tool that works still answers.
        assert await outcome(client, task_queue, "forecast Lisbon") == (
            "result",
            "done after 1 call",
        )
    assert "No weather for Atlantis" in without_ledger[1]
    assert with_ledger == without_ledger
    assert lines(tmp_path / "forecasts.txt") == ["Atlantis", "Atlantis", "Lisbon"]
    with Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}") as ledger:
        assert ledger.open_effects() == []
        [failed] = [
            e.payload
            for e in ledger.events()
            if e.type == "action.completed" and e.payload.get("status") == "failed"
        ]
        assert failed["effect"] == "none" and failed["retryable"] is True
        assert "No weather for Atlantis" in failed["error"]
        assert ledger.verify().ok


async def test_an_undeclared_non_retryable_tool_error_parks(
    temporal_address: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SUPPORT_DIR", str(tmp_path))
    task_queue = f"tq-weather-{uuid.uuid4().hex[:8]}"
    plugins = [agents_plugin(tmp_path), ledger_plugin(tmp_path, ())]
    client = await Client.connect(temporal_address, plugins=plugins)
    async with Worker(
        client, task_queue=task_queue, workflows=[CustomToolWorkflow], activities=[forecast]
    ):
        handle = await client.start_workflow(
            CustomToolWorkflow.run,
            "forecast Atlantis",
            id=f"weather-{uuid.uuid4().hex[:8]}",
            task_queue=task_queue,
        )
        [parked] = await wait_for(
            lambda: open_effects(temporal_address, handle.id), what="the forecast to park"
        )
        assert "No weather for Atlantis" in json.dumps(parked)
        await handle.terminate("test over")
    assert lines(tmp_path / "forecasts.txt") == ["Atlantis"]


async def test_a_tool_s_declared_exception_records_no_effect_and_acts_again(
    temporal_address: str, tmp_path: Path
) -> None:
    board = tmp_path / "board.txt"
    plugin = LedgerPlugin(
        f"sqlite:///{tmp_path / 'ledger.db'}",
        policy=Policy(performers={"PostWorkflow": ["board.*"]}, reconcilers=["ops-*"]),
    )
    client = await Client.connect(temporal_address, plugins=[plugin])
    task_queue = f"tq-post-{uuid.uuid4().hex[:8]}"
    async with Worker(
        client, task_queue=task_queue, workflows=[PostWorkflow], activities=[post_on_board]
    ):
        await client.execute_workflow(
            PostWorkflow.run,
            str(board),
            id=f"post-{uuid.uuid4().hex[:8]}",
            task_queue=task_queue,
            execution_timeout=timedelta(seconds=60),
        )
    assert lines(board) == ["hello"]
    with Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}") as ledger:
        completed = [e.payload for e in ledger.events() if e.type == "action.completed"]
        assert [(c["status"], c["effect"]) for c in completed] == [
            ("failed", "none"),
            ("succeeded", "observed"),
        ]
        assert "Refused: the board is busy" in completed[0]["error"]
        assert ledger.open_effects() == []
        assert ledger.verify().ok


def test_no_effect_errors_takes_exception_classes_only() -> None:
    with pytest.raises(TypeError, match="exception classes"):
        tool(capability="board.post", no_effect_errors=("Refused",))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="exception classes"):
        activity_rules(tools=[forecast], no_effect_errors=[KeyboardInterrupt])
