"""The contract suite, first part: what binds a key. Fresh calls, replays, conflicts,
bad input and denials."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
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
from ._testing_child import (
    _CountingAdapter,
    _execute,
    _types,
    request,
)


class IdentityContract:
    """What binds a key (mixed into ``LedgerContract``, whose fixtures it uses)."""

    # 1 -------------------------------------------------------------------------------
    async def test_fresh_success_records_marker_before_the_effect(self, ledger: Ledger) -> None:
        seen: dict[str, Any] = {}

        def adapter(req: ActionRequest, ctx: Any) -> dict[str, Any]:
            seen["events"] = _types(ledger, req.key)
            seen["ctx"] = ctx
            return {"line": 1}

        result = await _execute(ledger, "k", adapter)
        assert result.status is ActionStatus.SUCCEEDED
        assert result.effect is EffectState.OBSERVED
        assert result.output == {"line": 1}
        assert not result.replayed and result.reused_from_action_id is None
        assert seen["events"] == ["action.requested", "action.execution_started"]
        assert seen["ctx"].key == "k" and seen["ctx"].fencing_token == 1
        assert seen["ctx"].action_id == result.action_id
        assert _types(ledger, "k") == [
            "action.requested",
            "action.execution_started",
            "action.completed",
        ]
        state = ledger.state("k")
        assert (state.status, state.effect, state.next_operation) == (
            ActionStatus.SUCCEEDED,
            EffectState.OBSERVED,
            NextOperation.NONE,
        )

    async def test_async_adapter_is_awaited(self, ledger: Ledger) -> None:
        async def adapter(req: ActionRequest, ctx: Any) -> str:
            await asyncio.sleep(0)
            return "done"

        result = await _execute(ledger, "k", adapter)
        assert result.output == "done"

    # 2 -------------------------------------------------------------------------------
    async def test_identical_request_replays_also_after_reopen(
        self, ledger: Ledger, open_ledger: Callable[..., Ledger]
    ) -> None:
        far_side = _CountingAdapter()
        first = await _execute(ledger, "k", far_side)
        second = await _execute(ledger, "k", far_side)
        assert len(far_side.calls) == 1
        assert second.replayed and second.reused_from_action_id == first.action_id
        assert second.action_id != first.action_id
        assert (second.status, second.output) == (first.status, first.output)
        async with open_ledger() as reopened:
            third = await _execute(reopened, "k", far_side)
        assert len(far_side.calls) == 1
        assert third.replayed and third.reused_from_action_id == first.action_id
        assert third.output == {"written": True}

    async def test_a_submission_id_cannot_be_reused_for_another_request(
        self, ledger: Ledger
    ) -> None:
        req = request("k")
        await _execute(ledger, req)
        before = len(ledger.events())
        other = request("k2", action_id=req.action_id)
        with pytest.raises(InvalidRequest, match=r"action_id .* under another key"):
            await _execute(ledger, other)
        assert len(ledger.events()) == before

    # 3 -------------------------------------------------------------------------------
    @pytest.mark.parametrize(
        ("dimension", "change"),
        [
            ("capability", {"capability": "files.delete"}),
            ("instruction", {"instruction": "append two lines"}),
            ("payload", {"payload": {"line": "other"}}),
            ("precondition", {"precondition": {"size": 3}}),
            ("performer", {"performer": "agent-2"}),
        ],
    )
    async def test_a_different_operation_under_the_key_is_refused(
        self,
        ledger: Ledger,
        open_ledger: Callable[..., Ledger],
        dimension: str,
        change: dict[str, Any],
    ) -> None:
        far_side = _CountingAdapter()
        first = await _execute(ledger, "k", far_side)
        with pytest.raises(IdempotencyConflictError) as caught:
            await _execute(ledger, request("k", **change), far_side, state=lambda req: {"size": 3})
        assert caught.value.dimensions == (dimension,)
        assert caught.value.key == "k"
        assert caught.value.original_action_id == first.action_id
        assert caught.value.fingerprint_version == "action-fingerprint-v1"
        assert dimension in str(caught.value)
        assert len(far_side.calls) == 1
        refusal = ledger.events("k")[-1]
        assert refusal.type == "action.replay_refused"
        assert refusal.payload["dimensions"] == [dimension]
        assert refusal.payload["original_action_id"] == first.action_id
        async with open_ledger() as reopened:
            with pytest.raises(IdempotencyConflictError) as again:
                await _execute(
                    reopened, request("k", **change), far_side, state=lambda req: {"size": 3}
                )
        assert again.value.dimensions == (dimension,)
        assert len(far_side.calls) == 1

    async def test_key_order_action_id_and_context_do_not_change_identity(
        self, ledger: Ledger
    ) -> None:
        far_side = _CountingAdapter()
        payload = {"a": 1, "b": {"x": [1, 2.5], "y": None}}
        reordered = {"b": {"y": None, "x": [1, 2.5]}, "a": 1}
        await _execute(ledger, request("k", payload=payload, context={"attempt": 1}), far_side)
        again = await _execute(
            ledger,
            request("k", payload=reordered, context={"attempt": 2, "run": "other"}),
            far_side,
        )
        assert again.replayed and len(far_side.calls) == 1

    # 4 -------------------------------------------------------------------------------
    async def test_denial_discloses_nothing_and_does_not_use_up_the_key(
        self, ledger: Ledger
    ) -> None:
        stranger = Authority("stranger", ["mail.*"])
        far_side = _CountingAdapter()
        await _execute(ledger, "used", far_side)
        answers = []
        for key, changes in [("unused", {}), ("used", {}), ("used", {"instruction": "other"})]:
            result = await ledger.execute(
                request(key, **changes), authority=stranger, adapter=far_side
            )
            answers.append(result)
        shapes = {
            (r.status, r.effect, r.output, r.error, r.replayed, r.reused_from_action_id)
            for r in answers
        }
        assert shapes == {
            (
                ActionStatus.DENIED,
                EffectState.NONE,
                None,
                "'stranger' may not use capability 'files.append'",
                False,
                None,
            )
        }
        assert len(far_side.calls) == 1
        assert _types(ledger, "unused") == [
            "action.requested",
            "action.authorization_refused",
            "action.completed",
        ]
        granted = await _execute(ledger, "unused", far_side)
        assert granted.status is ActionStatus.SUCCEEDED and not granted.replayed
        again = await _execute(ledger, "unused", far_side)
        assert again.replayed
        assert len(far_side.calls) == 2
