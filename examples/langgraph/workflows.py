"""The support agent's workflow: one run of the graph, on one user message."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from temporalio.langgraph import graph

    from .activities import GRAPH


@workflow.defn
class SupportAgentWorkflow:
    @workflow.run
    async def run(self, prompt: str) -> str:
        app = graph(GRAPH).compile()
        final = await app.ainvoke({"messages": [{"role": "user", "content": prompt}]})
        return str(final["messages"][-1].content)
