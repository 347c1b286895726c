"""Ledgered model calls, tools and MCP calls for Strands agents on Temporal.

Users of ``temporalio.strands_agents`` (the package ``temporalio-strands-agents``, extra
``strands``) add one plugin and change no tool::

    from temporalio.strands_agents import StrandsPlugin
    from temporal_ledger.activities import LedgerPlugin
    from temporal_ledger.activities.strands import activity_rules

    rules = activity_rules(tools=[refund])
    client = await Client.connect(
        "localhost:7233",
        plugins=[
            StrandsPlugin(models={"claude": make_model}, mcp_clients={"files": make_mcp}),
            LedgerPlugin("sqlite:///ledger.db", ledger_activities=rules),
        ],
    )

Then every call goes through the ledger, keyed by workflow, first execution run and the
call's number in the run (see ``activities._generic``):

* Model calls (``invoke_model``, ``invoke_model_streaming``: ``TemporalAgent``'s model)
  are retry-safe: a worker crash, a retry or ``temporal workflow reset`` replays the
  model's recorded stream events instead of asking again. Google ADK's integration names
  its model activity ``invoke_model`` too; the fingerprint tells Strands' input (a
  ``model_name`` and ``messages``) apart and takes any other whole.
* ``tools``: the activities the agent calls through
  ``temporalio.strands_agents.workflow.activity_as_tool``. Not retry-safe: an attempt that
  acted and lost its reply (or whose worker died) is never run again; the agent's run
  waits in the workflow, parked like a ``run_tool`` step (search attribute
  ``LedgerOpenEffects``, update ``reconcile``), until an operator answers with the
  activity's own return value.
* MCP calls: the ``{server}-call-tool`` activities of every server
  (``StrandsPlugin(mcp_clients=...)`` with ``TemporalMCPClient(server=...)``); their
  ``{server}-list-tools`` listings are recorded too (they only read). The operator
  confirms an MCP effect with the result content, e.g. ``[{"text": "..."}]``. Strands
  returns a call that raised (the server died after the request went out) as an error
  result; the ledger takes it for a lost reply and parks. Give each ``MCPClient``
  :func:`ledger_transport` around its transport, and its calls carry the ledger key to
  the server in ``_meta``.

What is left out of the fingerprint: Strands' per-call ``toolUseId`` (an MCP call's
``tool_use_id``) and the model's ``invocation_state`` (per-invocation values the app puts
there, not the request). Strands sets no activity timeouts of its own: give the agent a
``start_to_close_timeout`` (and the tools theirs), as Temporal requires.

Put ``StrandsPlugin`` first: it installs its converter (temporalio's pydantic one with
its own failure converter, which carries Strands' interrupts across activities) only
when it finds Temporal's default, and ``LedgerPlugin`` keeps what it finds. The other
order still runs on the pydantic converter, without Strands' failure converter.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

from ..workflows._seam import PLACEHOLDER
from . import _rules

__all__ = ["activity_rules", "ledger_transport"]

#: The texts Strands' ``MCPClient`` gives an MCP call that raised, returned as its result.
_FAILED_CALLS = ("Tool execution failed: ", "Tool execution cancelled locally")

#: The fields of Strands' model input that are the request; ``invocation_state`` and the
#: streaming topic and interval are not.
_MODEL_FIELDS = (
    "model_name", "messages", "tool_specs", "system_prompt", "tool_choice", "system_prompt_content",
)  # fmt: skip


def _normalize_model(activity_type: str, args: list[Any]) -> dict[str, Any]:
    """Strands' model input without ``invocation_state`` (and the streaming options).

    Any other shape (Google ADK's ``invoke_model``, a future Strands) is fingerprinted
    whole: a spurious conflict refuses loudly, a lenient fingerprint replays silently.
    """
    if len(args) == 1 and isinstance(args[0], dict) and {"model_name", "messages"} <= set(args[0]):
        return {"model": {field: args[0].get(field) for field in _MODEL_FIELDS}}
    return {"args": args}


def _normalize_mcp_call(activity_type: str, args: list[Any]) -> dict[str, Any]:
    """An MCP call is its tool and arguments; ``tool_use_id`` is the model's per-call id."""
    if len(args) == 1 and isinstance(args[0], dict) and "tool_name" in args[0]:
        return {"tool": args[0]["tool_name"], "arguments": args[0].get("arguments")}
    return {"args": args}


def _failed_call(value: Any) -> str | None:
    """Strands' report of an MCP call that raised (the session broke, the server died,
    the call was cancelled), returned as the tool's result: the reason. The request may
    have reached the server and acted, so it is no answer to record; a tool's own error
    (the server's ``isError`` result) carries ``isError`` and is one."""
    if not isinstance(value, dict) or value.get("status") != "error" or "isError" in value:
        return None
    content = value.get("content")
    text = content[0].get("text") if isinstance(content, list) and len(content) == 1 else None
    if isinstance(text, str) and text.startswith(_FAILED_CALLS):
        return f"Strands returned the MCP call's failure as its result: {text}"
    return None


#: ``ModelActivity`` methods of the integration, by their activity type names.
_MODELS = _rules.models("invoke_model", "invoke_model_streaming", normalize=_normalize_model)


def ledger_transport(
    transport: Callable[[], AbstractAsyncContextManager[Any]],
) -> Callable[[], AbstractAsyncContextManager[Any]]:
    """An MCP transport whose tool calls carry the ledger key to the server.

    temporalio-strands-agents' ``{server}-call-tool`` activity calls the MCP session
    itself and sends no ``_meta`` of its own, so the key reaches the server through the
    transport the ``MCPClient`` is given::

        MCPClient(ledger_transport(lambda: stdio_client(params)))

    Each ``tools/call`` request sent while a ledgered call runs gets
    ``_meta["temporal-ledger/key"]`` (the key's wire form) and the ``traceparent`` of the
    worker's span of the call, which a server reads with
    :func:`temporal_ledger.activities.mcp.ledger_key`; every other message, and a call
    outside the ledger, goes out unchanged.

    Args:
        transport: What ``MCPClient`` would be given: a callable that opens the MCP SDK's
            transport (``stdio_client(...)``, ``streamablehttp_client(...)``), an async
            context manager of ``(read_stream, write_stream, ...)``.

    Returns:
        A callable of the same kind, for ``MCPClient(...)``.
    """
    from ._mcp_transport import keyed_transport

    return keyed_transport(transport)


@dataclasses.dataclass(frozen=True)
class _McpToolResult:
    """A Strands MCP call returns a ``ToolResult`` (``status``, ``toolUseId``,
    ``content``); the operator answers with its content blocks (or one string)."""

    def template(self, result_type: Any) -> Any:
        """The operator's template: one text block to fill in.

        Args:
            result_type: The activity's result type (not needed).

        Returns:
            ``[{"text": "<what the tool returned>"}]``.
        """
        return [{"text": PLACEHOLDER}]

    def result(self, output: Any) -> Any:
        """The activity's ``ToolResult`` for the operator's content.

        Args:
            output: Strands content blocks, or a string for one text block, or the whole
                ``{"toolUseId": ..., "content": [...]}`` with the call's ``tool_use_id``
                (the activity's input in the run's history), for a model that checks it.

        Returns:
            ``{"status": "success", "toolUseId": ..., "content": [...]}``, with an empty
            ``toolUseId`` unless the output gives one.

        Raises:
            ValueError: The output is not a list of content blocks or a string.
        """
        tool_use_id = ""
        if isinstance(output, dict) and "content" in output:
            tool_use_id, output = str(output.get("toolUseId", "")), output["content"]
        content = [{"text": output}] if isinstance(output, str) else output
        if not isinstance(content, list) or not content:
            raise ValueError(
                "an MCP tool's output is its result content: a list of content blocks such "
                'as [{"text": "..."}], or a string for one text block'
            )
        return {"status": "success", "toolUseId": tool_use_id, "content": content}

    def output_schema(self, result_type: Any, args: list[Any]) -> dict[str, Any] | None:
        """What an operator's output must fit: Strands content blocks (each with one of
        the fields of ``ToolResultContent``: ``text``, ``json``, ...), one string, or
        ``{"toolUseId": ..., "content": [...]}``.

        Args:
            result_type: The activity's result type (not needed: always a ``ToolResult``).
            args: The call's arguments (not needed).

        Returns:
            The JSON schema of those three forms.
        """
        return _content_schema()


@functools.cache
def _content_schema() -> dict[str, Any]:
    """Strands' content blocks, one string, or a whole ``ToolResult`` (see the MCP result
    shape's ``output_schema``): built once, since pydantic takes milliseconds to."""
    import importlib

    from pydantic import TypeAdapter

    # Imported by name: strands installs only beside mcp<2, outside the type check.
    tools = importlib.import_module("strands.types.tools")
    described = TypeAdapter(tools.ToolResultContent).json_schema()
    definitions = described.pop("$defs", {})
    # Every field of a block is optional to Strands (a TypedDict with total=False), but
    # a block with none of them reaches the agent as an empty result.
    block = {
        "anyOf": [
            {"type": "object", "properties": {name: field}, "required": [name]}
            for name, field in sorted(described.get("properties", {}).items())
        ]
    }
    blocks = {"type": "array", "items": block, "minItems": 1}
    whole = {
        "type": "object",
        "properties": {"toolUseId": {"type": "string"}, "content": blocks},
        "required": ["content"],
    }
    return {"anyOf": [{"type": "string"}, blocks, whole], "$defs": definitions}


#: Every MCP server's calls (``StrandsPlugin(mcp_clients=...)``): the server is the ``*``.
_MCP = _rules.mcp(
    listing=["*-list-tools"],
    calling=["*-call-tool"],
    output=_McpToolResult(),
    tool_name=lambda args: args[0]["tool_name"],
    normalize=_normalize_mcp_call,
    lost_reply=_failed_call,
)

if TYPE_CHECKING:
    from ._rules import activity_rules
else:
    activity_rules = _rules.bind(_MODELS, _MCP)
