"""A workflow with one refund step that waits for a person's approval of the exact call.

Run it with the dev server (``temporal server start-dev``), then
``python -m examples.approval.worker``, then ``python -m examples.approval.starter``.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from temporal_ledger.workflows import run_tool

    from .activities import Refund, Refunded, refund


@workflow.defn
class RefundWorkflow:
    """Refund once, after update ``approve``; a rejection fails the run with ToolRejected."""

    @workflow.run
    async def run(self, request: Refund) -> Refunded:
        return await run_tool(refund, request, step="refund", performer="support-agent")


APPROVAL_WORKFLOWS = [RefundWorkflow]
