"""The contract suite, first part: what binds a key and what the storage keeps. Fresh
calls, replays, conflicts, resubmissions, bad input and denials; compaction, one-message
transactions, and values at the limits of what the storage records."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import pytest

from ._errors import IdempotencyConflictError, InvalidRequest
from ._ledger import Ledger
from ._models import ActionRequest, ActionResult, Authority, EffectState, NextOperation
from ._rule import Ask, admit
from ._testing_child import AUTHORITY, Opener, _CountingAdapter, _execute, _types, request

_EVENTS = ["action.requested", "action.execution_started", "action.completed"]
# A change of each dimension of an operation, under the same key.
_CHANGES: dict[str, Any] = {
    "capability": "files.delete",
    "instruction": "append two lines",
    "payload": {"line": "other"},
    "precondition": {"size": 3},
    "performer": "agent-2",
}


class IdentityContract:
    """What binds a key (mixed into ``LedgerContract``, whose fixtures it uses)."""

    # 1 -------------------------------------------------------------------------------
    async def test_fresh_success_records_marker_before_the_effect(self, ledger: Ledger) -> None:
        """The request and its started marker are recorded before the adapter acts; an
        async adapter is awaited."""
        seen: dict[str, Any] = {}

        def adapter(req: ActionRequest, ctx: Any) -> dict[str, Any]:
            seen.update(events=_types(ledger, req.key), ctx=ctx)
            return {"line": 1}

        result = await _execute(ledger, "k", adapter)
        assert (result.status, result.effect) == ("succeeded", EffectState.OBSERVED)
        assert result.output == {"line": 1}
        assert not result.replayed and result.reused_from_action_id is None
        assert seen["events"] == _EVENTS[:2] and _types(ledger, "k") == _EVENTS
        assert (seen["ctx"].key, seen["ctx"].fencing_token) == ("k", 1)
        assert seen["ctx"].action_id == result.action_id
        state = ledger.state("k")
        assert (state.status, state.effect) == ("succeeded", EffectState.OBSERVED)
        assert state.next_operation is NextOperation.NONE

        async def awaited(req: ActionRequest, ctx: Any) -> str:
            await asyncio.sleep(0)
            return "done"

        assert (await _execute(ledger, "async", awaited)).output == "done"

    # 2 -------------------------------------------------------------------------------
    async def test_an_identical_request_replays(self, ledger: Ledger, open_ledger: Opener) -> None:
        """Also after the ledger is reopened. Key order in the payload, the action id and the
        context are no part of what is identical."""
        far_side = _CountingAdapter()
        payload = {"a": 1, "b": {"x": [1, 2.5], "y": None}}
        reordered = {"b": {"y": None, "x": [1, 2.5]}, "a": 1}
        same = request("k", payload=reordered, context={"attempt": 2, "run": "other"})
        first = await _execute(ledger, request("k", payload=payload), far_side)
        second = await _execute(ledger, same, far_side)
        assert second.replayed and second.reused_from_action_id == first.action_id
        assert second.action_id != first.action_id
        assert (second.status, second.output) == (first.status, first.output)
        async with open_ledger() as reopened:
            third = await _execute(reopened, request("k", payload=payload), far_side)
        assert third.replayed and third.reused_from_action_id == first.action_id
        assert third.output == {"written": True} and len(far_side.calls) == 1

    async def test_the_same_submission_again_gets_its_recorded_answer(self, ledger: Ledger) -> None:
        """A submission (its ``action_id``) sent again gets the answer recorded for it and
        records nothing new; its id never names another request, under any key."""
        far_side = _CountingAdapter({"line": 1})
        first = await _execute(ledger, request("k", action_id="act-1"), far_side)
        events = ledger.events()
        assert await _execute(ledger, request("k", action_id="act-1"), far_side) == first
        assert ledger.events() == events  # a resubmission is not a new request
        replay = await _execute(ledger, request("k", action_id="act-2"), far_side)
        assert await _execute(ledger, request("k", action_id="act-2"), far_side) == replay
        assert replay.reused_from_action_id == "act-1"
        other = request("k", action_id="act-1", payload={"line": "other"})
        with pytest.raises(InvalidRequest, match="for a different request"):
            await _execute(ledger, other, far_side)
        events = ledger.events()
        with pytest.raises(InvalidRequest, match=r"action_id .* under another key"):
            await _execute(ledger, request("k2", action_id="act-1"))
        assert ledger.events() == events and len(far_side.calls) == 1

    # 3 -------------------------------------------------------------------------------
    @pytest.mark.parametrize("dimension", list(_CHANGES))
    async def test_a_different_operation_under_the_key_is_refused(
        self, ledger: Ledger, open_ledger: Opener, dimension: str
    ) -> None:
        """Refused durably: on this ledger and on one opened anew, naming what differs."""
        far_side = _CountingAdapter()
        first = await _execute(ledger, "k", far_side)
        changed = request("k", **{dimension: _CHANGES[dimension]})
        async with open_ledger() as reopened:
            for each in (ledger, reopened):
                with pytest.raises(IdempotencyConflictError) as caught:
                    await _execute(each, changed, far_side, state=lambda req: {"size": 3})
                conflict = caught.value
                assert (conflict.key, conflict.dimensions) == ("k", (dimension,))
                assert conflict.original_action_id == first.action_id
                assert conflict.fingerprint_version == "action-fingerprint-v1"
                assert dimension in str(conflict)
                refusal = each.events("k")[-1]
                assert refusal.type == "action.replay_refused"
                assert refusal.payload["dimensions"] == [dimension]
                assert refusal.payload["original_action_id"] == first.action_id
        assert len(far_side.calls) == 1

    # 4 -------------------------------------------------------------------------------
    async def test_a_denial_discloses_nothing_nor_uses_up_the_key(self, ledger: Ledger) -> None:
        stranger = Authority("stranger", ["mail.*"])
        far_side = _CountingAdapter()
        await _execute(ledger, "used", far_side)
        shapes = set()
        for key, changes in [("unused", {}), ("used", {}), ("used", {"instruction": "other"})]:
            r = await ledger.execute(request(key, **changes), authority=stranger, adapter=far_side)
            shapes.add((r.status, r.effect, r.output, r.error, r.replayed, r.reused_from_action_id))
        error = "'stranger' may not use capability 'files.append'"
        assert shapes == {("denied", EffectState.NONE, None, error, False, None)}
        refused = ["action.requested", "action.authorization_refused", "action.completed"]
        assert _types(ledger, "unused") == refused
        granted = await _execute(ledger, "unused", far_side)
        assert granted.status == "succeeded" and not granted.replayed
        assert (await _execute(ledger, "unused", far_side)).replayed
        assert len(far_side.calls) == 2


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
        assert late.status == "succeeded" and late.output is None
        assert late.reused_from_action_id == first.action_id
        with pytest.raises(IdempotencyConflictError) as conflict:
            await _execute(ledger, request("k", payload={"line": "new"}), far_side)
        assert conflict.value.dimensions == ("payload",)
        assert len(far_side.calls) == 1
        assert await ledger.compact(older_than=0) == 0

    async def test_a_one_message_transaction_checks_the_record(self, ledger: Ledger) -> None:
        """It writes only against the record expected. ``Recorder.transact_unchanged`` is optional.
        Where a backend offers it, a transaction against a record the key no longer has, or against
        no record where the key has one, writes nothing; against the record the key has, it
        commits."""
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
        committed, decision = done
        assert committed and isinstance(decision, ActionResult) and decision.replayed
        assert _types(ledger, "k")[len(before) :] == ["action.requested", "action.completed"]

    # Hostile values: what tool arguments and outputs written by models can hold --------
    async def test_unrecordable_outputs(self, ledger: Ledger, open_ledger: Opener) -> None:
        """An output that cannot be recorded is an observed effect. The adapter acted; its output is
        too deep (or not JSON) to record. The outcome is FAILED with its effect observed, naming the
        output's hash, and the key answers that for ever after instead of acting again."""
        deep: Any = 1
        for _ in range(5000):
            deep = [deep]
        for key, output in (("deep", deep), ("nan", {"x": float("nan")}), ("set", {1, 2})):
            far_side = _CountingAdapter(output)
            first = await _execute(ledger, key, far_side)
            assert (first.status, first.effect) == ("failed", EffectState.OBSERVED)
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
        assert (first.status, first.effect) == ("failed", EffectState.UNKNOWN)
        assert first.error is not None and "\\ud800" in first.error and "\u0000" in first.error
        assert len(first.error) < 70_000
        again = await _execute(ledger, "k", far_side)
        assert again.replayed and again.error == first.error

    async def test_hostile_text_round_trips(self, ledger: Ledger, open_ledger: Opener) -> None:
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
