"""A scripted model for the OpenAI Agents SDK: no network, no API key.

The prompt is the script: one line per tool call, ``tool_name {"json": "arguments"}``.
The model asks for those calls in order, one per turn, and then answers with what the
tools returned. It decides from the conversation it is given (how many tool outputs it
already holds), never from its own state, so an activity retry or a ``temporal workflow
reset`` gets the same answer for the same turn, as a recorded real model's would be.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agents import Model, ModelProvider, ModelResponse, Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)


def script_of(prompt: str) -> list[tuple[str, dict[str, Any]]]:
    """``[(tool, arguments), ...]`` from the prompt's lines."""
    calls = []
    for line in prompt.splitlines():
        name, _, arguments = line.strip().partition(" ")
        if name:
            calls.append((name, json.loads(arguments or "{}")))
    return calls


def _field(item: Any, name: str) -> Any:
    return item.get(name) if isinstance(item, dict) else getattr(item, name, None)


class ScriptedModel(Model):
    """Asks for the prompt's tool calls in order, then answers ``done: <outputs>``.

    ``log``: a file that gets one line per model call (the prompt's first line), so a
    test or a curious reader can count how often the model was asked.
    """

    def __init__(self, log: Path | None = None) -> None:
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
        prompt = str(_field(items[0], "content"))
        if self.log is not None:
            with self.log.open("a", encoding="utf-8") as handle:
                handle.write(prompt.splitlines()[0] + "\n")
        outputs = [
            _field(i, "output") for i in items if _field(i, "type") == "function_call_output"
        ]
        script = script_of(prompt)
        turn = len(outputs)
        if turn < len(script):
            name, arguments = script[turn]
            offered = [tool.name for tool in tools]
            if name not in offered:
                raise ValueError(f"the script asks for {name!r}; the agent offers {offered}")
            item: Any = ResponseFunctionToolCall(
                arguments=json.dumps(arguments),
                call_id=f"call_{turn}",
                name=name,
                type="function_call",
                id=f"fc_{turn}",
                status="completed",
            )
        else:
            answer = "done: " + " | ".join(_text(output) for output in outputs)
            item = ResponseOutputMessage(
                id="msg_final",
                role="assistant",
                status="completed",
                type="message",
                content=[ResponseOutputText(text=answer, annotations=[], type="output_text")],
            )
        return ModelResponse(output=[item], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the scripted model does not stream")


def _text(output: Any) -> str:
    """A tool output as the model sees it: a string, or an MCP tool's content blocks."""
    if isinstance(output, list):
        return " ".join(str(_field(block, "text")) for block in output)
    return str(output)


class ScriptedProvider(ModelProvider):
    """Every agent gets the scripted model, whatever model name it asks for."""

    def __init__(self, log: Path | None = None) -> None:
        self.model = ScriptedModel(log)

    def get_model(self, model_name: str | None) -> Model:
        return self.model
