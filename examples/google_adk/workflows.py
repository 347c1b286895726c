"""The support agent: one function tool and one MCP toolset, on Temporal."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from google.adk.agents import Agent
    from google.adk.runners import Runner
    from google.adk.sessions import InMemorySessionService
    from google.genai import types
    from temporalio.google_adk import TemporalMcpToolSet, TemporalModel
    from temporalio.google_adk.workflow import activity_as_tool

    from .activities import MODEL, NOTES, issue_refund

TIMEOUT = timedelta(seconds=30)
APP = "support"


@workflow.defn
class SupportAgentWorkflow:
    @workflow.run
    async def run(self, prompt: str) -> str:
        agent = Agent(
            name="support",
            model=TemporalModel(MODEL, {"start_to_close_timeout": TIMEOUT}),
            instruction="Help the customer with the tools you have, then answer.",
            tools=[
                activity_as_tool(issue_refund, start_to_close_timeout=TIMEOUT),
                TemporalMcpToolSet(NOTES, config={"start_to_close_timeout": TIMEOUT}),
            ],
        )
        runner = Runner(agent=agent, app_name=APP, session_service=InMemorySessionService())
        session = await runner.session_service.create_session(app_name=APP, user_id="customer")
        answer = ""
        async for event in runner.run_async(
            user_id="customer",
            session_id=session.id,
            new_message=types.Content(role="user", parts=[types.Part(text=prompt)]),
        ):
            for part in (event.content.parts or []) if event.content else []:
                if part.text:
                    answer = part.text
        return answer
