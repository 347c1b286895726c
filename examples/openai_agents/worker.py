"""The worker of the OpenAI Agents example: ``SupportWorkflow``, its refund tool, its MCP
notes server (a subprocess) and a scripted model, with every tool call ledgered.

    temporal server start-dev                          # a local dev server on localhost:7233
    python -m examples.openai_agents.worker             # this worker, until Ctrl-C
    python -m examples.openai_agents.starter            # in a second terminal

Options: ``--address localhost:7233 --namespace default --task-queue ledger-support
--ledger sqlite:///ledger.db --policy policy.toml``. The tools write ``refunds.jsonl`` and
``notes.txt`` to ``$SUPPORT_DIR`` (default: ``temporal-ledger-examples`` in the system's
temporary directory, never the repository). The model is scripted
(no network, no API key): see ``model.py``; leave out ``model_provider=`` for OpenAI's.
Without ``OPENAI_API_KEY`` the worker does not export the Agents SDK's traces to OpenAI.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from datetime import timedelta
from pathlib import Path

from agents import set_trace_processors
from agents.mcp import MCPServerStdio
from temporal_ledger.activities import LedgerPlugin
from temporal_ledger.activities.openai_agents import activity_rules
from temporalio.client import Client
from temporalio.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin
from temporalio.worker import Worker

from examples import work_dir

from .activities import issue_refund
from .model import ScriptedProvider
from .workflows import SupportWorkflow

TASK_QUEUE = "ledger-support"
ROOT = Path(__file__).resolve().parent.parent.parent
SUPPORT_DIR = work_dir()


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Run the OpenAI Agents example's worker.")
    parser.add_argument("--address", default="localhost:7233")
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--task-queue", default=TASK_QUEUE)
    parser.add_argument("--ledger", default=f"sqlite:///{Path('ledger.db').resolve()}")
    parser.add_argument("--policy", type=Path, help="authority policy TOML (default: allow all)")
    return parser.parse_args()


def notes_server(folder: Path) -> MCPServerStdio:
    """The MCP notes server, started by the integration as a subprocess when first used."""
    return MCPServerStdio(
        params={
            "command": sys.executable,
            "args": ["-m", "examples.notes_server"],
            "env": {**os.environ, "SUPPORT_DIR": str(folder)},
            "cwd": str(ROOT),
        },
        name="notes",
        cache_tools_list=True,
    )


def plugins(args: argparse.Namespace) -> list[object]:
    """The integration's plugin and the ledger's; either may come first."""
    return [
        OpenAIAgentsPlugin(
            model_provider=ScriptedProvider(),
            model_params=ModelActivityParameters(start_to_close_timeout=timedelta(seconds=30)),
            mcp_servers={"notes": lambda: notes_server(SUPPORT_DIR)},
        ),
        LedgerPlugin(
            args.ledger,
            policy=args.policy,
            ledger_activities=activity_rules(tools=[issue_refund]),
        ),
    ]


async def main(args: argparse.Namespace) -> None:
    if not os.environ.get("OPENAI_API_KEY"):
        # The model is scripted and nothing here calls OpenAI. The Agents SDK would still
        # export its traces to OpenAI's tracing backend, and, without a key, warn that
        # OPENAI_API_KEY is not set at every export: keep the traces in this process.
        set_trace_processors([])
    client = await Client.connect(
        args.address,
        namespace=args.namespace,
        plugins=plugins(args),  # type: ignore[arg-type]
    )
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    async with Worker(
        client,
        task_queue=args.task_queue,
        workflows=[SupportWorkflow],
        activities=[issue_refund],
    ):
        print(f"worker ready on task queue {args.task_queue!r}", flush=True)
        await stop.wait()


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
