"""Start one ``RefundWorkflow``; print the call awaiting approval and how to approve it.

    temporal server start-dev
    python -m examples.approval.worker
    python -m examples.approval.starter --order A-1 --amount-cents 2000

The run waits until a person approves exactly this call. The starter prints the
``pending_approvals`` entry (tool, arguments, key, fingerprint) and the ready-made
``temporal workflow update execute ... --name approve`` command; fill in your name and
the reason (or ``"decision": "reject"``), run it in another terminal, and the starter
prints the result.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import uuid
from pathlib import Path

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from examples import work_dir

from .activities import Refund
from .worker import TASK_QUEUE
from .workflows import RefundWorkflow


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Start one approval example workflow.")
    parser.add_argument("--address", default="localhost:7233")
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--task-queue", default=TASK_QUEUE)
    parser.add_argument("--order", default="A-1")
    parser.add_argument("--amount-cents", type=int, default=2000)
    parser.add_argument(
        "--book",
        type=Path,
        help="the file refunds are written to (default: refunds.log in $SUPPORT_DIR, or in "
        "temporal-ledger-examples in the system's temporary directory)",
    )
    args = parser.parse_args()
    # The worker may run in another folder: give it an absolute path, never one in the
    # repository the examples run from unless asked for.
    args.book = (args.book or work_dir() / "refunds.log").resolve()
    return args


async def main(args: argparse.Namespace) -> None:
    client = await Client.connect(
        args.address, namespace=args.namespace, data_converter=pydantic_data_converter
    )
    workflow_id = f"refund-{uuid.uuid4()}"
    handle = await client.start_workflow(
        RefundWorkflow.run,
        Refund(order=args.order, amount_cents=args.amount_cents, book=str(args.book)),
        id=workflow_id,
        task_queue=args.task_queue,
    )
    print(f"workflow id: {workflow_id}", flush=True)
    print(f"book: {args.book}", flush=True)
    while not (pending := await handle.query("pending_approvals")):  # noqa: ASYNC110 - another process answers
        await asyncio.sleep(0.2)
    print(f"awaiting approval: {json.dumps(pending[0], default=str)}", flush=True)
    print(f"approve with: {pending[0]['approve_command']}", flush=True)
    refunded = await handle.result()
    print(f"result: {refunded.model_dump_json()}", flush=True)


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
    # Everything is flushed and closed. Skip the interpreter's shutdown, which the Temporal
    # SDK's native threads can crash (a known, open SDK bug: exit status 134 or 139).
    os._exit(0)
