"""A Strands ``TemporalAgent`` with a scripted model and a file-appending tool, for tests.

Its own module so the workflow sandbox imports little. The model and the tool run in
activities on the host, where the counters below are the truth about what happened.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from datetime import timedelta
from pathlib import Path
from typing import Any

from strands.models import Model
from temporalio import activity, workflow
from temporalio.common import RetryPolicy
from temporalio.strands_agents import TemporalAgent, TemporalMCPClient
from temporalio.strands_agents.workflow import activity_as_tool

MODEL_NAME = "scripted"

#: Model calls and tool runs, by prompt (each test uses its own prompt).
MODEL_CALLS: dict[str, int] = {}
TOOL_RUNS: dict[str, int] = {}

RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=100), maximum_interval=timedelta(seconds=1)
)


def _prompt(messages: Any) -> str:
    for block in messages[0].get("content", []):
        if "text" in block:
            return str(block["text"])
    return "?"


def _tool_results(messages: Any) -> list[str]:
    return [
        part.get("text", "")
        for message in messages
        for block in message.get("content", [])
        if "toolResult" in block
        for part in block["toolResult"].get("content", [])
    ]


class ScriptedModel(Model):
    """Asks for ``append_line`` once, then answers with the tool's result: no API key."""

    def update_config(self, **model_config: Any) -> None:
        return None

    def get_config(self) -> Any:
        return {}

    def structured_output(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def stream(  # type: ignore[override]
        self, messages: Any, tool_specs: Any = None, system_prompt: Any = None, **kwargs: Any
    ) -> AsyncGenerator[Any, None]:
        prompt = _prompt(messages)
        MODEL_CALLS[prompt] = MODEL_CALLS.get(prompt, 0) + 1
        results = _tool_results(messages)
        yield {"messageStart": {"role": "assistant"}}
        if not results:
            name = "append_note" if prompt.startswith("mcp-") else "append_line"
            use = {"name": name, "toolUseId": f"use-{MODEL_CALLS[prompt]}"}
            yield {"contentBlockStart": {"start": {"toolUse": use}}}
            line: dict[str, str] = {"line": f"line for {prompt}"}
            if name == "append_note":
                line["path"] = TARGETS[prompt]
            yield {"contentBlockDelta": {"delta": {"toolUse": {"input": json.dumps(line)}}}}
            yield {"contentBlockStop": {}}
            yield {"messageStop": {"stopReason": "tool_use"}}
            return
        yield {"contentBlockDelta": {"delta": {"text": f"done: {results[-1]}"}}}
        yield {"contentBlockStop": {}}
        yield {"messageStop": {"stopReason": "end_turn"}}


@activity.defn
async def append_line(line: str) -> str:
    """Append a line to the file the prompt names (the effect the ledger protects).

    Args:
        line: The line to append.
    """
    prompt = line.removeprefix("line for ")
    TOOL_RUNS[prompt] = TOOL_RUNS.get(prompt, 0) + 1
    path = Path(TARGETS[prompt])
    with path.open("a") as handle:
        handle.write(line + "\n")
    if "explode" in line:
        # Acted, then failed: the effect happened but the attempt reports an error.
        raise RuntimeError("connection reset after the write")
    return f"appended (line {len(path.read_text().splitlines())})"


#: The file each prompt's tool appends to (set by the test on the host).
TARGETS: dict[str, str] = {}


@workflow.defn
class StrandsAgentWorkflow:
    @workflow.run
    async def run(self, prompt: str) -> str:
        agent = TemporalAgent(
            model=MODEL_NAME,
            start_to_close_timeout=timedelta(seconds=20),
            retry_policy=RETRY,
            tools=[
                activity_as_tool(
                    append_line, start_to_close_timeout=timedelta(seconds=20), retry_policy=RETRY
                )
            ],
            callback_handler=None,
        )
        result = await agent.invoke_async(prompt)
        return str(result).strip()


#: The MCP server's name in ``StrandsPlugin(mcp_clients=...)``.
MCP_SERVER = "notes"


@workflow.defn
class StrandsMcpWorkflow:
    @workflow.run
    async def run(self, prompt: str) -> str:
        agent = TemporalAgent(
            model=MODEL_NAME,
            start_to_close_timeout=timedelta(seconds=20),
            retry_policy=RETRY,
            tools=[
                TemporalMCPClient(
                    server=MCP_SERVER,
                    start_to_close_timeout=timedelta(seconds=30),
                    retry_policy=RETRY,
                )
            ],
            callback_handler=None,
        )
        result = await agent.invoke_async(prompt)
        return str(result).strip()
