"""Ledgered model calls, tools and MCP calls for Google ADK agents on Temporal.

Users of ``temporalio.google_adk.GoogleAdkPlugin`` (the package ``temporalio-google-adk``)
add one plugin and change no agent::

    from temporalio.google_adk import GoogleAdkPlugin, TemporalMcpToolSetProvider
    from temporal_ledger.activities import LedgerPlugin
    from temporal_ledger.activities.google_adk import activity_rules

    rules = activity_rules(tools=[send_email])
    client = await Client.connect(
        "localhost:7233",
        plugins=[
            GoogleAdkPlugin(toolset_providers=[TemporalMcpToolSetProvider("files", factory)]),
            LedgerPlugin("sqlite:///ledger.db", ledger_activities=rules),
        ],
    )

(``factory(argument)`` returns the toolset's ``McpToolset``: the provider calls it with
``TemporalMcpToolSet``'s ``factory_argument``, ``None`` by default, so it takes one.)

Then every call of those activities goes through the ledger, keyed by workflow, first
execution run and the call's number in the run (see ``activities._generic``):

* Model calls (``TemporalModel``'s ``invoke_model`` and ``invoke_model_streaming``
  activities) are retry-safe: a worker crash, a retry or ``temporal workflow reset``
  replays the model's recorded answer instead of asking again. Strands' model activity
  has the same name; these rules take only ADK's (its argument is an ``LlmRequest``).
* ``tools``: activities the agent calls through ``activity_as_tool``. Not retry-safe:
  an attempt that acted and lost its reply (or whose worker died) is never run again;
  the agent's run waits in the workflow, parked like a ``run_tool`` step (search
  attribute ``LedgerOpenEffects``, query ``open_effects``, update ``reconcile``), until
  an operator answers with the tool's return value; the agent then goes on with it.
* MCP calls: the ``call-tool`` activities of every MCP toolset
  (``TemporalMcpToolSetProvider(name, ...)`` with ``TemporalMcpToolSet(name)``, and the
  stateful ``TemporalStatefulMcpToolSetProvider`` pair). The operator confirms an effect
  with the MCP tool's result, e.g. ``{"content": [{"type": "text", "text": "..."}]}``.
  Their ``list-tools`` activities are recorded too, as retry-safe reads. Each call
  carries its ledger key to the MCP server as OpenTelemetry baggage: ADK's MCP tool
  (``McpTool._run_async_impl``) takes no request ``_meta`` of its caller, and fills it
  with what the global OpenTelemetry propagator injects from the current context
  (``traceparent``, of the ledger's span of the call, and, with the default propagators,
  ``baggage``). While the call runs the ledger puts ``temporal-ledger/key`` (the key's
  wire form) in the context's baggage, so the server reads
  ``_meta["baggage"] == "temporal-ledger%2Fkey=<wire key>"``; a process whose
  ``OTEL_PROPAGATORS`` leaves out ``baggage`` sends no key.

What is identity and what is not: ADK gives every function call an id
(``tool_context.function_call_id``) from the workflow's random source, and a reset run
draws new ones. The ids are left out of every fingerprint (the model request's function
calls and responses, the tool's ``ToolContextSnapshot``, the MCP call's tool context),
so a reset replays instead of being refused as a conflict; the key already pins the call.

Three things the app must know:

* ADK turns a failed MCP call into a result by default (``{"error": "MCP tool execution
  failed: ..."}``), the same for a server that refused as for a connection lost after
  the server acted. The ledger reads those two results as what they are, a call whose
  outcome is unknown, and parks the call; ``ADK_DISABLE_MCP_GRACEFUL_ERROR_HANDLING=1``
  on the worker makes ADK raise instead, with the same outcome.
* A stateful MCP toolset runs its tool calls on a worker that ADK's ``-server-session``
  activity starts from the client: only plugins on ``Client.connect(plugins=[...])``
  reach it. Put ``LedgerPlugin`` on the client, not on ``Worker(plugins=...)``, or those
  calls run unledgered. The ``-server-session`` activity itself is not ledgered: it holds
  the connection and acts on nothing.
* ADK schedules its activities without a heartbeat timeout; the ledgered ones get the
  ledger's (``LedgerOptions.heartbeat_timeout``, 5 seconds by default) and heartbeat
  while they run, so a worker that dies mid-call is noticed within it, not when the
  call's ``start_to_close_timeout`` (ADK's default: one minute) runs out; the next
  attempt then finds the ledger's record and parks (a tool) or asks again (a model
  call). A ``heartbeat_timeout`` given in ``activity_as_tool(...)``,
  ``TemporalMcpToolSet(config=...)`` or ``TemporalModel(activity_config=...)`` is kept.

Plugin order does not matter on a client: ADK installs its pydantic converter only when
the default is in place, and ``LedgerPlugin`` leaves the choice to a later plugin that
brings a converter of its own and keeps a pydantic one it finds. On a ``Replayer`` put
``GoogleAdkPlugin`` first.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

try:
    from google.adk.models.llm_request import LlmRequest
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        "temporal_ledger.activities.google_adk needs Google ADK and its Temporal "
        "integration: pip install 'temporal-ledger[google-adk]'"
    ) from exc

from ..workflows._seam import PLACEHOLDER
from . import _rules
from ._mcp import content_schema, key_in_baggage

__all__ = ["activity_rules"]

#: What ADK returns for an MCP call that failed, with its graceful error handling on
#: (google.adk.tools.mcp_tool.McpTool.run_async): a refusal and a lost reply alike.
_GRACEFUL_ERRORS = ("MCP tool execution failed: ", "Unexpected error during MCP tool execution: ")
#: The parameter ``activity_as_tool`` fills with a ``ToolContextSnapshot``.
_TOOL_CONTEXT = "tool_context"
#: The fields of a ``ToolContextSnapshot``, as JSON.
_SNAPSHOT_FIELDS = frozenset({"state", "function_call_id"})


# -- model calls ------------------------------------------------------------------------


def _is_adk_model_call(args: Sequence[Any]) -> bool:
    """ADK's model activities take an ``LlmRequest`` (``invoke_model``) or an input that
    holds one (``invoke_model_streaming``); Strands' ``invoke_model`` takes neither."""
    if len(args) != 1:
        return False
    arg = args[0]
    return isinstance(arg, LlmRequest) or isinstance(getattr(arg, "llm_request", None), LlmRequest)


def _normalize_model(activity_type: str, args: list[Any]) -> dict[str, Any]:
    """The fingerprinted identity of a model call: the request without the ids ADK gives
    function calls (fresh in a reset run). Arguments of another shape are fingerprinted
    whole: a spurious conflict refuses loudly, a lenient fingerprint replays silently."""
    return {"args": _rules.without(args, _call_ids)}


def _call_ids(name: str | None, value: dict[str, Any]) -> tuple[str, ...]:
    """The ``id`` of every ``function_call`` and ``function_response`` part (and of ADK's
    streamed ``partial_args``) is left out."""
    return ("id",) if name in ("function_call", "function_response") else ()


# -- activity_as_tool tools -------------------------------------------------------------


def _tool_normalizer(fn: Callable[..., Any] | None) -> Callable[[str, list[Any]], dict[str, Any]]:
    """The fingerprint of an ``activity_as_tool`` call: its arguments, with the function
    call id left out of the ``ToolContextSnapshot`` (the snapshot's session state stays:
    the tool reads it). For a function, the snapshot is the argument in the position of
    its ``tool_context`` parameter; for a name, an argument of the snapshot's shape."""
    names: list[str] = []
    with contextlib.suppress(TypeError, ValueError):
        names = list(inspect.signature(fn).parameters) if fn is not None else []

    def is_snapshot(i: int, arg: Any) -> bool:
        if fn is not None:
            return i < len(names) and names[i] == _TOOL_CONTEXT and isinstance(arg, dict)
        return isinstance(arg, dict) and "function_call_id" in arg and set(arg) <= _SNAPSHOT_FIELDS

    def normalize(activity_type: str, args: list[Any]) -> dict[str, Any]:
        return {
            "args": [
                {k: v for k, v in arg.items() if k != "function_call_id"}
                if is_snapshot(i, arg)
                else arg
                for i, arg in enumerate(args)
            ]
        }

    return normalize


# -- MCP toolsets -----------------------------------------------------------------------


def _normalize_mcp_call(activity_type: str, args: list[Any]) -> dict[str, Any]:
    """The tool, its arguments, the toolset's factory argument and the confirmation the
    call carries; not the function call id, nor the event actions ADK sends along."""
    if len(args) == 1 and isinstance(args[0], dict) and {"name", "arguments"} <= set(args[0]):
        call = args[0]
        context = call.get("tool_context")
        confirmation = context.get("tool_confirmation") if isinstance(context, dict) else None
        return {
            "tool": call["name"],
            "arguments": call["arguments"],
            "factory_argument": call.get("factory_argument"),
            "tool_confirmation": confirmation,
        }
    return {"args": args}


def _graceful_error(value: Any) -> str | None:
    """ADK's report of a failed MCP call, returned as the tool's result: the reason."""
    result = value.get("result") if isinstance(value, dict) else None
    error = result.get("error") if isinstance(result, dict) and set(result) == {"error"} else None
    if isinstance(error, str) and error.startswith(_GRACEFUL_ERRORS):
        return f"ADK returned the MCP call's failure as its result: {error}"
    return None


@dataclasses.dataclass(frozen=True)
class _McpToolResult:
    """An MCP call's result as ADK's MCP tool returns it (the server's ``CallToolResult``
    as a dict); the activity wraps it with the call's tool context, which an operator's
    answer leaves empty (the tool's event actions are not known)."""

    def template(self, result_type: Any) -> Any:
        """The operator's template: one text block to fill in.

        Args:
            result_type: The activity's result type (not needed: always an MCP result).

        Returns:
            ``{"content": [{"type": "text", "text": "<what the tool returned>"}]}``.
        """
        return {"content": [{"type": "text", "text": PLACEHOLDER}]}

    def result(self, output: Any) -> Any:
        """The activity's result (as JSON) for the operator's answer.

        Args:
            output: The MCP tool's result (a dict with ``content``), or a string for one
                text block.

        Returns:
            ``{"result": ..., "tool_context": {...}}``, the integration's record of it.

        Raises:
            ValueError: The output is not an MCP tool's result.
        """
        if isinstance(output, str):
            output = {"content": [{"type": "text", "text": output}]}
        if not isinstance(output, dict) or not isinstance(output.get("content"), list):
            raise ValueError(
                "an MCP tool's output is its result: "
                '{"content": [{"type": "text", "text": "..."}]}, or a string for one text '
                "block"
            )
        context: dict[str, Any] = {
            "tool_confirmation": None,
            "function_call_id": None,
            "event_actions": {},
        }
        return {"result": output, "tool_context": context}

    def output_schema(self, result_type: Any, args: list[Any]) -> dict[str, Any] | None:
        """What an operator's output must fit: an MCP tool's result, or one string.

        Args:
            result_type: The activity's result type (not needed: always an MCP result).
            args: The call's arguments (not needed).

        Returns:
            The JSON schema of ``{"content": [...]}`` (MCP content blocks) or a string.
        """
        content = content_schema()
        [text, blocks] = content["anyOf"]
        result = {"type": "object", "properties": {"content": blocks}, "required": ["content"]}
        return {"anyOf": [text, result], "$defs": content["$defs"]}


#: ``TemporalModel``'s activities (Strands' model activity has the same name: ADK's
#: argument is an ``LlmRequest``).
_MODELS = _rules.models(
    "invoke_model", "invoke_model_streaming", normalize=_normalize_model, accepts=_is_adk_model_call
)
#: Every toolset's MCP activities: ``TemporalMcpToolSetProvider(name, ...)``'s, and the
#: nested worker's of a ``TemporalStatefulMcpToolSetProvider(name, ...)`` (first, so that
#: its server is ``name``). Not ``{name}-stateful-server-session``: it holds the
#: connection, and a replay of it would start no worker.
_MCP = _rules.mcp(
    listing=["*-stateful-list-tools", "*-list-tools"],
    calling=["*-stateful-call-tool", "*-call-tool"],
    tool_name=lambda args: args[0]["name"],
    normalize=_normalize_mcp_call,
    output=_McpToolResult(),
    lost_reply=_graceful_error,
    scope=key_in_baggage,
    # ADK's argument (stateless or stateful, with the call's tool context), not Strands':
    # both name the activity {server}-call-tool.
    accepts=lambda args: len(args) == 1 and hasattr(args[0], "tool_context"),
)

if TYPE_CHECKING:
    from ._rules import activity_rules
else:
    activity_rules = _rules.bind(_MODELS, _MCP, _tool_normalizer)
