"""Example workflows that drive the example tools through the ledger."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field
from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from temporal_ledger.workflows import (
        ToolConflictError,
        ToolDeniedError,
        ToolError,
        run_tool,
    )

    from .activities import EXAMPLE_TOOLS


class PlannedCall(BaseModel):
    """One tool call in a scripted plan (what a model would have asked for)."""

    step: str
    tool: Literal["append_line", "post_message"]
    arg: dict[str, Any]
    key: str | None = None
    performer: str = "agent"


class Plan(BaseModel):
    calls: list[PlannedCall]


class StepReport(BaseModel):
    step: str
    tool: str
    outcome: Literal["done", "conflict", "denied", "failed"]
    output: dict[str, Any] | None = None
    detail: str | None = None


class PlanReport(BaseModel):
    steps: list[StepReport] = Field(default_factory=list)


@workflow.defn
class ScriptedAgentWorkflow:
    """Runs a scripted plan of tool calls, one ledgered step each.

    A conflict, denial or final failure is reported for that step and the plan goes
    on; an unknown effect parks the step until an operator reconciles it.
    """

    @workflow.run
    async def run(self, plan: Plan) -> PlanReport:
        report = PlanReport()
        for call in plan.calls:
            tool = EXAMPLE_TOOLS[call.tool]
            try:
                output = await run_tool(
                    tool, call.arg, step=call.step, performer=call.performer, key=call.key
                )
            except ToolConflictError as err:
                report.steps.append(
                    StepReport(
                        step=call.step, tool=call.tool, outcome="conflict", detail=err.message
                    )
                )
            except ToolDeniedError as err:
                report.steps.append(
                    StepReport(step=call.step, tool=call.tool, outcome="denied", detail=err.message)
                )
            except ToolError as err:
                report.steps.append(
                    StepReport(step=call.step, tool=call.tool, outcome="failed", detail=err.message)
                )
            else:
                report.steps.append(
                    StepReport(
                        step=call.step,
                        tool=call.tool,
                        outcome="done",
                        output=output.model_dump(mode="json") if output is not None else None,
                    )
                )
        return report


@workflow.defn
class AppendLinesWorkflow:
    """Appends lines one step each: the smallest workflow with effects (tests, benchmarks)."""

    @workflow.run
    async def run(self, path: str, lines: list[str], performer: str = "agent") -> int:
        total = 0
        for i, line in enumerate(lines):
            out = await run_tool(
                EXAMPLE_TOOLS["append_line"],
                {"path": path, "line": line},
                step=f"line-{i}",
                performer=performer,
            )
            total = out.lines
        return total


EXAMPLE_WORKFLOWS = [ScriptedAgentWorkflow, AppendLinesWorkflow]
