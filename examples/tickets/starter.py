"""Start one ``TicketWorkflow`` that POSTs a ticket to ``{url}/tickets``; print its result.

    temporal server start-dev
    python -m examples.tickets.worker
    python -m examples.tickets.starter --url http://127.0.0.1:8080 [--title "api down"]

``--unguarded`` uses ``create_ticket_unguarded`` (for a far side that does not deduplicate
by ``Idempotency-Key``): an unknown outcome then parks the step until an operator
reconciles it. Prints the workflow id, then the result as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import uuid

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from .activities import CreateTicket
from .worker import TASK_QUEUE
from .workflows import TicketRequest, TicketWorkflow


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Start one tickets example workflow.")
    parser.add_argument("--address", default="localhost:7233")
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--task-queue", default=TASK_QUEUE)
    parser.add_argument("--url", required=True, help="the far side's base URL")
    parser.add_argument("--title", default="example ticket")
    parser.add_argument("--body", default="")
    parser.add_argument("--unguarded", action="store_true")
    return parser.parse_args()


async def main(args: argparse.Namespace) -> None:
    client = await Client.connect(
        args.address, namespace=args.namespace, data_converter=pydantic_data_converter
    )
    request = TicketRequest(
        ticket=CreateTicket(base_url=args.url, title=args.title, body=args.body),
        tool="create_ticket_unguarded" if args.unguarded else "create_ticket",
    )
    workflow_id = f"ticket-{uuid.uuid4()}"
    handle = await client.start_workflow(
        TicketWorkflow.run, request, id=workflow_id, task_queue=args.task_queue
    )
    print(f"workflow id: {workflow_id}", flush=True)
    ticket = await handle.result()
    print(f"result: {ticket.model_dump_json()}", flush=True)


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
    # Everything is flushed and closed. Skip the interpreter's shutdown, which the Temporal
    # SDK's native threads can crash (a known, open SDK bug: exit status 134 or 139).
    os._exit(0)
