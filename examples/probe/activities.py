"""An HTTP tool with a probe: an unknown outcome is looked up before anyone is asked.

``place_order`` POSTs an order with the ledger's key as ``Idempotency-Key``. When the
reply is lost (a timeout, a dropped connection, a 5xx) the effect is unknown; instead of
parking the step for a person, the workflow runs the tool's probe, a GET of
``{base_url}/orders?idempotency_key={key}`` (``{key}`` is the key in the one spelling the
header carries too, which no router decodes). An answer whose JSON names the key it looked
up is evidence: 2xx means the order exists (recorded as ``effect_confirmed`` by
``probe:place_order``, with the response as evidence, and its body is the step's output),
404 means it does not (conclusive for this far side, so the step places the order again
under the same key). Anything else parks the step as before.
"""

from __future__ import annotations

from pydantic import BaseModel
from temporal_ledger.activities import tool
from temporal_ledger.activities.http import HttpResult, lookup_probe, request_json


class PlaceOrder(BaseModel):
    base_url: str
    item: str
    quantity: int = 1


class Order(BaseModel):
    order_id: str
    item: str
    quantity: int


def _order(result: HttpResult) -> Order:
    return Order.model_validate(result.body)


@tool(
    capability="orders.place",
    probe=lookup_probe("{base_url}/orders?idempotency_key={key}", output=_order),
    # This far side lists every order it ever accepted: a 404 proves there is none.
    probe_absence_conclusive=True,
)
async def place_order(arg: PlaceOrder) -> Order:
    """Place one order; the far side files it under the Idempotency-Key."""
    result = await request_json(
        "POST", f"{arg.base_url}/orders", json={"item": arg.item, "quantity": arg.quantity}
    )
    return _order(result)


PROBE_TOOLS = {"place_order": place_order}
