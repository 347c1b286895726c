"""Start one ``SupportAgentWorkflow`` and print the agent's answer.

    python -m examples.strands.starter \
        --prompt 'issue_refund {"order": "A-1", "cents": 1250}
    add_note {"ticket": "T-7", "text": "refunded A-1"}'

The prompt is the scripted model's script (``activities.py``): one tool call per line.
The default refunds order A-1 and notes it on ticket T-7. Reset the run with
``temporal workflow reset`` and nothing happens twice.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import uuid

from temporalio.client import Client
from temporalio.strands_agents import StrandsPlugin

from .worker import TASK_QUEUE
from .workflows import SupportAgentWorkflow

DEFAULT_PROMPT = (
    'issue_refund {"order": "A-1", "cents": 1250}\n'
    'add_note {"ticket": "T-7", "text": "refunded A-1"}'
)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Start one Strands example workflow.")
    parser.add_argument("--address", default="localhost:7233")
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--task-queue", default=TASK_QUEUE)
    parser.add_argument("--prompt", default=DEFAULT_PROMPT)
    parser.add_argument("--workflow-id", default=None)
    return parser.parse_args()


async def main(args: argparse.Namespace) -> None:
    # The integration's converter (pydantic, with Strands' failure converter), as the
    # worker's client has it. No model here: the starter asks none.
    client = await Client.connect(
        args.address, namespace=args.namespace, plugins=[StrandsPlugin(models={})]
    )
    workflow_id = args.workflow_id or f"support-strands-{uuid.uuid4().hex[:8]}"
    handle = await client.start_workflow(
        SupportAgentWorkflow.run, args.prompt, id=workflow_id, task_queue=args.task_queue
    )
    print(f"workflow id: {workflow_id}", flush=True)
    print(f"result: {json.dumps(await handle.result())}", flush=True)


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
    # A short-lived client process can abort in interpreter teardown while the Temporal
    # client's Rust threads wind down (temporalio/sdk-python#300); everything is printed
    # and nothing is left to clean up, so leave without the teardown.
    sys.stdout.flush()
    os._exit(0)
