"""A workflow that creates one ticket on a far side through the ledger.

Run it with the dev server (``temporal server start-dev``), the far side
(``python -m examples.tickets.far_side``), then ``python -m examples.tickets.worker``, then
``python -m examples.tickets.starter --url http://127.0.0.1:8080``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel
from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from temporal_ledger.workflows import run_tool

    from .activities import HTTP_TOOLS, CreateTicket, Ticket


class TicketRequest(BaseModel):
    """Which ticket tool to run, with what, on whose behalf."""

    ticket: CreateTicket
    #: ``create_ticket`` retries an unknown effect under the same key (the far side
    #: deduplicates); ``create_ticket_unguarded`` parks it for an operator.
    tool: Literal["create_ticket", "create_ticket_unguarded"] = "create_ticket"
    performer: str = "agent"


@workflow.defn
class TicketWorkflow:
    """One ledgered ``create_ticket*`` step; conflicts, denials and failures fail the run."""

    @workflow.run
    async def run(self, request: TicketRequest) -> Ticket:
        return await run_tool(
            HTTP_TOOLS[request.tool], request.ticket, step="ticket", performer=request.performer
        )


TICKET_WORKFLOWS = [TicketWorkflow]
