"""A durable agent loop: model call, tool calls, observations, until an answer or the budget.

Every model call and every tool call goes through the ledger, keyed by the workflow
and the position in the conversation (``turn-3/model``, ``turn-3/call-1``), never by
the model's tool-call ids, which change on every turn. A worker crash, an activity
retry or a reset therefore replays the recorded answers and effects.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError
from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from temporal_ledger.workflows import (
        ToolConflictError,
        ToolDeniedError,
        ToolError,
        run_tool,
    )

    from .activities import AGENT_TOOLS
    from .models import MODEL_CALL, ChatMessage, ModelRequest, ModelResponse, ToolSchema


class AgentInput(BaseModel):
    goal: str
    model: str = "scripted"
    system: str = "You are an operations agent. Use the tools; answer when done."
    tools: list[str] = Field(default_factory=lambda: sorted(AGENT_TOOLS))
    max_model_calls: int = Field(default=8, ge=1, le=100)
    performer: str = "agent"
    settings: dict[str, Any] = Field(default_factory=lambda: {"temperature": 0})


class ToolObservation(BaseModel):
    turn: int
    tool: str
    outcome: Literal["done", "conflict", "denied", "failed", "invalid"]
    detail: str


class AgentResult(BaseModel):
    status: Literal["answered", "step_budget_exhausted"]
    answer: str | None
    model_calls: int
    observations: list[ToolObservation]


def tool_schemas(names: list[str]) -> list[ToolSchema]:
    schemas = []
    for name in names:
        tool = AGENT_TOOLS[name]
        schemas.append(
            ToolSchema(
                name=name,
                description=(tool.__doc__ or "").strip(),
                parameters=tool.arg_type.model_json_schema(),
            )
        )
    return schemas


@workflow.defn
class AgentWorkflow:
    """Model and tools in a loop, each call a ledgered step."""

    @workflow.run
    async def run(self, agent: AgentInput) -> AgentResult:
        unknown = sorted(set(agent.tools) - AGENT_TOOLS.keys())
        if unknown:
            raise ToolError(
                f"unknown tools requested: {unknown}",
                key="-",
                step="setup",
                type="AgentConfiguration",
            )
        messages = [
            ChatMessage(role="system", content=agent.system),
            ChatMessage(role="user", content=agent.goal),
        ]
        schemas = tool_schemas(agent.tools)
        observations: list[ToolObservation] = []
        for turn in range(agent.max_model_calls):
            response: ModelResponse = await run_tool(
                MODEL_CALL,
                ModelRequest(
                    model=agent.model, messages=messages, tools=schemas, settings=agent.settings
                ),
                step=f"turn-{turn}/model",
                performer=agent.performer,
            )
            messages.append(response.message)
            if not response.message.tool_calls:
                return AgentResult(
                    status="answered",
                    answer=response.message.content,
                    model_calls=turn + 1,
                    observations=observations,
                )
            for index, call in enumerate(response.message.tool_calls):
                observation = await self._call_tool(agent, turn, index, call.name, call.arguments)
                observations.append(observation)
                messages.append(
                    ChatMessage(
                        role="tool",
                        tool_call_id=call.id,
                        name=call.name,
                        content=f"{observation.outcome}: {observation.detail}",
                    )
                )
        workflow.logger.warning("agent stopped: %d model calls used", agent.max_model_calls)
        return AgentResult(
            status="step_budget_exhausted",
            answer=None,
            model_calls=agent.max_model_calls,
            observations=observations,
        )

    async def _call_tool(
        self, agent: AgentInput, turn: int, index: int, name: str, arguments: dict[str, Any]
    ) -> ToolObservation:
        def seen(outcome: Any, detail: str) -> ToolObservation:
            return ToolObservation(turn=turn, tool=name, outcome=outcome, detail=detail)

        if name not in agent.tools:
            return seen("invalid", f"no tool named {name!r}; available: {agent.tools}")
        tool = AGENT_TOOLS[name]
        try:
            arg = tool.arg_type.model_validate(arguments)
        except ValidationError as exc:
            return seen("invalid", f"arguments do not fit {name}: {exc.errors()[0]['msg']}")
        try:
            output = await run_tool(
                tool, arg, step=f"turn-{turn}/call-{index}", performer=agent.performer
            )
        except ToolConflictError as err:
            return seen("conflict", err.message)
        except ToolDeniedError as err:
            return seen("denied", err.message)
        except ToolError as err:
            return seen("failed", err.message)
        return seen("done", output.model_dump_json() if output is not None else "null")


AGENT_WORKFLOWS = [AgentWorkflow]
