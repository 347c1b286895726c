"""A span per ledgered call that says what the ledger decided, per OpenTelemetry's GenAI
conventions for tool calls (``execute_tool {gen_ai.tool.name}``).

With the ``[otel]`` extra (the OpenTelemetry API) a ledgered call, a ``@tool`` or an
activity ledgered by pattern, runs in a span of its own: a child of temporalio's
``RunActivity`` span where its ``OpenTelemetryPlugin`` or ``TracingInterceptor`` is on,
a root otherwise. The GenAI attributes say which tool; the ledger's, in the
``temporal_ledger.*`` namespace, what the ledger did: acted, replayed, refused, denied,
failed, unknown or awaiting approval, with the key, fingerprint, replayed action and
lease token. Arguments and outputs are recorded only when asked for
(``LedgerPlugin(trace_content=True)``), as the conventions make them opt-in. Without the
extra nothing is imported and nothing is recorded.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import json
from collections.abc import Iterator, Sequence
from typing import Any

from ..ledger import ActionRequest, ActionResult, InvalidRequest

try:
    from opentelemetry import trace
except ImportError:  # the [otel] extra is not installed: no spans
    trace = None  # type: ignore[assignment]  # no [otel]: None, checked before use

#: The namespace of the ledger's own span attributes.
NAMESPACE = "temporal_ledger"

_current: contextvars.ContextVar[CallSpan | None] = contextvars.ContextVar(
    "temporal_ledger_call_span", default=None
)


@dataclasses.dataclass
class CallSpan:
    """The span of one ledgered call, or nothing where tracing is off."""

    span: Any = None
    #: Record the call's arguments and output (opt-in GenAI content attributes).
    content: bool = False

    def set(self, name: str, value: Any) -> None:
        """A ``temporal_ledger.<name>`` attribute (lists of strings as they are)."""
        if self.span is None or value is None:
            return
        plain = isinstance(value, (str, bool, int, float)) or (
            isinstance(value, Sequence) and all(isinstance(v, str) for v in value)
        )
        self.span.set_attribute(f"{NAMESPACE}.{name}", value if plain else _json(value))

    def set_content(self, name: str, value: Any) -> None:
        """An opt-in GenAI content attribute (``gen_ai.tool.call.arguments``, ``.result``)."""
        if self.span is not None and self.content:
            self.span.set_attribute(f"gen_ai.tool.call.{name}", _json(value))


@contextlib.contextmanager
def call_span(tool: str, key: str, *, content: bool = False) -> Iterator[CallSpan]:
    """The span of one ledgered call of ``tool`` under ``key``, current while it runs."""
    if trace is None:
        yield CallSpan()
        return
    attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool,
        "gen_ai.tool.call.id": key,
        f"{NAMESPACE}.key": key,
    }
    with trace.get_tracer("temporal_ledger").start_as_current_span(
        f"execute_tool {tool}",
        kind=trace.SpanKind.INTERNAL,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        token = _current.set(call := CallSpan(span, content))
        try:
            yield call
        except BaseException as exc:
            span.set_attribute("error.type", str(getattr(exc, "type", None) or type(exc).__name__))
            raise
        finally:
            _current.reset(token)


def current_call() -> CallSpan:
    """The span of the ledgered call running now (a span that records nothing if none)."""
    return _current.get() or CallSpan()


def _json(value: Any) -> str:
    try:
        return json.dumps(value, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return repr(value)


def describe_request(span: CallSpan, request: dict[str, Any]) -> None:
    """What the call asks for, on its span: the fingerprint, and the arguments if opted in."""
    if span.span is not None and span.span.is_recording():
        # A request the ledger refuses has no fingerprint; the ledger's refusal is typed.
        with contextlib.suppress(InvalidRequest):
            span.set("fingerprint", ActionRequest.parse(request).fingerprint())
        span.set_content("arguments", request.get("payload"))


def describe_result(span: CallSpan, result: ActionResult) -> None:
    """What the ledger answered, on the call's span."""
    span.set("action_id", result.action_id)
    span.set("reused_from_action_id", result.reused_from_action_id)
    span.set("effect", result.effect.value)
    if result.status == "succeeded" or result.verdict == "effect_confirmed":
        span.set_content("result", result.output)


def traceparent() -> str | None:
    """The W3C ``traceparent`` of the span current now (the ledgered call's), or None where
    OpenTelemetry is not in use or no span is being recorded."""
    if trace is None:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return carrier.get("traceparent")
