"""Verdicts and approvals as span events, emitted once: never while a run replays.

With the ``[otel]`` extra, each decision recorded for a waiting call (an operator's or a
probe's verdict, an approver's decision) becomes a short span, ``ledger.decision``, in
the run's trace context (under temporalio's workflow span where its tracing is on), with
one event saying what was decided. A run's history replays on every worker restart and
in replay tests; an event emitted then would say twice what happened once, so nothing is
emitted while the workflow replays.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

#: The namespace of the ledger's span attributes, as on the activity side's spans.
NAMESPACE = "temporal_ledger"

try:
    from opentelemetry import trace
except ImportError:  # the [otel] extra is not installed
    trace = None  # type: ignore[assignment]  # no [otel]: None, checked before use


def decided(kind: str, key: str, **attributes: Any) -> None:
    """One decision on the call under ``key``: ``kind`` is ``verdict`` or ``approval``."""
    if trace is None or workflow.unsafe.is_replaying():
        return
    info = workflow.info()
    fields = {
        f"{NAMESPACE}.key": key,
        f"{NAMESPACE}.workflow_id": info.workflow_id,
        **{f"{NAMESPACE}.{name}": str(value) for name, value in attributes.items()},
    }
    span = trace.get_tracer("temporal_ledger").start_span("ledger.decision", attributes=fields)
    span.add_event(f"{NAMESPACE}.{kind}", attributes=fields)
    span.end()
