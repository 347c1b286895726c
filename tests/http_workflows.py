"""Workflows for the HTTP tool tests: one ledgered ticket step, and a plain unledgered POST."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import BaseModel
from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    import httpx
    from temporal_ledger.workflows import run_tool

    from examples.tickets.activities import HTTP_TOOLS


class TicketCall(BaseModel):
    tool: str
    arg: dict[str, Any]


@workflow.defn
class TicketWorkflow:
    """One ledgered ``create_ticket*`` step; typed errors fail the workflow."""

    @workflow.run
    async def run(self, call: TicketCall) -> dict[str, Any]:
        out = await run_tool(HTTP_TOOLS[call.tool], call.arg, step="ticket", performer="agent")
        return out.model_dump()


@activity.defn
async def plain_post(url: str) -> dict[str, Any]:
    """What people write without a ledger: POST, raise on 5xx, let Temporal retry."""
    async with httpx.AsyncClient(timeout=5) as client:
        response = await client.post(url, json={"title": "plain"})
        response.raise_for_status()
        return response.json()


@workflow.defn
class PlainPostWorkflow:
    @workflow.run
    async def run(self, url: str) -> dict[str, Any]:
        # The default retry policy on purpose: this is the behaviour the ledger replaces.
        return await workflow.execute_activity(
            plain_post, url, start_to_close_timeout=timedelta(seconds=10)
        )
