"""The support agent: one function tool and one MCP server, on Temporal."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from agents import Agent, Runner
    from temporalio.openai_agents.workflow import activity_as_tool, temporal_mcp_server

    from .activities import issue_refund


@workflow.defn
class SupportWorkflow:
    @workflow.run
    async def run(self, prompt: str) -> str:
        agent = Agent(
            name="Support",
            instructions="Help the customer with the tools you have, then answer.",
            tools=[activity_as_tool(issue_refund, start_to_close_timeout=timedelta(seconds=30))],
            mcp_servers=[temporal_mcp_server("notes")],
        )
        result = await Runner.run(agent, prompt)
        return str(result.final_output)
