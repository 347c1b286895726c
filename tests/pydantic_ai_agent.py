"""A pydantic-ai TemporalAgent with an offline model and a file-appending tool, for tests.

Its own module so the workflow sandbox imports little. The model and the tool run in
activities on the host, where the counters below are the truth about what happened.
"""

from __future__ import annotations

import warnings
from datetime import timedelta
from pathlib import Path

from pydantic_ai import Agent, RunContext
from pydantic_ai.durable_exec.temporal import PydanticAIWorkflow, TemporalAgent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from temporalio import workflow
from temporalio.common import RetryPolicy

AGENT_NAME = "ledger_test_agent"

#: Model calls, by prompt (each test uses its own prompt).
MODEL_CALLS: dict[str, int] = {}


def _prompt(messages: list[ModelMessage]) -> str:
    first = messages[0]
    for part in getattr(first, "parts", []):
        content = getattr(part, "content", None)
        if isinstance(content, str) and getattr(part, "part_kind", "") == "user-prompt":
            return content
    return "?"


def _model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    prompt = _prompt(messages)
    MODEL_CALLS[prompt] = MODEL_CALLS.get(prompt, 0) + 1
    returned = [
        part
        for message in messages
        for part in getattr(message, "parts", [])
        if isinstance(part, ToolReturnPart)
    ]
    if not returned:
        return ModelResponse(
            parts=[ToolCallPart("append_line", {"line": f"line for {prompt}"}, tool_call_id="c1")]
        )
    return ModelResponse(parts=[TextPart(f"done: {returned[-1].content}")])


agent = Agent(FunctionModel(_model), name=AGENT_NAME, deps_type=str)


@agent.tool
async def append_line(ctx: RunContext[str], line: str) -> str:
    """Append a line to the file named by the deps (the effect the ledger protects)."""
    path = Path(ctx.deps)
    with path.open("a") as handle:
        handle.write(line + "\n")
    if "explode" in line:
        # Acted, then failed: the effect happened but the attempt reports an error.
        raise RuntimeError("connection reset after the write")
    return f"appended {line!r} (line {len(path.read_text().splitlines())})"


# TemporalAgent is deprecated in favour of the TemporalDurability capability; the issue
# is about TemporalAgent users, and both name their activities with the same namer.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=".*TemporalAgent. is deprecated")
    temporal_agent = TemporalAgent(
        agent,
        activity_config={
            "start_to_close_timeout": timedelta(seconds=20),
            "retry_policy": RetryPolicy(
                initial_interval=timedelta(milliseconds=100), maximum_interval=timedelta(seconds=1)
            ),
        },
    )


@workflow.defn
class LedgeredAgentWorkflow(PydanticAIWorkflow):
    __pydantic_ai_agents__ = [temporal_agent]

    @workflow.run
    async def run(self, prompt: str, target: str) -> str:
        result = await temporal_agent.run(prompt, deps=target)
        return result.output
