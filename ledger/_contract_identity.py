"""The contract suite, first part: what binds a key. Fresh calls, replays, conflicts,
resubmissions, bad input and denials."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from temporal_ledger.ledger import (
    ActionRequest,
    ActionStatus,
    Authority,
    IdempotencyConflictError,
    InvalidRequest,
    Ledger,
)

from ._models import EffectState, NextOperation
from ._testing_child import Opener, _CountingAdapter, _execute, _types, request

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
        assert (result.status, result.effect) == (ActionStatus.SUCCEEDED, EffectState.OBSERVED)
        assert result.output == {"line": 1}
        assert not result.replayed and result.reused_from_action_id is None
        assert seen["events"] == _EVENTS[:2] and _types(ledger, "k") == _EVENTS
        assert (seen["ctx"].key, seen["ctx"].fencing_token) == ("k", 1)
        assert seen["ctx"].action_id == result.action_id
        state = ledger.state("k")
        assert (state.status, state.effect) == (ActionStatus.SUCCEEDED, EffectState.OBSERVED)
        assert state.next_operation is NextOperation.NONE

        async def awaited(req: ActionRequest, ctx: Any) -> str:
            await asyncio.sleep(0)
            return "done"

        assert (await _execute(ledger, "async", awaited)).output == "done"

    # 2 -------------------------------------------------------------------------------
    async def test_identical_request_replays_also_after_reopen(
        self, ledger: Ledger, open_ledger: Opener
    ) -> None:
        """Key order in the payload, the action id and the context are no part of what is
        identical."""
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
    async def test_denial_discloses_nothing_and_does_not_use_up_the_key(
        self, ledger: Ledger
    ) -> None:
        stranger = Authority("stranger", ["mail.*"])
        far_side = _CountingAdapter()
        await _execute(ledger, "used", far_side)
        shapes = set()
        for key, changes in [("unused", {}), ("used", {}), ("used", {"instruction": "other"})]:
            req = request(key, **changes)
            r = await ledger.execute(req, authority=stranger, adapter=far_side)
            shapes.add((r.status, r.effect, r.output, r.error, r.replayed, r.reused_from_action_id))
        error = "'stranger' may not use capability 'files.append'"
        assert shapes == {(ActionStatus.DENIED, EffectState.NONE, None, error, False, None)}
        refused = ["action.requested", "action.authorization_refused", "action.completed"]
        assert _types(ledger, "unused") == refused
        granted = await _execute(ledger, "unused", far_side)
        assert granted.status is ActionStatus.SUCCEEDED and not granted.replayed
        assert (await _execute(ledger, "unused", far_side)).replayed
        assert len(far_side.calls) == 2
