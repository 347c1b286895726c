"""The support agent: one activity tool and one MCP server, on Temporal."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from temporalio.strands_agents import TemporalAgent, TemporalMCPClient
    from temporalio.strands_agents.workflow import activity_as_tool

    from .activities import MODEL, NOTES, issue_refund

#: Strands sets no activity timeouts of its own: Temporal needs one for every activity.
TIMEOUT = timedelta(seconds=30)


@workflow.defn
class SupportAgentWorkflow:
    @workflow.run
    async def run(self, prompt: str) -> str:
        agent = TemporalAgent(
            model=MODEL,
            start_to_close_timeout=TIMEOUT,
            system_prompt="Help the customer with the tools you have, then answer.",
            tools=[
                activity_as_tool(issue_refund, start_to_close_timeout=TIMEOUT),
                TemporalMCPClient(server=NOTES, start_to_close_timeout=TIMEOUT),
            ],
            callback_handler=None,
        )
        result = await agent.invoke_async(prompt)
        return str(result).strip()
