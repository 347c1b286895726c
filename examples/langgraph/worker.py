"""The worker of the LangGraph example: ``SupportAgentWorkflow`` and its graph's node
activities (the model node and the tool node), with every node ledgered.

    temporal server start-dev                          # a local dev server on localhost:7233
    python -m examples.langgraph.worker                 # this worker, until Ctrl-C
    python -m examples.langgraph.starter                # in a second terminal

Options: ``--address localhost:7233 --namespace default --task-queue ledger-support-lg
--ledger sqlite:///ledger.db --policy policy.toml``, or ``--no-ledger``: the same worker
without ``LedgerPlugin`` (and its tool node without ``ledger_tool_calls``), to see what
the ledger prevents (a reset acts again). The tools write ``refunds.jsonl`` and
``notes.txt`` to ``$SUPPORT_DIR`` (default: ``temporal-ledger-examples`` in the system's
temporary directory, never the repository).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from pathlib import Path

from temporal_ledger.activities import LedgerPlugin
from temporal_ledger.activities.langgraph import activity_rules
from temporalio.client import Client
from temporalio.langgraph import LangGraphPlugin
from temporalio.worker import Worker

from .activities import GRAPH, MODEL_NODE, TOOL_NODE, builder
from .workflows import SupportAgentWorkflow

TASK_QUEUE = "ledger-support-lg"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Run the LangGraph example's worker.")
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
    """The integration's plugin with the graph, and the ledger's; with ``--no-ledger``, the
    integration's alone, with a graph whose tool node runs its tools unledgered."""
    langgraph = LangGraphPlugin(graphs={GRAPH: builder(ledgered=not args.no_ledger)})
    if args.no_ledger:
        return [langgraph]
    # The model node is retry-safe; each tool call in the tool node acts at most once,
    # under a key of its own (an unknown effect parks the run for an operator).
    rules = activity_rules(GRAPH, model_nodes=[MODEL_NODE], tool_nodes=[TOOL_NODE], per_call=True)
    return [langgraph, LedgerPlugin(args.ledger, policy=args.policy, ledger_activities=rules)]


async def main(args: argparse.Namespace) -> None:
    client = await Client.connect(
        args.address,
        namespace=args.namespace,
        plugins=plugins(args),  # type: ignore[arg-type]
    )
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    async with Worker(client, task_queue=args.task_queue, workflows=[SupportAgentWorkflow]):
        print(f"worker ready on task queue {args.task_queue!r}", flush=True)
        await stop.wait()


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
