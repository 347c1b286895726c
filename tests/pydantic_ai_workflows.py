"""The workflow of the pydantic-ai support agent (``tests.pydantic_ai_support``)."""

from __future__ import annotations

from pydantic_ai.durable_exec.temporal import PydanticAIWorkflow
from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from tests.pydantic_ai_support import agent


@workflow.defn
class DurableSupportWorkflow(PydanticAIWorkflow):
    __pydantic_ai_agents__ = [agent]

    @workflow.run
    async def run(self, prompt: str, folder: str) -> str:
        result = await agent.run(prompt, deps=folder)
        return result.output
