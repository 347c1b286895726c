"""Recorded model calls: a chat-completions request goes through the ledger like a tool call.

The request is the manifest of what is sent (model, settings, rendered messages, tool
schemas), so its fingerprint binds the prompt, the model and the rendered context:
an identical re-request replays the recorded response, a different one under the same
key is refused with a durable ``action.replay_refused``.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

import httpx
from pydantic import BaseModel, ConfigDict, Field
from temporal_ledger.activities import Tool, tool
from temporal_ledger.activities.http import request_json

MODEL_CAPABILITY = "model.chat"
MODEL_ACTIVITY = "agent.model"


class ToolCallRequest(BaseModel):
    """A tool call the model asked for. Its ``id`` changes on every model turn."""

    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class ChatMessage(BaseModel):
    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = None
    tool_calls: list[ToolCallRequest] = Field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None


class ToolSchema(BaseModel):
    name: str
    description: str = ""
    parameters: dict[str, Any]


class ModelRequest(BaseModel):
    """The manifest of one model call: exactly what is rendered and sent."""

    model_config = ConfigDict(extra="forbid")

    model: str
    messages: list[ChatMessage]
    tools: list[ToolSchema] = Field(default_factory=list)
    settings: dict[str, Any] = Field(default_factory=dict)


class SentManifest(BaseModel):
    """What the client actually sent, recorded with the response."""

    provider: str
    model: str
    body_sha256: str


class ModelResponse(BaseModel):
    message: ChatMessage
    finish_reason: str | None = None
    usage: dict[str, Any] = Field(default_factory=dict)
    sent: SentManifest


class ModelClient(Protocol):
    async def complete(self, request: ModelRequest) -> ModelResponse: ...


#: The model call as the workflow side sees it: a ledgered activity named ``agent.model``.
#: An unknown outcome may be retried under the same key: a model call changes nothing in
#: the world, and an answer nobody received was never used.
MODEL_CALL: Tool[ModelRequest, ModelResponse] = Tool(
    name=MODEL_ACTIVITY,
    capability=MODEL_CAPABILITY,
    retry_safe=True,
    arg_type=ModelRequest,
    output_type=ModelResponse,
)


def model_tool(client: ModelClient) -> Tool[ModelRequest, ModelResponse]:
    """The ``agent.model`` activity bound to a model client; register it on the worker."""

    @tool(capability=MODEL_CALL.capability, retry_safe=MODEL_CALL.retry_safe, name=MODEL_CALL.name)
    async def call_model(request: ModelRequest) -> ModelResponse:
        return await client.complete(request)

    return call_model


def _body(request: ModelRequest) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": request.model,
        "messages": [_render(m) for m in request.messages],
        **request.settings,
    }
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                },
            }
            for t in request.tools
        ]
    return body


def _render(message: ChatMessage) -> dict[str, Any]:
    rendered: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        rendered["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
            }
            for c in message.tool_calls
        ]
    if message.tool_call_id:
        rendered["tool_call_id"] = message.tool_call_id
    if message.name and message.role == "tool":
        rendered["name"] = message.name
    return rendered


def _digest(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


class OpenAIChatClient:
    """An OpenAI-compatible ``/chat/completions`` client over HTTP (httpx).

    Sent with :func:`activities.http.request_json`: the idempotency key goes out as
    ``Idempotency-Key``, refused connections, 429 and 4xx rejections are no-effect
    failures, and timeouts and 5xx leave the outcome unknown, which the ledger lets a
    retry-safe model call retry under the same key.
    """

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str | None = None,
        timeout: float = 60.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout = timeout
        self._transport = transport

    async def complete(self, request: ModelRequest) -> ModelResponse:
        body = _body(request)
        url = f"{self.base_url}/chat/completions"
        async with httpx.AsyncClient(transport=self._transport) as http:
            reply = await request_json(
                "POST", url, json=body, headers=self._headers, timeout=self._timeout, client=http
            )
        if not isinstance(reply.body, dict) or not reply.body.get("choices"):
            # The model may have answered (and billed): an unknown effect, like any
            # exception after a request went out.
            raise ValueError(f"POST {url} answered {reply.status}: not a chat completion")
        choice = reply.body["choices"][0]
        message = choice["message"]
        calls = [
            ToolCallRequest(
                id=c["id"],
                name=c["function"]["name"],
                arguments=json.loads(c["function"].get("arguments") or "{}"),
            )
            for c in message.get("tool_calls") or []
        ]
        return ModelResponse(
            message=ChatMessage(role="assistant", content=message.get("content"), tool_calls=calls),
            finish_reason=choice.get("finish_reason"),
            usage=reply.body.get("usage") or {},
            sent=SentManifest(provider=url, model=request.model, body_sha256=_digest(body)),
        )


class ScriptedTurn(BaseModel):
    """One scripted model answer: tool calls to make, or the final content."""

    content: str | None = None
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)


class ScriptedModel:
    """An offline model: answer N is the script's turn N, N counted from the conversation.

    Deterministic for a given conversation, like a model at temperature 0 would be,
    but with fresh tool-call ids on every call, like a real model. ``calls`` counts
    the calls that reached it.
    """

    def __init__(self, turns: Sequence[ScriptedTurn | dict[str, Any]]) -> None:
        self.turns = [ScriptedTurn.model_validate(t) for t in turns]
        self.calls = 0

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedModel:
        return cls(json.loads(Path(path).read_text(encoding="utf-8")))

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        position = sum(m.role == "assistant" for m in request.messages)
        turn = self.turns[min(position, len(self.turns) - 1)]
        message = ChatMessage(
            role="assistant",
            content=turn.content,
            tool_calls=[
                ToolCallRequest(
                    id=f"call_{uuid.uuid4().hex[:10]}",
                    name=c["name"],
                    arguments=c.get("arguments", {}),
                )
                for c in turn.tool_calls
            ],
        )
        return ModelResponse(
            message=message,
            finish_reason="tool_calls" if turn.tool_calls else "stop",
            sent=SentManifest(
                provider="scripted", model=request.model, body_sha256=_digest(_body(request))
            ),
        )
