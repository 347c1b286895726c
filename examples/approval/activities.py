"""A refund that a person approves, for its exact amount, before it acts.

``refund`` appends one line to a book file (the effect). It is declared with
``requires_approval=True``: each execution waits in the workflow until someone sends
update ``approve`` naming the fingerprint of exactly this call. An approval given for
one amount cannot authorise another; the ledger records who approved, when and why.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from pydantic import BaseModel
from temporal_ledger.activities import tool, tool_context


class Refund(BaseModel):
    order: str
    amount_cents: int
    #: The book file the refund is written to (the far side of this example): an absolute
    #: path, as the worker may run in another folder (the starter's default is in
    #: ``examples.work_dir()``, never the repository).
    book: str


class Refunded(BaseModel):
    refund_id: str


@tool(capability="payments.refund", requires_approval=True)
async def refund(arg: Refund) -> Refunded:
    """Refund an order: one line in the book, once, after a person approved this call."""
    refund_id = f"R-{uuid.uuid4().hex[:8]}"
    line = f"{refund_id} {arg.order} {arg.amount_cents} key={tool_context().key}\n"
    await asyncio.to_thread(_append, Path(arg.book), line)
    return Refunded(refund_id=refund_id)


def _append(path: Path, line: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as book:
        book.write(line)


APPROVAL_TOOLS = {"refund": refund}
