"""The crash matrix's Strands workflow (``tests.crash_tools_strands``)."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from temporalio.strands_agents import TemporalAgent, TemporalMCPClient
    from temporalio.strands_agents.workflow import activity_as_tool

    from tests.crash_tools_strands import MODEL, NOTES, crash_strands_append
    from tests.crash_worker import HEARTBEAT, START_TO_CLOSE


@workflow.defn
class CrashStrandsWorkflow:
    """The agent calls the tool the prompt names (``crash_strands_append`` or the MCP
    server's ``append_note``), then answers with what it returned. Strands sets no
    activity timeouts of its own: the model and the tools get the matrix's."""

    @workflow.run
    async def run(self, prompt: str) -> str:
        agent = TemporalAgent(
            model=MODEL,
            start_to_close_timeout=START_TO_CLOSE,
            heartbeat_timeout=HEARTBEAT,
            tools=[
                activity_as_tool(
                    crash_strands_append,
                    start_to_close_timeout=START_TO_CLOSE,
                    heartbeat_timeout=HEARTBEAT,
                ),
                TemporalMCPClient(
                    server=NOTES,
                    start_to_close_timeout=START_TO_CLOSE,
                    heartbeat_timeout=HEARTBEAT,
                ),
            ],
            callback_handler=None,
        )
        result = await agent.invoke_async(prompt)
        return str(result).strip()
