"""The worker of the pydantic-ai example: ``SupportAgentWorkflow`` and its agent's
activities (model, refund tool, MCP notes server), with every tool call ledgered.

    temporal server start-dev                          # a local dev server on localhost:7233
    python -m examples.pydantic_ai.worker               # this worker, until Ctrl-C
    python -m examples.pydantic_ai.starter              # in a second terminal

Options: ``--address localhost:7233 --namespace default --task-queue ledger-support-ai
--ledger sqlite:///ledger.db --policy policy.toml``. The tools write ``refunds.jsonl``
and ``notes.txt`` to ``$SUPPORT_DIR`` (default: ``temporal-ledger-examples`` in the system's
temporary directory, never the repository).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from pathlib import Path

from pydantic_ai.durable_exec.temporal import PydanticAIPlugin
from temporal_ledger.activities import LedgerPlugin
from temporal_ledger.activities.pydantic_ai import activity_rules
from temporalio.client import Client
from temporalio.worker import Worker

from .activities import agent
from .workflows import SupportAgentWorkflow

TASK_QUEUE = "ledger-support-ai"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Run the pydantic-ai example's worker.")
    parser.add_argument("--address", default="localhost:7233")
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--task-queue", default=TASK_QUEUE)
    parser.add_argument("--ledger", default=f"sqlite:///{Path('ledger.db').resolve()}")
    parser.add_argument("--policy", type=Path, help="authority policy TOML (default: allow all)")
    return parser.parse_args()


async def main(args: argparse.Namespace) -> None:
    client = await Client.connect(
        args.address,
        namespace=args.namespace,
        plugins=[
            PydanticAIPlugin(),
            LedgerPlugin(args.ledger, policy=args.policy, ledger_activities=activity_rules(agent)),
        ],
    )
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    async with Worker(client, task_queue=args.task_queue, workflows=[SupportAgentWorkflow]):
        print(f"worker ready on task queue {args.task_queue!r}", flush=True)
        await stop.wait()


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
