"""A ledgered activity whose result type checks more than its JSON schema says (a bound),
and a workflow that calls it with that type, for tests of a confirmed output that is
recorded and still does not convert (tests/test_answer_decoding.py)."""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel, Field
from temporalio import activity, workflow
from temporalio.common import RetryPolicy


class Charge(BaseModel):
    """What the far side returns for a charge: a positive amount."""

    amount: int = Field(gt=0)


@activity.defn
async def charge_and_lose_reply(order: str) -> Charge:
    """Charges (the effect), then loses its reply: the effect is unknown."""
    raise RuntimeError(f"connection reset after charging {order}")


@workflow.defn
class ChargeWorkflow:
    @workflow.run
    async def run(self, order: str) -> int:
        charge = await workflow.execute_activity(
            charge_and_lose_reply,
            order,
            start_to_close_timeout=timedelta(seconds=10),
            retry_policy=RetryPolicy(maximum_attempts=3),
        )
        return charge.amount
