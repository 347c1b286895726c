"""A worker for the two-call LangGraph graph in a process of its own, for a test that
kills it (``tests/test_langgraph.py``).

    python -m tests.langgraph_worker ADDRESS LEDGER_URL TASK_QUEUE
"""

from __future__ import annotations

import asyncio
import sys

from temporal_ledger.activities import LedgerOptions, LedgerPlugin, Policy
from temporal_ledger.activities.langgraph import activity_rules
from temporalio.client import Client
from temporalio.langgraph import LangGraphPlugin
from temporalio.worker import Worker

from tests.langgraph_graph import CALLS_GRAPH, ToolCallsGraphWorkflow, calls_builder

POLICY = Policy(
    performers={"ToolCallsGraphWorkflow": [f"activity.{CALLS_GRAPH}.*"]}, reconcilers=["ops-*"]
)


async def main(address: str, ledger_url: str, task_queue: str) -> None:
    rules = activity_rules(CALLS_GRAPH, model_nodes=["model"], tool_nodes=["tools"], per_call=True)
    client = await Client.connect(
        address,
        plugins=[
            LangGraphPlugin(graphs={CALLS_GRAPH: calls_builder()}),
            LedgerPlugin(
                ledger_url,
                policy=POLICY,
                options=LedgerOptions(lease=2.0),
                ledger_activities=rules,
            ),
        ],
    )
    async with Worker(client, task_queue=task_queue, workflows=[ToolCallsGraphWorkflow]):
        print("WORKER READY", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
