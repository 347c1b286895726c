"""Tools and a workflow for the approval and probe tests: payments on a local far side."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import BaseModel
from temporalio import workflow
from temporalio.workflow import ActivityConfig

with workflow.unsafe.imports_passed_through():
    from temporal_ledger.activities import ProbeAnswer, tool
    from temporal_ledger.activities.http import HttpResult, lookup_probe, request_json
    from temporal_ledger.workflows import run_tool


class Payment(BaseModel):
    base_url: str
    amount: int


class Receipt(BaseModel):
    payment_id: str
    amount: int


async def _pay(arg: Payment) -> Receipt:
    result = await request_json(
        "POST", f"{arg.base_url}/payments", json={"amount": arg.amount}, timeout=5
    )
    return Receipt.model_validate(result.body)


def _receipt(result: HttpResult) -> Receipt:
    return Receipt.model_validate(result.body)


by_key = lookup_probe("{base_url}/payments/by-key/{key}", output=_receipt)


async def broken_probe(key: str, arg: Payment) -> ProbeAnswer:
    raise RuntimeError("the far side's lookup is down")


@tool(capability="payments.refund", requires_approval=True)
async def refund(arg: Payment) -> Receipt:
    """A risky call: a person approves each one, for its exact amount."""
    return await _pay(arg)


@tool(capability="payments.charge", probe=by_key)
async def charge(arg: Payment) -> Receipt:
    return await _pay(arg)


@tool(
    capability="payments.charge",
    name="charge_conclusive",
    probe=by_key,
    probe_absence_conclusive=True,
)
async def charge_conclusive(arg: Payment) -> Receipt:
    return await _pay(arg)


@tool(
    capability="payments.charge",
    name="charge_broken_probe",
    probe=broken_probe,
    probe_absence_conclusive=True,
)
async def charge_broken_probe(arg: Payment) -> Receipt:
    return await _pay(arg)


PAYMENT_TOOLS = {t.__name__: t for t in (refund, charge, charge_conclusive, charge_broken_probe)}


class PaymentJob(BaseModel):
    tool: str
    arg: dict[str, Any]
    step: str = "pay"
    performer: str = "agent"
    key: str | None = None


@workflow.defn
class PaymentWorkflow:
    @workflow.run
    async def run(self, job: PaymentJob) -> dict[str, Any]:
        receipt = await run_tool(
            PAYMENT_TOOLS[job.tool],
            job.arg,
            step=job.step,
            performer=job.performer,
            key=job.key,
            options=ActivityConfig(heartbeat_timeout=timedelta(0)),
        )
        return receipt.model_dump()
