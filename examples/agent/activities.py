"""The agent example's activities: the recorded model call and the tools it may offer."""

from __future__ import annotations

from typing import Any

from temporal_ledger.activities import Tool

from examples.plan.activities import EXAMPLE_TOOLS

from .models import (
    MODEL_ACTIVITY,
    MODEL_CALL,
    ModelClient,
    OpenAIChatClient,
    ScriptedModel,
    model_tool,
)

__all__ = [
    "AGENT_TOOLS",
    "MODEL_ACTIVITY",
    "MODEL_CALL",
    "ModelClient",
    "OpenAIChatClient",
    "ScriptedModel",
    "model_tool",
    "register_agent_tool",
]

#: The tools an agent workflow may offer its model, by name. This module is passed
#: through the workflow sandbox, so tools registered at worker start-up are visible
#: to the agent workflows that worker runs.
AGENT_TOOLS: dict[str, Tool[Any, Any]] = dict(EXAMPLE_TOOLS)


def register_agent_tool(tool: Tool[Any, Any], *, name: str | None = None) -> None:
    """Offer a ``@tool`` to agent workflows under ``name`` (default: its activity name)."""
    name = name or tool.name
    AGENT_TOOLS.setdefault(name, tool)
