"""The crash matrix's workflows: each calls one tool one way (``tests.crash_tools``)."""

from __future__ import annotations

from temporalio import workflow
from temporalio.workflow import ActivityConfig

# One module for the workflows of all five workers: everything it imports is passed
# through, so that each worker's sandbox accepts it.
with workflow.unsafe.imports_passed_through():
    from agents import Agent, Runner
    from google.adk.agents import Agent as AdkAgent
    from google.adk.runners import Runner as AdkRunner
    from google.adk.sessions import InMemorySessionService
    from google.genai import types
    from pydantic_ai.durable_exec.temporal import PydanticAIWorkflow
    from temporal_ledger.workflows import run_tool
    from temporalio.google_adk import TemporalMcpToolSet, TemporalModel
    from temporalio.google_adk.workflow import activity_as_tool as adk_activity_as_tool
    from temporalio.openai_agents.workflow import activity_as_tool, temporal_mcp_server

    from tests.crash_graph import CRASH_GRAPH
    from tests.crash_tools import (
        ADK_MODEL,
        ADK_TOOLSET,
        HEARTBEAT,
        START_TO_CLOSE,
        Cell,
        agent,
        crash_adk_append,
        crash_append,
        crash_generic_append,
        crash_oai_append,
        crash_safe_append,
    )


@workflow.defn
class CrashRunToolWorkflow:
    @workflow.run
    async def run(self, cell: str) -> str:
        out = await run_tool(
            crash_append,
            Cell(cell=cell),
            step="append",
            performer="crash-matrix",
            options=ActivityConfig(
                start_to_close_timeout=START_TO_CLOSE, heartbeat_timeout=HEARTBEAT
            ),
        )
        return out.text


@workflow.defn
class CrashRetrySafeWorkflow:
    """The same with a retry-safe ``@tool``: acts first, recorded in one write."""

    @workflow.run
    async def run(self, cell: str) -> str:
        out = await run_tool(
            crash_safe_append,
            Cell(cell=cell),
            step="append",
            performer="crash-matrix",
            options=ActivityConfig(
                start_to_close_timeout=START_TO_CLOSE, heartbeat_timeout=HEARTBEAT
            ),
        )
        return out.text


@workflow.defn
class CrashGenericWorkflow:
    @workflow.run
    async def run(self, cell: str) -> str:
        return await workflow.execute_activity(
            crash_generic_append,
            Cell(cell=cell),
            start_to_close_timeout=START_TO_CLOSE,
            heartbeat_timeout=HEARTBEAT,
        )


@workflow.defn
class CrashOpenAIWorkflow:
    """The agent calls the tool the prompt names (``crash_oai_append`` or the MCP
    server's ``append_note``), then answers with what it returned."""

    @workflow.run
    async def run(self, prompt: str) -> str:
        config = workflow.ActivityConfig(
            start_to_close_timeout=START_TO_CLOSE, heartbeat_timeout=HEARTBEAT
        )
        crasher = Agent(
            name="Crash",
            instructions="Call the tool, then answer.",
            tools=[
                activity_as_tool(
                    crash_oai_append,
                    start_to_close_timeout=START_TO_CLOSE,
                    heartbeat_timeout=HEARTBEAT,
                )
            ],
            mcp_servers=[temporal_mcp_server("notes", activity_config=config)],
        )
        result = await Runner.run(crasher, prompt)
        return str(result.final_output)


@workflow.defn
class CrashPydanticWorkflow(PydanticAIWorkflow):
    """The same with pydantic-ai: ``append_line`` or the MCP server's ``append_note``."""

    __pydantic_ai_agents__ = [agent]

    @workflow.run
    async def run(self, prompt: str) -> str:
        result = await agent.run(prompt)
        return result.output


@workflow.defn
class CrashAdkWorkflow:
    """The same with Google ADK: ``crash_adk_append`` or the MCP server's ``append_note``.
    ADK sets no heartbeat timeout of its own: the tools get the matrix's."""

    @workflow.run
    async def run(self, prompt: str) -> str:
        timeouts = workflow.ActivityConfig(
            start_to_close_timeout=START_TO_CLOSE, heartbeat_timeout=HEARTBEAT
        )
        agent = AdkAgent(
            name="crash_adk",
            model=TemporalModel(ADK_MODEL, timeouts),
            instruction="Call the tool, then answer.",
            tools=[
                adk_activity_as_tool(
                    crash_adk_append,
                    start_to_close_timeout=START_TO_CLOSE,
                    heartbeat_timeout=HEARTBEAT,
                ),
                TemporalMcpToolSet(ADK_TOOLSET, config=timeouts),
            ],
        )
        runner = AdkRunner(agent=agent, app_name="crash", session_service=InMemorySessionService())
        session = await runner.session_service.create_session(app_name="crash", user_id="ops")
        answer = ""
        message = types.Content(role="user", parts=[types.Part(text=prompt)])
        async for event in runner.run_async(
            user_id="ops", session_id=session.id, new_message=message
        ):
            for part in (event.content.parts or []) if event.content else []:
                if part.text:
                    answer = part.text
        return answer


@workflow.defn
class CrashLangGraphWorkflow:
    """The same with LangGraph: the model node asks for ``crash_lg_append``, and the tool
    node runs it through a ``ToolNode`` under a key of its own (``tests.crash_graph``)."""

    @workflow.run
    async def run(self, cell: str) -> str:
        from temporalio.langgraph import graph

        app = graph(CRASH_GRAPH).compile()
        final = await app.ainvoke({"cell": cell, "results": []})
        return str(final["answer"])
