"""Start one ``AgentWorkflow`` with a goal and print its result.

    temporal server start-dev
    python -m examples.agent.worker --model-script turns.json   # or --model-base-url URL
    python -m examples.agent.starter "append 'hello' to /tmp/agent.txt" [--model gpt-4o-mini]

``--model`` is the model name sent to the endpoint (any name for a scripted model).
Prints the workflow id, then the result as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import uuid

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from .worker import TASK_QUEUE
from .workflows import AgentInput, AgentWorkflow


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Start one agent example workflow.")
    parser.add_argument("goal", help="what the agent should do")
    parser.add_argument("--address", default="localhost:7233")
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--task-queue", default=TASK_QUEUE)
    parser.add_argument("--model", default="scripted")
    parser.add_argument("--max-model-calls", type=int, default=8)
    return parser.parse_args()


async def main(args: argparse.Namespace) -> None:
    client = await Client.connect(
        args.address, namespace=args.namespace, data_converter=pydantic_data_converter
    )
    agent = AgentInput(goal=args.goal, model=args.model, max_model_calls=args.max_model_calls)
    workflow_id = f"agent-{uuid.uuid4()}"
    handle = await client.start_workflow(
        AgentWorkflow.run, agent, id=workflow_id, task_queue=args.task_queue
    )
    print(f"workflow id: {workflow_id}", flush=True)
    result = await handle.result()
    print(f"result: {result.model_dump_json()}", flush=True)


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
    # Everything is flushed and closed. Skip the interpreter's shutdown, which the Temporal
    # SDK's native threads can crash (a known, open SDK bug: exit status 134 or 139).
    os._exit(0)
