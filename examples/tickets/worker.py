"""The worker of the tickets example: ``TicketWorkflow`` and the HTTP ticket tools.

    temporal server start-dev                      # a local dev server on localhost:7233
    python -m examples.tickets.far_side            # the ticket service on :8080
    python -m examples.tickets.worker              # this worker, until Ctrl-C
    python -m examples.tickets.starter             # --url http://127.0.0.1:8080

Options: ``--address localhost:7233 --namespace default --task-queue ledger-tickets
--ledger sqlite:///ledger.db --policy policy.toml`` (the default ledger is
``ledger.db`` in the current folder; without a policy every performer may do anything).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
from pathlib import Path

from temporal_ledger.activities import LedgerPlugin
from temporalio.client import Client
from temporalio.worker import Worker

from .activities import HTTP_TOOLS
from .workflows import TICKET_WORKFLOWS

TASK_QUEUE = "ledger-tickets"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Run the tickets example's worker.")
    parser.add_argument("--address", default="localhost:7233")
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--task-queue", default=TASK_QUEUE)
    parser.add_argument("--ledger", default=f"sqlite:///{Path('ledger.db').resolve()}")
    parser.add_argument("--policy", type=Path, help="authority policy TOML (default: allow all)")
    return parser.parse_args()


async def main(args: argparse.Namespace) -> None:
    plugin = LedgerPlugin(args.ledger, policy=args.policy)
    client = await Client.connect(args.address, namespace=args.namespace, plugins=[plugin])
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    async with Worker(
        client,
        task_queue=args.task_queue,
        workflows=TICKET_WORKFLOWS,
        activities=list(HTTP_TOOLS.values()),
    ):
        print(f"worker ready: task queue {args.task_queue}, ledger {args.ledger}", flush=True)
        await stop.wait()
    print("worker stopped", flush=True)


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
    # Everything is flushed and closed. Skip the interpreter's shutdown, which the Temporal
    # SDK's native threads can crash (a known, open SDK bug: exit status 134 or 139).
    os._exit(0)
