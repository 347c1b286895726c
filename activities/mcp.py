"""For MCP servers: the ledger key a ledgered tool call carries, to dedupe by.

MCP has no idempotency key, so every ledgered MCP call sends its key in the request's
``_meta`` under ``temporal-ledger/key``, in its wire form (see
:meth:`temporal_ledger.ledger.Ledger.wire_key`), with the W3C ``traceparent`` of the
worker's span beside it. The key is the same on every retry, after a worker crash and in
the run a ``temporal workflow reset`` makes, so a server that files each effect under it
can answer a call it has already done with its first answer instead of acting twice: the
ledger lets a call run again after an operator's ``no_effect_confirmed`` verdict and for
retry-safe tools, and a server that dedupes turns a wrong verdict into no harm.

A server written with the official MCP SDK (``FastMCP``, ``MCPServer`` in 2.x)::

    from temporal_ledger.activities.mcp import ledger_key

    @server.tool()
    def add_note(ticket: str, text: str, ctx: Context) -> str:
        key = ledger_key(ctx)
        done = notes.find(key) if key else None
        return done or notes.add(ticket, text, key=key)

The ``traceparent`` needs no helper: OpenTelemetry's propagator reads it from the same
``_meta``. Google ADK's MCP tool sends no caller's ``_meta``, only what OpenTelemetry's
propagator injects, so for ADK the key travels as the W3C ``baggage`` entry
``temporal-ledger/key``; :func:`ledger_key` reads either. Strands' MCP calls carry it when
the ``MCPClient``'s transport is wrapped in
:func:`temporal_ledger.activities.strands.ledger_transport`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote_plus

from ..ledger._seam import is_wire_key
from ._mcp import KEY_FIELD

__all__ = ["ledger_key"]


def _from_baggage(header: Any) -> str | None:
    """The ``temporal-ledger/key`` entry of a W3C ``baggage`` header, decoded as
    OpenTelemetry's propagator encodes it (``quote_plus``); ``None`` if it has none."""
    for member in header.split(",") if isinstance(header, str) else ():
        name, _, value = member.split(";", 1)[0].partition("=")
        if unquote_plus(name.strip()) == KEY_FIELD:
            return unquote_plus(value.strip())
    return None


def ledger_key(ctx: Any) -> str | None:
    """The ledger key of the MCP tool call ``ctx`` belongs to, as the ledger sent it.

    Works with the MCP SDK's ``Context`` of 1.x (``_meta`` is a pydantic model, custom
    fields in its extras) and 2.x (a plain dict), and with its ``request_context``. Google
    ADK's calls carry the key as the W3C ``baggage`` entry of the same name (ADK's MCP
    tool sends only what OpenTelemetry's propagator injects); it is read there too.

    Args:
        ctx: The tool's ``Context`` (or its ``request_context``).

    Returns:
        The key's wire form, or ``None`` when the call carries none (it did not come
        through the ledger).

    Raises:
        ValueError: The request's ``_meta`` has the field, but not a key's wire form: a
            client other than the ledger wrote it, and a server deduping by it would
            file the call under a key no ledger uses.
    """
    request = getattr(ctx, "request_context", ctx)
    meta = getattr(request, "meta", None)
    if meta is None:
        return None
    fields = meta if isinstance(meta, Mapping) else getattr(meta, "model_extra", None) or {}
    key = fields[KEY_FIELD] if KEY_FIELD in fields else _from_baggage(fields.get("baggage"))
    if key is None and KEY_FIELD not in fields:
        return None
    if not isinstance(key, str) or not is_wire_key(key):
        raise ValueError(
            f"the request's _meta[{KEY_FIELD!r}] is not a ledger key's wire form (letters, "
            f"digits, '-', '.', '_' and '~XX' escapes): {key!r:.200}"
        )
    return key
