"""An OpenAI Agents app with a ``CustomTool`` and a tool that fails on its own terms.

The scripted model's first answer holds an assistant message beside its custom tool call.
The SDK hands that message back in the next model call's input, where the activity's
decoding (``ResponseOutputMessageParam.content`` is an ``Iterable``) makes its content a
pydantic ``ValidatorIterator``: a value that can be read once. The model writes down what
it received, so a test sees whether the content reached it whole.

``forecast`` raises ``ApplicationError(..., non_retryable=True)``: the tool's ordinary
"no such city", which the integration reports as the activity's failure.
"""

from __future__ import annotations

import json
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import activity, workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from agents import (
        Agent,
        CustomTool,
        Model,
        ModelProvider,
        ModelResponse,
        Runner,
        Usage,
    )
    from agents.tool_context import ToolContext
    from openai.types.responses import (
        ResponseCustomToolCall,
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )
    from temporalio.openai_agents.workflow import activity_as_tool

#: The assistant's words before its custom tool call: the model must get them back whole.
PREAMBLE = "Let me shout that for you, word by word."


def _field(item: Any, name: str) -> Any:
    return item.get(name) if isinstance(item, dict) else getattr(item, name, None)


def _texts(content: Any) -> list[str]:
    """The texts of a message's content: read once, as a real model client reads it."""
    if isinstance(content, str):
        return [content]
    return [str(_field(part, "text")) for part in content]


class CustomToolModel(Model):
    """Turn 1: an assistant message and a call of the ``shout`` custom tool (or of the
    function tool the prompt names). Turn 2: writes what it was given to ``log`` (one JSON
    line per call) and answers with how many tool outputs it holds."""

    def __init__(self, log: Path) -> None:
        self.log = log

    async def get_response(
        self,
        system_instructions: str | None,
        input: Any,
        model_settings: Any,
        tools: Any,
        output_schema: Any,
        handoffs: Any,
        tracing: Any,
        **kwargs: Any,
    ) -> ModelResponse:
        items = [{"content": input, "role": "user"}] if isinstance(input, str) else list(input)
        seen = [
            {"type": _field(i, "type"), "role": _field(i, "role"), "texts": _texts(content)}
            for i in items
            if (content := _field(i, "content")) is not None
        ]
        # A custom tool's output arrives as a lazy iterator too (the ``str | Iterable``
        # field is decoded as the iterable), whose items do not validate: the integration's
        # own behaviour, with or without the ledger. Only a plain string is read here.
        outputs = [
            output if isinstance(output := _field(i, "output"), str) else type(output).__name__
            for i in items
            if _field(i, "type") in ("custom_tool_call_output", "function_call_output")
        ]
        with self.log.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps({"messages": seen, "outputs": outputs}) + "\n")
        prompt = str(_field(items[0], "content"))
        if outputs:
            answer = ResponseOutputText(
                text=f"done after {len(outputs)} call", annotations=[], type="output_text"
            )
            final = ResponseOutputMessage(
                id="msg_final",
                role="assistant",
                status="completed",
                type="message",
                content=[answer],
            )
            return ModelResponse(output=[final], usage=Usage(), response_id=None)
        preamble = ResponseOutputMessage(
            id="msg_0",
            role="assistant",
            status="completed",
            type="message",
            content=[ResponseOutputText(text=PREAMBLE, annotations=[], type="output_text")],
        )
        call: Any
        if prompt.startswith("forecast "):
            call = ResponseFunctionToolCall(
                arguments=json.dumps({"city": prompt.removeprefix("forecast ")}),
                call_id="call_0",
                name="forecast",
                type="function_call",
                id="fc_0",
                status="completed",
            )
        else:
            call = ResponseCustomToolCall(
                call_id="call_0", input=prompt, name="shout", type="custom_tool_call", id="ct_0"
            )
        return ModelResponse(output=[preamble, call], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the scripted model does not stream")


class CustomToolProvider(ModelProvider):
    def __init__(self, log: Path) -> None:
        self.model = CustomToolModel(log)

    def get_model(self, model_name: str | None) -> Model:
        return self.model


async def shout(context: ToolContext[Any], text: str) -> str:
    """The custom tool: runs in the workflow, as the SDK runs custom tools."""
    return text.upper()


@activity.defn
async def forecast(city: str) -> str:
    """A weather tool that knows one city; any other is its ordinary, final failure."""
    with (Path(os.environ["SUPPORT_DIR"]) / "forecasts.txt").open("a") as handle:
        handle.write(city + "\n")
    if city != "Lisbon":
        raise ApplicationError(f"No weather for {city}", non_retryable=True)
    return "sunny"


@workflow.defn
class CustomToolWorkflow:
    @workflow.run
    async def run(self, prompt: str) -> str:
        agent = Agent(
            name="Shouter",
            instructions="Shout, then answer.",
            tools=[
                CustomTool(name="shout", description="Upper-cases text.", on_invoke_tool=shout),
                activity_as_tool(forecast, start_to_close_timeout=timedelta(seconds=20)),
            ],
        )
        result = await Runner.run(agent, prompt)
        return str(result.final_output)
