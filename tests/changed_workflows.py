"""A deliberately incompatible version of an example workflow, for the replay tests."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from examples.plan.workflows import AppendLinesWorkflow


@workflow.defn(name="AppendLinesWorkflow")
class ChangedAppendLinesWorkflow:
    """A timer before the first tool call: running histories no longer match."""

    @workflow.run
    async def run(self, path: str, lines: list[str], performer: str = "agent") -> int:
        await workflow.sleep(1)
        return await AppendLinesWorkflow().run(path, lines, performer)
