"""The OpenAI Agents example's support agent, with tools that misbehave on purpose.

Its MCP server is ``tests.mcp_notes``; its function tools are the example's refund and
one that acts and then fails to report.
"""

from __future__ import annotations

import json
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporal_ledger.activities import ProbeAnswer
from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    from agents import Agent, Runner
    from temporalio.openai_agents.workflow import (
        activity_as_tool,
        stateless_mcp_server,
        temporal_mcp_server,
    )

    from examples.openai_agents.activities import issue_refund


@activity.defn
async def refund_and_lose_reply(order: str, cents: int) -> str:
    """Refunds, then the connection to the caller drops: the effect happened."""
    await issue_refund(order, cents)
    raise ConnectionResetError("the payment service hung up after taking the refund")


async def find_refund(key: str, args: list[Any]) -> ProbeAnswer:
    """The refund book as a far side that can be asked: is this order refunded?"""
    order, cents = args
    book = Path(os.environ["SUPPORT_DIR"]) / "refunds.jsonl"
    entries = [json.loads(line) for line in book.read_text().splitlines()] if book.exists() else []
    if {"order": order, "cents": cents} in entries:
        return ProbeAnswer.present(f"refunded {cents} cents on {order}", [f"{book}: {order}"])
    return ProbeAnswer.absent([f"{book}: no refund of {order}"])


TOOLS = [issue_refund, refund_and_lose_reply]
PROBES = {"refund_and_lose_reply": find_refund}


@workflow.defn
class LedgeredSupportWorkflow:
    @workflow.run
    async def run(self, prompt: str) -> str:
        timeout = timedelta(seconds=20)
        agent = Agent(
            name="Support",
            instructions="Use the tools, then answer.",
            tools=[activity_as_tool(tool, start_to_close_timeout=timeout) for tool in TOOLS],
            mcp_servers=[
                temporal_mcp_server(
                    "notes",
                    activity_config=workflow.ActivityConfig(
                        start_to_close_timeout=timeout, heartbeat_timeout=timedelta(seconds=2)
                    ),
                )
            ],
        )
        result = await Runner.run(agent, prompt)
        return str(result.final_output)


@workflow.defn
class StatelessProviderWorkflow:
    """The same agent on the deprecated ``StatelessMCPServerProvider`` wiring."""

    @workflow.run
    async def run(self, prompt: str) -> str:
        agent = Agent(
            name="Support",
            instructions="Use the tools, then answer.",
            mcp_servers=[
                stateless_mcp_server(
                    "notes",
                    config=workflow.ActivityConfig(
                        start_to_close_timeout=timedelta(seconds=20),
                        heartbeat_timeout=timedelta(seconds=2),
                    ),
                )
            ],
        )
        result = await Runner.run(agent, prompt)
        return str(result.final_output)


@activity.defn(name="refund-under-another-name")
async def refund_renamed(order: str, cents: int) -> str:
    """The example's refund under an activity name that is not the function's own."""
    return await issue_refund(order, cents)


@workflow.defn
class RenamedToolWorkflow:
    """The agent with one tool, whose activity type is not its function's name."""

    @workflow.run
    async def run(self, prompt: str) -> str:
        timeout = timedelta(seconds=20)
        agent = Agent(
            name="Support",
            instructions="Use the tools, then answer.",
            tools=[activity_as_tool(refund_renamed, start_to_close_timeout=timeout)],
        )
        result = await Runner.run(agent, prompt)
        return str(result.final_output)
