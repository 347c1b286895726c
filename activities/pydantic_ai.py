"""Ledgered model requests and tool calls for pydantic-ai's Temporal integration.

Users of :class:`pydantic_ai.durable_exec.temporal.TemporalAgent` (or of an ``Agent``
with the ``TemporalDurability`` capability) add one plugin, and change no tool::

    from pydantic_ai.durable_exec.temporal import PydanticAIPlugin
    from temporal_ledger.activities import LedgerPlugin
    from temporal_ledger.activities.pydantic_ai import activity_rules

    client = await Client.connect(
        "localhost:7233",
        plugins=[
            PydanticAIPlugin(),
            LedgerPlugin("sqlite:///ledger.db", ledger_activities=activity_rules(agent)),
        ],
    )

Every model request and every tool call of those agents then goes through the ledger,
keyed by workflow, first execution run and activity id (see ``activities._generic``):
a worker crash, an activity retry or ``temporal workflow reset`` replays the recorded
model response and tool result instead of asking the model again or acting again.

* Model requests are retry-safe: they change nothing in the world, so an attempt whose
  outcome is unknown (the worker died mid-request) may ask again.
* Tool calls are not (``tools_retry_safe=False``): a tool that started and never
  reported, or failed after it may have acted, is never run a second time. The agent's
  run waits instead, parked in the workflow like a ``run_tool`` step (search attribute
  ``LedgerOpenEffects``, query ``open_effects``, update ``reconcile``), until an
  operator answers with the tool's own return value; the agent then goes on with it.
  A capability the policy gates waits for update ``approve`` the same way.
* ``get_tools``, argument validation, event-stream handlers and the like are not
  ledgered: they have no effect to protect, and replaying a stale tool list would
  hide a deployment's changes.

The policy's performer is the workflow type and the capability is
``activity.agent.<name>.model_request`` or ``activity.agent.<name>.<toolset
kind>.<toolset id>.call_tool``, e.g. ``"SupportWorkflow" = ["activity.agent.support.*"]``.

Plugin order does not matter: both plugins install a pydantic payload converter, and
this one keeps pydantic-ai's (a subclass of temporalio's pydantic converter) when it
finds it, so each plugin adds its sandbox pass-through modules and nothing is lost.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from ..workflows._seam import PLACEHOLDER
from . import _rules
from ._failures import no_effect_errors_of
from ._mcp import install_hooks
from ._rules import LedgeredActivity

__all__ = ["activity_rules"]


def activity_rules(
    *agents: Any,
    tools_retry_safe: bool = False,
    no_effect_errors: Iterable[type[BaseException]] = (),
) -> list[LedgeredActivity]:
    """The ledgered activities of every pydantic-ai agent, by pydantic-ai's activity type
    names: model requests (retry-safe) and tool calls, for
    ``LedgerPlugin(ledger_activities=...)``.

    Put the plugin on ``Client.connect(plugins=[...])`` (workers inherit it) next to
    pydantic-ai's ``PydanticAIPlugin``; on a worker that runs only workflows it is still
    needed, because it stamps each scheduled activity with the run identity the key is
    built from.

    pydantic-ai names them ``agent__<name>__model_request``,
    ``agent__<name>__model_request_stream`` and
    ``agent__<name>__<toolset kind>__<toolset id>__call_tool`` (its
    ``TemporalOperationNamer``, documented as persisted, never-changing names): every
    agent's are covered, named here or not.

    An agent given as an object (not by name) also gets the ledger key sent to its MCP
    servers: its ``MCPToolset`` s get a ``process_tool_call`` hook (around the one they
    have) that adds ``temporal-ledger/key`` and ``traceparent`` to each call's ``_meta``.

    Args:
        *agents: ``TemporalAgent`` s or durable ``Agent`` s whose MCP toolsets get the
            key, or their names (checked: an agent needs a name to be ledgered).
        tools_retry_safe: The agents' tools deduplicate by the key: an unknown effect
            is tried again instead of parking.
        no_effect_errors: Exception types that the agents' tools raise only before they act
            (e.g. ``(NonRetryableApplicationError,)`` for ``raise ApplicationError(...,
            non_retryable=True)``): recorded as no effect and failing the call as the
            integration reports a tool's failure, instead of parking it as an unknown
            effect (what every other exception does).

    Returns:
        The rules, for ``LedgerPlugin(ledger_activities=...)``.

    Raises:
        TypeError: An agent without a name, or ``no_effect_errors`` that are not
            exception classes.
    """
    for agent in agents:
        name = agent if isinstance(agent, str) else getattr(agent, "name", None)
        if not isinstance(name, str) or not name:
            raise TypeError(
                f"an agent needs a name to be ledgered (its activity types use it): {agent!r}"
            )
        install_hooks(agent)
    return [
        *_rules.models(
            "agent__*__model_request", "agent__*__model_request_stream", normalize=_normalize
        ),
        _rules.Rule(
            "agent__*__call_tool",
            retry_safe=tools_retry_safe,
            normalize=_normalize,
            output=ToolReturn(),
            tool_name=lambda args: args[0]["name"],
            hints=_tool_annotations,
            no_effect_errors=no_effect_errors_of(no_effect_errors),
        ),
    ]


def _tool_annotations(args: list[Any]) -> Any:
    """An MCP tool's annotations, which pydantic-ai sends along in the tool definition
    (an MCP tool without annotations has the MCP defaults: it may destroy)."""
    metadata = args[0]["tool_def"]["metadata"]
    return (metadata["annotations"] or {}) if "annotations" in metadata else None


@dataclasses.dataclass(frozen=True)
class ToolReturn:
    """pydantic-ai records a tool's return value as ``{"kind": "tool_return", "result": ...}``
    (its ``CallToolResult``); an operator answers with the return value itself."""

    def template(self, result_type: Any) -> Any:
        return PLACEHOLDER

    def result(self, output: Any) -> Any:
        if isinstance(output, dict) and output.get("kind") == "tool-return":
            # pydantic-ai's own wrapping of a dict that looks like its ToolReturn.
            return {"kind": "tool_content_result", "result": output}
        return {"kind": "tool_return", "result": output}

    def output_schema(self, result_type: Any, args: list[Any]) -> dict[str, Any] | None:
        # A function tool's ``ToolDefinition.return_schema`` is its return annotation's
        # schema ({} without one). An MCP tool's is the server's ``outputSchema``, while
        # pydantic-ai returns the call's mapped content: no schema of its value.
        tool_def = args[0]["tool_def"]
        if tool_def.get("metadata") and "annotations" in tool_def["metadata"]:
            return None
        schema = tool_def.get("return_schema")
        return schema if isinstance(schema, dict) and schema else None


#: Fields pydantic-ai fills from the wall clock or a fresh id on every run: they differ
#: between the original run and a reset run of the same step, so they are not identity.
_VOLATILE_MESSAGE_FIELDS = frozenset({"timestamp", "run_id", "conversation_id"})
_VOLATILE_PART_FIELDS = frozenset({"timestamp"})
#: What of the serialized run context a tool call depends on; the rest is per-run
#: (run id, conversation id, deadline from the workflow clock, capability ids made
#: from object ids) or telemetry.
_TOOL_CONTEXT_FIELDS = ("tool_call_id", "tool_name", "retry", "tool_call_approved")
#: What of a model request's parameters, beside its messages, is the request.
_MODEL_FIELDS = ("model_settings", "model_request_parameters", "model_id")


def _normalize(activity_type: str, args: list[Any]) -> dict[str, Any]:
    """The fingerprinted identity of a model request or tool call.

    The key already pins the step (workflow, first run, activity id); the fingerprint
    must still catch a *different* request at that step (changed code, prompt or tool
    arguments after a reset), but not the per-run noise listed above. Arguments of an
    unexpected shape (a future pydantic-ai) are fingerprinted whole: a spurious conflict
    refuses loudly, a too-lenient fingerprint would replay silently.
    """
    if len(args) in (1, 2) and isinstance(args[0], dict):
        params, deps = args[0], (args[1] if len(args) == 2 else None)
        if activity_type.endswith("__call_tool") and {"name", "tool_args"} <= set(params):
            context = params.get("serialized_run_context") or {}
            return {
                "tool": {k: v for k, v in params.items() if k != "serialized_run_context"},
                "run_context": {k: context.get(k) for k in _TOOL_CONTEXT_FIELDS},
                "deps": deps,
            }
        if "messages" in params and isinstance(params["messages"], list):
            messages = [_strip_message(m) for m in params["messages"]]
            request = {field: params.get(field) for field in _MODEL_FIELDS}
            return {"messages": messages, **request, "deps": deps}
    return {"args": args}


def _strip_message(message: Any) -> Any:
    if not isinstance(message, dict):
        return message
    stripped = {k: v for k, v in message.items() if k not in _VOLATILE_MESSAGE_FIELDS}
    if isinstance(stripped.get("parts"), list):
        stripped["parts"] = [
            {k: v for k, v in part.items() if k not in _VOLATILE_PART_FIELDS}
            if isinstance(part, dict)
            else part
            for part in stripped["parts"]
        ]
    return stripped
