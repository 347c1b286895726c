"""The ledger's errors cross process boundaries (a worker's child, multiprocessing) whole."""

from __future__ import annotations

import pickle

import pytest
from temporal_ledger.ledger import (
    ActionInProgressError,
    DecisionRefused,
    IdempotencyConflictError,
    InvalidRequest,
    LedgerUnavailable,
    NoEffect,
)
from temporal_ledger.ledger._errors import DuplicateActionId

ERRORS = [
    IdempotencyConflictError(
        key="k", original_action_id="a1", dimensions=["payload"], fingerprint_version="v1"
    ),
    IdempotencyConflictError(
        key="k",
        original_action_id="a1",
        dimensions=("payload", "performer"),
        fingerprint_version="v1",
        action_id="a2",
    ),
    ActionInProgressError(key="k", holder_action_id="a1", lease_remaining=1.5, action_id="a2"),
    DecisionRefused("k", "its effect is observed, not unknown", decided="observed"),
    DecisionRefused("k", "no execution is recorded for this key"),
    DecisionRefused("k", "already approved", decided="approved"),
    LedgerUnavailable("connection lost", maybe_committed=True),
    NoEffect("429 Too Many Requests", retryable=True, retry_after=2.0),
    NoEffect(),
    InvalidRequest("bad key"),
    DuplicateActionId("submitted before"),
]


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: type(e).__name__)
def test_an_error_pickles_with_its_message_and_fields(error: Exception) -> None:
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is type(error)
    assert str(again) == str(error)
    fields = {k: v for k, v in vars(error).items() if not k.startswith("_")}
    assert {k: v for k, v in vars(again).items() if not k.startswith("_")} == fields
