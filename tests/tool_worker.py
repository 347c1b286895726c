"""A worker process that runs tool activities (and, asked to, the test workflows), so a
test can kill it mid-tool or run it with a ``PYTHONHASHSEED`` of its own."""

from __future__ import annotations

import asyncio
import signal
import sys

from temporal_ledger.activities import LedgerOptions, LedgerPlugin
from temporalio.client import Client
from temporalio.worker import Worker

from examples.agent.models import OpenAIChatClient, model_tool
from examples.plan.activities import EXAMPLE_TOOLS
from tests.temporal_tools import TEST_TOOLS, StepsWorkflow


async def main(
    address: str,
    task_queue: str,
    ledger_url: str,
    policy: str,
    lease: float,
    model_url: str,
    *,
    workflows: bool = False,
) -> None:
    client = await Client.connect(
        address,
        plugins=[LedgerPlugin(ledger_url, policy=policy, options=LedgerOptions(lease=lease))],
    )
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    model = model_tool(OpenAIChatClient(base_url=model_url))
    async with Worker(
        client,
        task_queue=task_queue,
        activities=[*TEST_TOOLS.values(), *EXAMPLE_TOOLS.values(), model],
        workflows=[StepsWorkflow] if workflows else [],
    ):
        print("WORKER READY", flush=True)
        await stop.wait()


if __name__ == "__main__":
    address, task_queue, ledger_url, policy, lease = sys.argv[1:6]
    model_url = sys.argv[6] if len(sys.argv) > 6 else "http://127.0.0.1:9/unused"
    workflows = sys.argv[7:8] == ["workflows"]
    asyncio.run(
        main(address, task_queue, ledger_url, policy, float(lease), model_url, workflows=workflows)
    )
