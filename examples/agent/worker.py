"""The worker of the agent example: ``AgentWorkflow``, its model call and its tools.

    temporal server start-dev                      # a local dev server on localhost:7233
    python -m examples.agent.worker --model-script turns.json   # or --model-base-url URL
    python -m examples.agent.starter "append 'hello' to /tmp/agent.txt"

The model is an OpenAI-compatible endpoint (``--model-base-url``, API key from
``$LEDGER_MODEL_API_KEY``) or an offline ``ScriptedModel`` (``--model-script``: a JSON
list of turns such as ``{"tool_calls": [{"name": "append_line", "arguments": {...}}]}``
and ``{"content": "done"}``); with neither, a script that answers at once.
Options: ``--address localhost:7233 --namespace default --task-queue ledger-agent
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

from .activities import AGENT_TOOLS, ModelClient, OpenAIChatClient, ScriptedModel, model_tool
from .workflows import AGENT_WORKFLOWS

TASK_QUEUE = "ledger-agent"


def model_client(args: argparse.Namespace) -> ModelClient:
    if args.model_base_url:
        return OpenAIChatClient(
            base_url=args.model_base_url, api_key=os.environ.get("LEDGER_MODEL_API_KEY")
        )
    if args.model_script:
        return ScriptedModel.from_file(args.model_script)
    return ScriptedModel([{"content": "No model is configured; this is a scripted answer."}])


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Run the agent example's worker.")
    parser.add_argument("--address", default="localhost:7233")
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--task-queue", default=TASK_QUEUE)
    parser.add_argument("--ledger", default=f"sqlite:///{Path('ledger.db').resolve()}")
    parser.add_argument("--policy", type=Path, help="authority policy TOML (default: allow all)")
    model = parser.add_mutually_exclusive_group()
    model.add_argument("--model-base-url", help="an OpenAI-compatible endpoint")
    model.add_argument("--model-script", type=Path, help="a JSON list of scripted turns")
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
        workflows=AGENT_WORKFLOWS,
        activities=[*AGENT_TOOLS.values(), model_tool(model_client(args))],
    ):
        print(f"worker ready: task queue {args.task_queue}, ledger {args.ledger}", flush=True)
        await stop.wait()
    print("worker stopped", flush=True)


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
    # Everything is flushed and closed. Skip the interpreter's shutdown, which the Temporal
    # SDK's native threads can crash (a known, open SDK bug: exit status 134 or 139).
    os._exit(0)
