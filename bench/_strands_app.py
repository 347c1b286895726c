"""The scripted ten-turn agent of ``agent_overhead.py`` on Strands (``--framework
strands``), apart from ``_agent_apps.py``: temporalio-strands-agents needs mcp<2, so it
installs only in an environment of its own (.venv-strands), where the other frameworks
do not.

A ``TemporalAgent`` with one tool, ``append_line(path, line)``, an activity it calls
through ``activity_as_tool``, that appends a line to a file with the same function as
the other arms' (``examples.plan``'s write + flush + fsync, on a thread). Its model is
the Strands example's scripted one (``examples.strands.activities.ScriptedModel``), asked
in the integration's ``invoke_model`` activity: the prompt is the script, one
``append_line {json}`` line per tool call, one call per turn, then an answer. Nothing
here knows about the ledger.
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path

from temporalio import activity, workflow
from temporalio.strands_agents import TemporalAgent
from temporalio.strands_agents.workflow import activity_as_tool

from examples.plan.activities import _append
from examples.strands.activities import ScriptedModel

TOOL = "append_line"
#: The activities' timeout, as the other arms'.
START_TO_CLOSE = timedelta(minutes=5)
#: The workflow type (the ledger's performer) and the model's name in ``StrandsPlugin``.
STRANDS_WORKFLOW = "BenchStrandsAgent"
MODEL = "bench-scripted"
MODELS = {MODEL: ScriptedModel}


def prompt(path: str, turns: int) -> str:
    """The scripted model's script: ``turns`` calls of ``append_line``, one per line."""
    return "\n".join(
        f"{TOOL} {json.dumps({'path': path, 'line': f'line {n}'})}" for n in range(turns)
    )


@activity.defn(name=TOOL)
async def append_line(path: str, line: str) -> str:
    """Append one line to a file.

    Args:
        path: The file.
        line: The line.
    """
    lines = await asyncio.to_thread(_append, Path(path), line)
    return f"{path} has {lines} lines"


@workflow.defn(name=STRANDS_WORKFLOW)
class StrandsAgentWorkflow:
    """One ``invoke_async`` of an agent whose only tool is ``append_line``."""

    @workflow.run
    async def run(self, script: str, max_turns: int) -> str:
        del max_turns  # Strands sets no limit on an agent's cycles
        agent = TemporalAgent(
            model=MODEL,
            start_to_close_timeout=START_TO_CLOSE,
            system_prompt="Call the tools the prompt lists, one per turn, then answer.",
            tools=[activity_as_tool(append_line, start_to_close_timeout=START_TO_CLOSE)],
            callback_handler=None,
        )
        result = await agent.invoke_async(script)
        return str(result).strip()


STRANDS_ACTIVITIES = (append_line,)
