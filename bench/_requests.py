"""The request every ledger bench script makes: one shape, so their figures compare."""

from __future__ import annotations

from temporal_ledger.ledger import ActionRequest, Authority

AUTHORITY = Authority("bench", ["bench.*"])


def bench_request(key: str) -> ActionRequest:
    """A new request for ``key`` (a new instance per submission: each its own action_id)."""
    return ActionRequest(
        key=key,
        capability="bench.append",
        instruction="append one line",
        payload={"line": key},
        performer="bench",
    )
