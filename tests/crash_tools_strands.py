"""The crash matrix's Strands ways, and their worker process (in .venv-strands: Strands
needs mcp<2, so it cannot join ``tests.crash_tools``' worker in the main venv).

Two ways, as the other frameworks': an activity the agent calls through Strands'
``activity_as_tool`` (``crash_strands_append``), and the matrix's MCP server
``tests.crash_mcp`` (on the MCP SDK 1.x here) through ``TemporalMCPClient``, whose
``notes-call-tool`` activity the ledger records. The model is the Strands example's
scripted one: the prompt ``tool {"cell": ...}`` is its script.

    python -m tests.crash_tools_strands ADDRESS LEDGER_URL TASK_QUEUE_PREFIX

runs one worker on task queue ``PREFIX-strands``, stopping calls where ``CRASH_ARM``
says (``tests.crash_worker.CrashPoints``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from pathlib import Path

from mcp import StdioServerParameters, stdio_client
from strands.tools.mcp import MCPClient
from temporal_ledger.activities import LedgerOptions, LedgerPlugin
from temporal_ledger.activities.strands import activity_rules
from temporalio import activity
from temporalio.client import Client
from temporalio.strands_agents import StrandsPlugin
from temporalio.worker import Worker

from examples.strands.activities import ScriptedModel
from tests.crash_points import act
from tests.crash_worker import HEARTBEAT_THROTTLE, LEASE, POLICY, STICKY_TIMEOUT, CrashPoints

ROOT = Path(__file__).resolve().parent.parent
#: The scripted model's name, and the MCP server's (its activities: ``notes-list-tools``,
#: ``notes-call-tool``).
MODEL = "crash-strands"
NOTES = "notes"


@activity.defn
async def crash_strands_append(cell: str) -> str:
    """Append the cell's line to its file.

    Args:
        cell: The matrix's cell.
    """
    return await act(cell)


def notes_client() -> MCPClient:
    """The matrix's MCP server over stdio, a child of this worker (it ends its held call
    without acting when the worker dies)."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "tests.crash_mcp"],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=str(ROOT),
    )
    return MCPClient(lambda: stdio_client(params))


#: The activities that call a tool, one per way (not the model calls, not tool lists).
TOOL_ACTIVITIES = ("crash_strands_append", f"{NOTES}-call-tool")


async def main(address: str, ledger_url: str, prefix: str) -> None:
    from tests.crash_workflows_strands import CrashStrandsWorkflow

    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    client = await Client.connect(
        address,
        plugins=[
            # Strands' plugin first: it installs its failure converter over the default.
            StrandsPlugin(models={MODEL: ScriptedModel}, mcp_clients={NOTES: notes_client}),
            LedgerPlugin(
                ledger_url,
                policy=POLICY,
                options=LedgerOptions(lease=LEASE),
                ledger_activities=activity_rules(tools=[crash_strands_append]),
            ),
        ],
    )
    async with Worker(
        client,
        task_queue=f"{prefix}-strands",
        workflows=[CrashStrandsWorkflow],
        activities=[crash_strands_append],
        interceptors=[CrashPoints(TOOL_ACTIVITIES)],
        sticky_queue_schedule_to_start_timeout=STICKY_TIMEOUT,
        max_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
    ):
        print("WORKER READY", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
