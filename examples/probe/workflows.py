"""A workflow with one order step whose unknown outcome is settled by the tool's probe.

Run it with the dev server (``temporal server start-dev``),
``python -m examples.probe.far_side --lose-replies 1``, ``python -m examples.probe.worker``,
then ``python -m examples.probe.starter --url http://127.0.0.1:8080``.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from temporal_ledger.workflows import run_tool

    from .activities import Order, PlaceOrder, place_order


@workflow.defn
class OrderWorkflow:
    """Place one order; a lost reply is looked up by key before it would park."""

    @workflow.run
    async def run(self, request: PlaceOrder) -> Order:
        return await run_tool(place_order, request, step="order", performer="agent")


PROBE_WORKFLOWS = [OrderWorkflow]
