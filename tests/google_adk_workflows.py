"""The workflow of the Google ADK test agent (``tests.google_adk_support``): one agent
run, a scripted model, the two refund tools and the MCP notes toolset."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from google.adk.agents import Agent
    from google.adk.runners import Runner
    from google.adk.sessions import InMemorySessionService
    from google.genai import types
    from temporalio.google_adk import TemporalMcpToolSet, TemporalModel
    from temporalio.google_adk.workflow import activity_as_tool

    from tests.google_adk_support import AGENT_NAME, MODEL, TOOL_TIMEOUT, TOOLS, TOOLSET


@workflow.defn
class AdkAgentWorkflow:
    @workflow.run
    async def run(self, prompt: str, folder: str) -> str:
        agent = Agent(
            name=AGENT_NAME,
            model=TemporalModel(MODEL),
            instruction="Follow the script.",
            tools=[
                *(activity_as_tool(tool, start_to_close_timeout=TOOL_TIMEOUT) for tool in TOOLS),
                TemporalMcpToolSet(TOOLSET, config={"start_to_close_timeout": TOOL_TIMEOUT}),
            ],
        )
        runner = Runner(
            agent=agent, app_name="ledger-tests", session_service=InMemorySessionService()
        )
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
