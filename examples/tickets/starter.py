"""Start one ``TicketWorkflow`` that POSTs a ticket to ``{url}/tickets``; print its result.

    temporal server start-dev
    python -m examples.tickets.far_side --lose-replies 1   # the ticket service on :8080
    python -m examples.tickets.worker
    python -m examples.tickets.starter [--url http://127.0.0.1:8080] [--title "api down"]

The far side files the ticket and loses the reply; ``create_ticket`` is ``retry_safe``
(the far side dedupes by ``Idempotency-Key``), so the ledger lets it try again under the
same key, and the far side answers with the ticket it filed: one ticket. ``--unguarded``
uses ``create_ticket_unguarded`` (for a far side that does not deduplicate): an unknown
outcome then parks the step until an operator reconciles it. Prints the workflow id, the
ledger key, then the result as JSON. With no far side at ``--url`` it says so and exits 2
instead of waiting for one.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import urllib.parse
import uuid

from temporal_ledger.ledger import Ledger
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
    parser.add_argument(
        "--url",
        default="http://127.0.0.1:8080",
        help="the far side's base URL (default: python -m examples.tickets.far_side's)",
    )
    parser.add_argument("--title", default="example ticket")
    parser.add_argument("--body", default="")
    parser.add_argument("--unguarded", action="store_true")
    return parser.parse_args()


async def far_side_answers(url: str) -> bool:
    """Whether anything accepts connections at ``url``: without a far side, the ledger
    retries a call that was never sent for as long as the workflow runs."""
    parts = urllib.parse.urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        _, writer = await asyncio.wait_for(
            asyncio.open_connection(parts.hostname or "127.0.0.1", port), 5
        )
    except (OSError, TimeoutError):
        return False
    writer.close()
    return True


async def main(args: argparse.Namespace) -> None:
    if not await far_side_answers(args.url):
        print(
            f"starter: no far side answers at {args.url}: start one with "
            "`python -m examples.tickets.far_side`, or name yours with --url",
            file=sys.stderr,
            flush=True,
        )
        os._exit(2)
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
    # run_tool's key for the step "ticket": what the far side files the ticket under (in
    # its wire form) and what `temporal-ledger show` takes.
    key = Ledger.step_key(
        workflow_id, handle.first_execution_run_id or handle.result_run_id or "", "ticket"
    )
    print(f"ledger key: {key}", flush=True)
    ticket = await handle.result()
    print(f"result: {ticket.model_dump_json()}", flush=True)


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
    # Everything is flushed and closed. Skip the interpreter's shutdown, which the Temporal
    # SDK's native threads can crash (a known, open SDK bug: exit status 134 or 139).
    os._exit(0)
