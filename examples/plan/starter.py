"""Start one plan workflow that appends a couple of lines to a file, and print its result.

    temporal server start-dev
    python -m examples.plan.worker
    python -m examples.plan.starter --path out.txt [--lines one two] [--workflow append-lines]

``--workflow plan`` (the default) runs ``ScriptedAgentWorkflow`` with one ``append_line``
step per line; ``append-lines`` runs ``AppendLinesWorkflow``. Prints the workflow id,
then the result as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import uuid
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter

from .worker import TASK_QUEUE
from .workflows import AppendLinesWorkflow, Plan, PlannedCall, ScriptedAgentWorkflow


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Start one plan example workflow.")
    parser.add_argument("--address", default="localhost:7233")
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--task-queue", default=TASK_QUEUE)
    parser.add_argument("--path", type=Path, required=True, help="the file to append to")
    parser.add_argument("--lines", nargs="+", default=["first line", "second line"])
    parser.add_argument("--workflow", choices=["plan", "append-lines"], default="plan")
    args = parser.parse_args()
    # The worker may run in another folder: give it an absolute path.
    args.path = args.path.resolve()
    return args


async def main(args: argparse.Namespace) -> None:
    path = str(args.path)
    client = await Client.connect(
        args.address, namespace=args.namespace, data_converter=pydantic_data_converter
    )
    workflow_id = f"plan-{uuid.uuid4()}"
    # Either workflow: one answers a PlanReport, the other a count of lines.
    handle: WorkflowHandle[Any, Any]
    if args.workflow == "plan":
        plan = Plan(
            calls=[
                PlannedCall(step=f"line-{i}", tool="append_line", arg={"path": path, "line": line})
                for i, line in enumerate(args.lines)
            ]
        )
        handle = await client.start_workflow(
            ScriptedAgentWorkflow.run, plan, id=workflow_id, task_queue=args.task_queue
        )
    else:
        handle = await client.start_workflow(
            AppendLinesWorkflow.run,
            args=[path, args.lines],
            id=workflow_id,
            task_queue=args.task_queue,
        )
    print(f"workflow id: {workflow_id}", flush=True)
    result = await handle.result()
    output = result.model_dump(mode="json") if hasattr(result, "model_dump") else result
    print(f"result: {json.dumps(output)}", flush=True)


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
    # Everything is flushed and closed. Skip the interpreter's shutdown, which the Temporal
    # SDK's native threads can crash (a known, open SDK bug: exit status 134 or 139).
    os._exit(0)
