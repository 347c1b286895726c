"""Start one ``OrderWorkflow`` against the order service; print its result.

    temporal server start-dev
    python -m examples.probe.far_side --lose-replies 1
    python -m examples.probe.worker
    python -m examples.probe.starter --url http://127.0.0.1:8080 [--item book]

The far side files the order and loses the reply; the tool's probe finds the order by
its key and the run completes with it, without parking. ``temporal-ledger --db
sqlite:///ledger.db show KEY``, with the ledger key the starter prints, then shows the
verdict by ``probe:place_order``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import uuid

from temporal_ledger.ledger import Ledger
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from .activities import PlaceOrder
from .worker import TASK_QUEUE
from .workflows import OrderWorkflow


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Start one probe example workflow.")
    parser.add_argument("--address", default="localhost:7233")
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--task-queue", default=TASK_QUEUE)
    parser.add_argument("--url", required=True, help="the order service's base URL")
    parser.add_argument("--item", default="book")
    parser.add_argument("--quantity", type=int, default=1)
    return parser.parse_args()


async def main(args: argparse.Namespace) -> None:
    client = await Client.connect(
        args.address, namespace=args.namespace, data_converter=pydantic_data_converter
    )
    workflow_id = f"order-{uuid.uuid4()}"
    handle = await client.start_workflow(
        OrderWorkflow.run,
        PlaceOrder(base_url=args.url, item=args.item, quantity=args.quantity),
        id=workflow_id,
        task_queue=args.task_queue,
    )
    print(f"workflow id: {workflow_id}", flush=True)
    # run_tool's key for the step "order": what `temporal-ledger show` takes.
    key = Ledger.step_key(
        workflow_id, handle.first_execution_run_id or handle.result_run_id or "", "order"
    )
    print(f"ledger key: {key}", flush=True)
    order = await handle.result()
    print(f"result: {order.model_dump_json()}", flush=True)


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
    # Everything is flushed and closed. Skip the interpreter's shutdown, which the Temporal
    # SDK's native threads can crash (a known, open SDK bug: exit status 134 or 139).
    os._exit(0)
