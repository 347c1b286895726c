"""The ledger key on an MCP request: ``_meta`` under a prefix this project owns.

MCP has no idempotency key of its own, so every ledgered MCP tool call carries its key in
the request's ``_meta`` (``params._meta``), where a server can read it and dedupe by it:

* ``temporal-ledger/key``: the key in its one wire form (``Ledger.wire_key``: letters, digits,
  ``-``, ``.``, ``_`` and ``~XX`` escapes), the same spelling a far side sees over HTTP,
  whatever the workflow id holds;
* ``traceparent``: the W3C trace context of the worker's span of the call, where
  OpenTelemetry is in use (absent otherwise).

They are added where the key is known for certain, in the ledgered activity's execution
(``activities._generic``), after the request's fingerprint is taken: a retry, a worker
crash or a reset sends the same key and is the same request. How each framework carries
them:

* temporalio-mcp (``TemporalMCPClient``, and the OpenAI Agents SDK's
  ``temporal_mcp_server``) and the Agents SDK's older MCP server providers: their
  ``call-tool`` activity sends its argument's ``meta`` dict; it gets the two fields added.
* pydantic-ai: an ``MCPToolset``'s documented ``process_tool_call`` hook, which
  ``activity_rules(agent)`` installs on the agent's MCP toolsets (wrapping one the
  toolset already has). It runs in the activity and adds the fields to ``metadata``.
* Google ADK: its MCP tool takes no ``_meta`` from a caller and sends what the global
  OpenTelemetry propagator injects; its rules (``activities.google_adk``) run the call
  in :func:`key_in_baggage`, so the key arrives in ``_meta["baggage"]``, beside the
  ``traceparent`` of the ledger's span.
* Strands: temporalio-strands-agents' ``call-tool`` activity calls the MCP session with no
  ``_meta``; the ``MCPClient``'s transport wrapped in ``strands.ledger_transport``
  (``_mcp_transport``) adds the two fields to each ``tools/call`` request it carries.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any

from ..ledger._seam import wire_key
from ._rules import without
from ._tracing import traceparent

#: The ``_meta`` field of a ledgered MCP request that holds the key's wire form.
KEY_FIELD = "temporal-ledger/key"

#: The ``_meta`` fields of the ledgered call running now (set by the activity side).
current: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar(
    "temporal_ledger_mcp_meta", default=None
)


def request_meta(key: str) -> dict[str, str]:
    """The ``_meta`` fields of a ledgered MCP call under ``key``, in the span current now.

    Args:
        key: The ledger key.

    Returns:
        ``{"temporal-ledger/key": wire_key(key)}``, with ``"traceparent"`` when there is a
        span.
    """
    parent = traceparent()
    # ``traceparent``: the W3C trace context of the worker's span of the call.
    return {KEY_FIELD: wire_key(key), **({"traceparent": parent} if parent else {})}


def merged(meta: Mapping[str, Any] | None, ours: Mapping[str, str]) -> dict[str, Any]:
    """The caller's ``_meta`` with the ledger's fields added (the ledger's win)."""
    return {**(meta or {}), **ours}


def with_meta(arg: Any, ours: Mapping[str, str]) -> Any:
    """An MCP ``call-tool`` activity's argument with the ledger's fields in its ``meta``.

    The argument is a dict (temporalio-mcp: ``{"name", "arguments", "meta", ...}``) or a
    dataclass with a ``meta`` field (the Agents SDK's older providers); anything else is
    returned as it is (another version's shape: the call goes out without the key).
    """
    if isinstance(arg, dict) and "name" in arg:
        return {**arg, "meta": merged(arg.get("meta"), ours)}
    if dataclasses.is_dataclass(arg) and not isinstance(arg, type):
        if any(field.name == "meta" for field in dataclasses.fields(arg)):
            return dataclasses.replace(arg, meta=merged(getattr(arg, "meta", None), ours))
    return arg


def without_meta(args: list[Any]) -> list[Any]:
    """An MCP ``call-tool`` activity's arguments (as JSON) for the fingerprint: the
    request's ``meta`` is metadata about the call (a progress token, a trace, what a
    workflow-side resolver adds), not what the tool is asked to do. Kept as ``None`` so a
    call without it fingerprints as it always did."""
    if args and isinstance(args[0], dict) and args[0].get("meta") is not None:
        return [{**args[0], "meta": None}, *args[1:]]
    return args


@functools.cache
def content_schema() -> dict[str, Any]:
    """The JSON schema of an MCP tool result's content, as an operator gives it: a
    non-empty list of MCP content blocks, or a string for one text block.

    Built once (pydantic builds it in milliseconds, and every MCP call that may park
    records it); callers read it and never change it."""
    from mcp.types import ContentBlock
    from pydantic import TypeAdapter

    blocks = without(
        TypeAdapter(list[ContentBlock]).json_schema(),
        # Without its prose (recorded with every call: kept short).
        lambda _, schema: ("description",) if isinstance(schema.get("description"), str) else (),
    )
    definitions = blocks.pop("$defs", {})
    return {"anyOf": [{"type": "string"}, {**blocks, "minItems": 1}], "$defs": definitions}


@contextlib.contextmanager
def key_in_baggage(key: str) -> Iterator[None]:
    """The ledger key as OpenTelemetry baggage (``temporal-ledger/key``, its wire form)
    while an MCP call runs, for a client that puts what the global propagator injects
    from the current context into the request's ``_meta`` (Google ADK's MCP tool does,
    baggage included by default)."""
    from opentelemetry import baggage, context

    token = context.attach(baggage.set_baggage(KEY_FIELD, wire_key(key)))
    try:
        yield
    finally:
        context.detach(token)


#: pydantic-ai's ``ProcessToolCallback``: ``(ctx, call_tool, name, tool_args)``.
ProcessToolCall = Callable[[Any, Any, str, dict[str, Any]], Awaitable[Any]]


class LedgerMetaHook:
    """pydantic-ai's ``process_tool_call`` hook that adds the ledger's fields to an MCP
    call's ``metadata``, around the toolset's own hook if it had one. Outside a ledgered
    call it changes nothing."""

    def __init__(self, wrapped: ProcessToolCall | None = None) -> None:
        self.wrapped = wrapped

    async def __call__(self, ctx: Any, call_tool: Any, name: str, tool_args: dict[str, Any]) -> Any:
        ours = current.get()

        async def keyed(
            name: str, args: dict[str, Any], *, metadata: dict[str, Any] | None = None
        ) -> Any:
            return await call_tool(name, args, metadata=merged(metadata, ours or {}))

        tool = call_tool if ours is None else keyed
        if self.wrapped is not None:
            return await self.wrapped(ctx, tool, name, tool_args)
        return await tool(name, tool_args)


def install_hooks(agent: Any) -> None:
    """Put :class:`LedgerMetaHook` on the MCP toolsets of a pydantic-ai agent (once each).

    Agents given by name, and toolsets of another kind, are left as they are.
    """
    toolsets = getattr(agent, "toolsets", None)
    if toolsets is None:  # an agent given by name has none
        return
    try:
        from pydantic_ai.mcp import MCPToolset
    except ImportError:  # pydantic-ai without its [mcp] extra: no MCP toolsets
        return

    def visit(toolset: Any) -> None:
        if isinstance(toolset, MCPToolset) and not isinstance(
            toolset.process_tool_call, LedgerMetaHook
        ):
            toolset.process_tool_call = LedgerMetaHook(toolset.process_tool_call)

    for toolset in toolsets:
        toolset.apply(visit)
