"""Example HTTP tools: create a ticket on a far side, with and without its deduplication.

``create_ticket`` is ``retry_safe``: it is for a far side that deduplicates by the
``Idempotency-Key`` header, so after an unknown effect the ledger lets it try again
under the same key. ``create_ticket_unguarded`` is for a far side that does not: an
unknown effect parks the workflow step until an operator has looked.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from temporal_ledger.activities import tool
from temporal_ledger.activities.http import request_json

__all__ = [
    "HTTP_TOOLS",
    "CreateTicket",
    "Ticket",
    "create_ticket",
    "create_ticket_unguarded",
]


class CreateTicket(BaseModel):
    #: The far side's base URL; the ticket is POSTed to ``{base_url}/tickets``.
    base_url: str
    title: str
    body: str = ""
    timeout: float = 10.0


class Ticket(BaseModel):
    #: ``None`` when the far side did not say (e.g. a 409 without a body).
    ticket_id: str | None = None
    status: int
    #: The far side already held this key (409): the ticket exists from an earlier attempt.
    already_done: bool = False


async def _post_ticket(arg: CreateTicket) -> Ticket:
    result = await request_json(
        "POST",
        f"{arg.base_url.rstrip('/')}/tickets",
        json={"title": arg.title, "body": arg.body},
        timeout=arg.timeout,
    )
    return Ticket(
        ticket_id=_ticket_id(result.body), status=result.status, already_done=result.already_done
    )


def _ticket_id(body: Any) -> str | None:
    if isinstance(body, dict) and body.get("ticket_id") is not None:
        return str(body["ticket_id"])
    return None


@tool(capability="tickets.create", retry_safe=True)
async def create_ticket(arg: CreateTicket) -> Ticket:
    """Create a ticket on a far side that deduplicates by ``Idempotency-Key``."""
    return await _post_ticket(arg)


@tool(capability="tickets.create")
async def create_ticket_unguarded(arg: CreateTicket) -> Ticket:
    """Create a ticket on a far side that may not deduplicate: unknown effects park."""
    return await _post_ticket(arg)


HTTP_TOOLS = {"create_ticket": create_ticket, "create_ticket_unguarded": create_ticket_unguarded}
