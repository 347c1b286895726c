"""The workflows of the Google ADK test agent (``tests.google_adk_support``): one agent
run, a scripted model, the two refund tools and the MCP notes toolset (stateless, or
stateful: one MCP session for the run, served by ADK's nested worker)."""

from __future__ import annotations

from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from google.adk.agents import Agent
    from google.adk.runners import Runner
    from google.adk.sessions import InMemorySessionService
    from google.genai import types
    from temporalio.google_adk import (
        TemporalMcpToolSet,
        TemporalModel,
        TemporalStatefulMcpToolSet,
    )
    from temporalio.google_adk.workflow import activity_as_tool

    from tests.google_adk_support import AGENT_NAME, MODEL, TOOL_TIMEOUT, TOOLS, TOOLSET


@workflow.defn
class AdkAgentWorkflow:
    @workflow.run
    async def run(self, prompt: str, folder: str) -> str:
        toolset = TemporalMcpToolSet(TOOLSET, config={"start_to_close_timeout": TOOL_TIMEOUT})
        return await run_agent(prompt, folder, toolset)


@workflow.defn
class AdkStatefulWorkflow:
    @workflow.run
    async def run(self, prompt: str, folder: str) -> str:
        async with TemporalStatefulMcpToolSet(TOOLSET) as toolset:
            return await run_agent(prompt, folder, toolset)


async def run_agent(prompt: str, folder: str, toolset: Any) -> str:
    """One run of the agent on ``prompt``; its last text."""
    agent = Agent(
        name=AGENT_NAME,
        model=TemporalModel(MODEL),
        instruction="Follow the script.",
        tools=[
            *(activity_as_tool(tool, start_to_close_timeout=TOOL_TIMEOUT) for tool in TOOLS),
            toolset,
        ],
    )
    runner = Runner(agent=agent, app_name="ledger-tests", session_service=InMemorySessionService())
    session = await runner.session_service.create_session(
        app_name="ledger-tests", user_id="tester", state={"folder": folder}
    )
    answer = ""
    async for event in runner.run_async(
        user_id="tester",
        session_id=session.id,
        new_message=types.Content(role="user", parts=[types.Part(text=prompt)]),
    ):
        for part in (event.content.parts or []) if event.content else []:
            if part.text:
                answer = part.text
    return answer
