"""Recorded runs of both agent frameworks' apps replay with their plugins and the ledger's.

The histories (``tests/histories/agents/``) are of runs that parked and were reconciled,
that waited for an approval, and that were reset and replayed from the ledger. They are
written by the tests that make those runs, with ``LEDGER_RECORD_HISTORIES=1``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic_ai.durable_exec.temporal import PydanticAIPlugin
from temporal_ledger.activities._replay import replay_histories

from tests import test_openai_agents, test_pydantic_ai_durability
from tests.openai_support import LedgeredSupportWorkflow
from tests.pydantic_ai_workflows import DurableSupportWorkflow
from tests.temporal_support import AGENT_HISTORIES

pytestmark = pytest.mark.timeout(120)


def histories(prefix: str) -> list[Path]:
    found = sorted(AGENT_HISTORIES.glob(f"{prefix}-*.json"))
    names = {path.stem.removeprefix(f"{prefix}-") for path in found}
    assert {"mcp-reconciled", "approved", "reset"} <= names, names
    return found


def openai_plugins(tmp_path: Path) -> list[object]:
    desk = test_openai_agents.Desk("unused:7233", tmp_path)
    # In the order the OpenAI integration refuses on a Replayer of its own.
    return [desk.ledger_plugin(), test_openai_agents.agents_plugin(tmp_path)]


def pydantic_ai_plugins(tmp_path: Path) -> list[object]:
    desk = test_pydantic_ai_durability.Desk("unused:7233", tmp_path)
    return [PydanticAIPlugin(), desk.ledger_plugin()]


@pytest.mark.parametrize(
    ("prefix", "workflow", "plugins"),
    [
        ("openai", LedgeredSupportWorkflow, openai_plugins),
        ("pydantic-ai", DurableSupportWorkflow, pydantic_ai_plugins),
    ],
)
async def test_agent_histories_replay_with_the_frameworks_plugin_and_the_ledgers(
    prefix: str, workflow: type, plugins: Callable[[Path], list[object]], tmp_path: Path
) -> None:
    found = histories(prefix)
    text = " ".join(path.read_text() for path in found)
    assert "ledger.reconcile" in text and "ledger.approve" in text
    reports = await replay_histories(found, workflows=[workflow], plugins=plugins(tmp_path))
    assert all(r.ok for r in reports), [r.error for r in reports]
