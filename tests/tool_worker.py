"""A worker process that runs only tool activities, so a test can kill it mid-tool."""

from __future__ import annotations

import asyncio
import signal
import sys

from temporal_ledger.activities import LedgerPlugin
from temporalio.client import Client
from temporalio.worker import Worker

from examples.agent.models import OpenAIChatClient, model_tool
from examples.plan.activities import EXAMPLE_TOOLS
from tests.temporal_tools import TEST_TOOLS


async def main(
    address: str, task_queue: str, ledger_url: str, policy: str, lease: float, model_url: str
) -> None:
    client = await Client.connect(
        address, plugins=[LedgerPlugin(ledger_url, policy=policy, lease=lease)]
    )
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    model = model_tool(OpenAIChatClient(base_url=model_url))
    async with Worker(
        client,
        task_queue=task_queue,
        activities=[*TEST_TOOLS.values(), *EXAMPLE_TOOLS.values(), model],
    ):
        print("WORKER READY", flush=True)
        await stop.wait()


if __name__ == "__main__":
    address, task_queue, ledger_url, policy, lease = sys.argv[1:6]
    model_url = sys.argv[6] if len(sys.argv) > 6 else "http://127.0.0.1:9/unused"
    asyncio.run(main(address, task_queue, ledger_url, policy, float(lease), model_url))
