"""The contract suite, fourth part: what the storage keeps. Compaction, one-message
transactions, and values at the limits of what it records."""

from __future__ import annotations

import functools
from typing import Any

import pytest
from temporal_ledger.ledger import ActionStatus, IdempotencyConflictError, Ledger

from ._models import EffectState
from ._rule import Answer, Ask, admit
from ._testing_child import AUTHORITY, Opener, _CountingAdapter, _execute, _types, request


class RecordContract:
    """What the storage keeps (mixed into ``LedgerContract``, whose fixtures it uses)."""

    # 13 ------------------------------------------------------------------------------
    async def test_compaction_keeps_a_tombstone(self, ledger: Ledger) -> None:
        far_side = _CountingAdapter(output={"secret": "body"})
        first = await _execute(ledger, "k", far_side)
        await _execute(ledger, "open", _CountingAdapter(raise_after=TimeoutError()))
        assert await ledger.compact(older_than=0) == 1
        assert all(e.compacted for e in ledger.events("k") if e.type != "action.compacted")
        assert "secret" not in str([e.payload for e in ledger.events("k")])
        assert ledger.state("open").effect is EffectState.UNKNOWN  # unknowns are never compacted
        late = await _execute(ledger, "k", far_side)
        assert late.replayed and late.compacted
        assert late.status is ActionStatus.SUCCEEDED and late.output is None
        assert late.reused_from_action_id == first.action_id
        with pytest.raises(IdempotencyConflictError) as conflict:
            await _execute(ledger, request("k", payload={"line": "new"}), far_side)
        assert conflict.value.dimensions == ("payload",)
        assert len(far_side.calls) == 1
        assert ledger.verify().ok
        assert await ledger.compact(older_than=0) == 0

    async def test_a_one_message_transaction_writes_only_against_the_record_expected(
        self, ledger: Ledger
    ) -> None:
        """``Recorder.transact_unchanged`` is optional. Where a backend offers it, a
        transaction against a record the key no longer has, or against no record where
        the key has one, writes nothing; against the record the key has, it commits."""
        recorder = ledger._recorder  # the recorder's own contract
        await _execute(ledger, "k")
        stale = recorder.get("k")
        await _execute(ledger, "k")  # a replay
        current = recorder.get("k")
        assert stale is not None and current is not None
        replay = functools.partial(
            admit, ask=Ask.of(request("k"), AUTHORITY, lease=2.0), first=True, give_up=True
        )
        before = ledger.events("k")
        for wrong in (None, stale):
            done = await recorder.transact_unchanged("k", wrong, recorder.now(), replay)
            assert done in (None, (False, None))  # None: no shortcut was taken
            assert ledger.events("k") == before
        done = await recorder.transact_unchanged("k", current, recorder.now(), replay)
        if done is None:  # this recorder offers no one-message transactions
            assert ledger.events("k") == before
            return
        assert done[0]
        decision = done[1]
        assert isinstance(decision, Answer) and decision.result.replayed
        assert _types(ledger, "k")[len(before) :] == ["action.requested", "action.completed"]
        assert ledger.verify().ok

    # Hostile values: what tool arguments and outputs written by models can hold --------
    async def test_an_output_that_cannot_be_recorded_is_an_observed_effect(
        self, ledger: Ledger, open_ledger: Opener
    ) -> None:
        """The adapter acted; its output is too deep (or not JSON) to record. The outcome is
        FAILED with its effect observed, naming the output's hash, and the key answers that
        for ever after instead of acting again."""
        deep: Any = 1
        for _ in range(5000):
            deep = [deep]
        for key, output in (("deep", deep), ("nan", {"x": float("nan")}), ("set", {1, 2})):
            far_side = _CountingAdapter(output)
            first = await _execute(ledger, key, far_side)
            assert (first.status, first.effect) == (ActionStatus.FAILED, EffectState.OBSERVED)
            assert first.error_type == "UnrecordableOutput"
            assert first.error is not None and "sha256 " in first.error
            again = await _execute(ledger, key, far_side)
            assert again.replayed and again.error == first.error
            async with open_ledger() as reopened:
                third = await _execute(reopened, key, far_side)
            assert third.replayed and third.error_type == "UnrecordableOutput"
            assert len(far_side.calls) == 1
        assert ledger.open_effects() == []

    async def test_failures_with_unrecordable_messages_are_recorded(self, ledger: Ledger) -> None:
        class Hostile(Exception):
            def __str__(self) -> str:
                return "lone \ud800 surrogate, NUL \u0000, and " + "x" * 100_000

        far_side = _CountingAdapter(raise_after=Hostile())
        first = await _execute(ledger, "k", far_side)
        assert (first.status, first.effect) == (ActionStatus.FAILED, EffectState.UNKNOWN)
        assert first.error is not None and "\\ud800" in first.error and "\u0000" in first.error
        assert len(first.error) < 70_000
        again = await _execute(ledger, "k", far_side)
        assert again.replayed and again.error == first.error

    async def test_hostile_text_round_trips_exactly(
        self, ledger: Ledger, open_ledger: Opener
    ) -> None:
        """SQL-like text in every field, and NULs in an output, are recorded like any
        character: the key replays, also after the ledger is reopened (no write of the
        same output is refused later)."""
        texts = [
            "'); DROP TABLE ledger_events; --",
            "$$; DROP TABLE ledger_keys; $$",
            "$tag$ $$ $1 %s %(x)s ? :name",
            "back\\slash \\' \\\\ E'\\x00' e'\\n'",
            "E'it''s' U&'\\0041' B'101' X'ff'",
            '";\n\r\t\u2028\u2029\U0001f600 \u00e9',
        ]
        key = "k'\\;--$$ E'\\x41'"
        payload = {text: [text, {"nested": text}] for text in texts}
        req = functools.partial(
            request, key, instruction=texts[0], payload=payload, performer=texts[3]
        )
        output = {"echo": texts, "ok": "a\u0000b", "\u0000key": ["\u0000"]}
        far_side = _CountingAdapter(output)
        first = await _execute(ledger, req(), far_side)
        assert first.ok and first.output == output
        again = await _execute(ledger, req(), far_side)
        assert again.replayed and again.output == output
        async with open_ledger() as reopened:
            third = await _execute(reopened, req(), far_side)
            requested = reopened.events(key)[0]
        assert third.replayed and third.output == output
        assert requested.payload["payload"] == payload
        assert requested.payload["instruction"] == texts[0]
        assert len(far_side.calls) == 1 and ledger.state(key).output == output
        assert ledger.open_effects() == []
        assert {e.key for e in ledger.events(key)} == {key}
