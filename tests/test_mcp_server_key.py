"""``ledger_key(ctx)``, the MCP server's side: a real ``MCPServer`` of the ``mcp`` package
called in-process by the SDK's own ``Client``, with the ``_meta`` a ledgered call sends,
none, and fields a lying client could send."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client
from mcp.server.mcpserver import Context, MCPServer
from opentelemetry import baggage
from opentelemetry import context as otel_context
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from temporal_ledger.activities.mcp import ledger_key
from temporal_ledger.ledger import Ledger

server = MCPServer("keys")


@server.tool()
def read_key(ctx: Context[Any]) -> str:
    """The key the call carries, or what was wrong with it."""
    try:
        return json.dumps({"key": ledger_key(ctx)})
    except ValueError as exc:
        return json.dumps({"error": str(exc)})


async def answer(meta: dict[str, Any] | None) -> dict[str, Any]:
    async with Client(server) as client:
        result = await client.call_tool("read_key", {}, meta=meta)
    assert not result.is_error, result
    text = result.content[0]
    assert text.type == "text"
    return dict(json.loads(text.text))


async def test_the_server_reads_the_key_a_ledgered_call_sends() -> None:
    key = "order ann smith/run-1/3"
    sent = {
        "temporal-ledger/key": Ledger.wire_key(key),
        "traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01",
    }

    assert await answer(sent) == {"key": "order~20ann~20smith~2Frun-1~2F3"}


@pytest.mark.parametrize(
    "meta", [None, {}, {"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}]
)
async def test_a_call_that_did_not_come_through_the_ledger_has_no_key(
    meta: dict[str, Any] | None,
) -> None:
    assert await answer(meta) == {"key": None}


@pytest.mark.parametrize(
    "field",
    ["", "order ann", "a%20b", "a~2fb", "a~2", 42, ["k"], {"k": "v"}, "k\x00", "é"],
)
async def test_a_field_that_is_not_a_wire_key_is_refused_by_name(field: Any) -> None:
    found = await answer({"temporal-ledger/key": field})

    assert "key" not in found
    assert "_meta['temporal-ledger/key']" in found["error"]
    assert "wire form" in found["error"]


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.text(min_size=1, max_size=300))
async def test_every_key_arrives_in_the_one_spelling_the_ledger_sent(key: str) -> None:
    sent = Ledger.wire_key(key)

    assert await answer({"temporal-ledger/key": sent}) == {"key": sent}


def baggage_of(**entries: str) -> str:
    """The ``baggage`` header OpenTelemetry's own propagator writes for ``entries`` (what
    Google ADK's MCP tool puts in ``_meta``)."""
    ctx = otel_context.Context()
    for name, value in entries.items():
        ctx = baggage.set_baggage(name.replace("__", "/"), value, context=ctx)
    carrier: dict[str, str] = {}
    W3CBaggagePropagator().inject(carrier, context=ctx)
    return carrier["baggage"]


async def test_the_server_reads_the_key_from_otel_baggage_as_adk_sends_it() -> None:
    sent = Ledger.wire_key("adk order/ü 1")
    header = baggage_of(tenant="acme", **{"temporal-ledger__key": sent})

    assert await answer({"baggage": header}) == {"key": sent}
    assert await answer({"baggage": baggage_of(tenant="acme")}) == {"key": None}
    refused = await answer({"baggage": baggage_of(**{"temporal-ledger__key": "a b"})})
    assert "wire form" in refused["error"]
