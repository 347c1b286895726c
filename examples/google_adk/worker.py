"""The worker of the Google ADK example: ``SupportAgentWorkflow``, its refund tool, its
MCP notes server (a subprocess per call) and a scripted model, with every model call,
tool call and MCP call ledgered.

    temporal server start-dev                          # a local dev server on localhost:7233
    python -m examples.google_adk.worker                # this worker, until Ctrl-C
    python -m examples.google_adk.starter               # in a second terminal

Options: ``--address localhost:7233 --namespace default --task-queue ledger-support-adk
--ledger sqlite:///ledger.db --policy policy.toml``, or ``--no-ledger``: the same worker
without ``LedgerPlugin``, to see what the ledger prevents (a reset acts again). The
tools write ``refunds.jsonl`` and ``notes.txt`` to ``$SUPPORT_DIR`` (default:
``temporal-ledger-examples`` in the system's temporary directory, never the repository).
The model is scripted (no network, no API key): see ``activities.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from pathlib import Path

from temporal_ledger.activities import LedgerPlugin
from temporal_ledger.activities.google_adk import activity_rules
from temporalio.client import Client
from temporalio.google_adk import GoogleAdkPlugin, TemporalMcpToolSetProvider
from temporalio.worker import Worker

from .activities import NOTES, issue_refund, notes_toolset
from .workflows import SupportAgentWorkflow

TASK_QUEUE = "ledger-support-adk"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Run the Google ADK example's worker.")
    parser.add_argument("--address", default="localhost:7233")
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--task-queue", default=TASK_QUEUE)
    parser.add_argument("--ledger", help="the ledger's database (default: sqlite:///ledger.db)")
    parser.add_argument("--policy", type=Path, help="authority policy TOML (default: allow all)")
    parser.add_argument(
        "--no-ledger",
        action="store_true",
        help="the same worker without LedgerPlugin, to see what the ledger prevents: "
        "a reset acts again",
    )
    args = parser.parse_args()
    if args.no_ledger and (args.ledger or args.policy):
        parser.error("--no-ledger runs without a ledger: leave out --ledger and --policy")
    args.ledger = args.ledger or f"sqlite:///{Path('ledger.db').resolve()}"
    return args


def plugins(args: argparse.Namespace) -> list[object]:
    """The integration's plugin and the ledger's, on the client (the worker inherits
    them); either may come first. With ``--no-ledger``, the integration's alone."""
    adk = GoogleAdkPlugin(toolset_providers=[TemporalMcpToolSetProvider(NOTES, notes_toolset)])
    if args.no_ledger:
        return [adk]
    return [
        adk,
        LedgerPlugin(
            args.ledger,
            policy=args.policy,
            ledger_activities=activity_rules(tools=[issue_refund]),
        ),
    ]


async def main(args: argparse.Namespace) -> None:
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
        workflows=[SupportAgentWorkflow],
        activities=[issue_refund],
    ):
        print(f"worker ready on task queue {args.task_queue!r}", flush=True)
        await stop.wait()


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
