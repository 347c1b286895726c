"""The shared record code's shortcuts give what the plain library calls give."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from temporal_ledger.ledger._models import (
    Approval,
    ApprovalState,
    EffectState,
    Reconciliation,
)
from temporal_ledger.ledger._transaction import KeyRecord, Outcome, Phase, iso


def _plain_iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="microseconds")


@settings(max_examples=2000, deadline=None)
@given(
    st.floats(min_value=-1e9, max_value=4e9, allow_nan=False)
    | st.integers(min_value=0, max_value=4 * 10**15).map(lambda us: us / 1e6 + 5e-7)
)
def test_iso_is_datetimes_isoformat(epoch: float) -> None:
    # The second value family sits on half microseconds, where rounding decides.
    assert iso(epoch) == _plain_iso(epoch)


def test_iso_carries_a_rounded_up_second() -> None:
    for epoch in (1_700_000_000.9999996, 1_700_000_059.9999999, 0.9999995, 1e-7):
        assert iso(epoch) == _plain_iso(epoch)


def _record() -> KeyRecord:
    return KeyRecord(
        key="k",
        phase=Phase.SETTLED,
        dimensions={"payload": "ab" * 32},
        outcome=Outcome(
            action_id="a",
            status="succeeded",
            effect=EffectState.OBSERVED,
            output={"ok": True},
            token=1,
        ),
        reconciliations=[
            Reconciliation(verdict="still_unknown", actor="ann", basis="asked", recorded_at="t")
        ],
        approval=Approval(state=ApprovalState.CONSUMED, fingerprint="f", consumed_by="a"),
    )


def test_a_record_reads_back_as_written() -> None:
    record = _record()
    again = KeyRecord.from_json(record.to_json())
    assert again == record and vars(again) == vars(record)


def test_a_record_with_a_field_this_release_does_not_know_is_refused() -> None:
    fields = {**json.loads(_record().to_json()), "from_the_future": 1}
    with pytest.raises(TypeError):
        KeyRecord.from_json(json.dumps(fields))


def test_an_outcome_is_recorded_as_the_body_it_always_had() -> None:
    """The typed outcome writes the keys an outcome always had, the ones that apply only
    where they apply, and leaves out what a replay's payload adds beside it."""
    body = {
        "action_id": "a",
        "status": "failed",
        "effect": "unknown",
        "output": None,
        "error": "interrupted",
        "error_type": "Interrupted",
        "retryable": False,
        "retry_after": None,
        "verdict": None,
        "compacted": False,
        "recorded_at": "2026-01-01T00:00:00.000000+00:00",
        "token": 3,
        "interrupted": True,
    }
    outcome = Outcome.of({**body, "replayed": True, "reused_from_action_id": "z"})
    assert outcome.effect is EffectState.UNKNOWN and outcome.interrupted and outcome.token == 3
    assert json.dumps(outcome.body(), sort_keys=True) == json.dumps(body, sort_keys=True)
    plain = Outcome(action_id="b", status="denied", effect=EffectState.NONE)
    assert "token" not in plain.body() and "interrupted" not in plain.body()
    assert Outcome.of(plain.body()) == plain
