"""The contract suite, third part: people's decisions. Verdicts on unknown effects,
preconditions and approvals."""

from __future__ import annotations

import functools
from typing import Any

import pytest
from temporal_ledger.ledger import ActionRequest, InvalidRequest, Ledger, NoEffect

from ._errors import DecisionRefused, IdempotencyConflictError
from ._models import ApprovalState, EffectState, FailureType, NextOperation, Verdict
from ._testing_child import _approval_state, _CountingAdapter, _execute, _types, request


class DecisionContract:
    """People's decisions (mixed into ``LedgerContract``, whose fixtures it uses)."""

    # 8 -------------------------------------------------------------------------------
    @pytest.mark.parametrize(
        ("verdict", "effect", "next_operation"),
        [
            ("effect_confirmed", "observed", "none"),
            ("no_effect_confirmed", "none", "start_action"),
            ("still_unknown", "unknown", "reconcile_effect"),
        ],
        ids=["effect_confirmed", "no_effect_confirmed", "still_unknown"],
    )
    async def test_a_verdict_settles_an_unknown_effect(
        self, ledger: Ledger, verdict: Verdict, effect: str, next_operation: str
    ) -> None:
        """Recorded after what it settles: an effect confirmed replays the operator's
        output, no effect confirmed acts exactly once more, still unknown keeps it open."""
        far_side = _CountingAdapter(raise_after=ConnectionResetError("reset"))
        assert (await _execute(ledger, "k", far_side)).effect is EffectState.UNKNOWN
        before = ledger.events("k")
        output = {"line": 3} if effect == "observed" else None
        evidence = ["file:/tmp/out.txt#L3"]
        state = await ledger.reconcile("k", verdict, "ops@example", "looked", evidence, output)
        assert (state.status, state.effect) == ("failed", EffectState(effect))
        assert state.next_operation is NextOperation(next_operation)
        assert state.reconciliations[0].actor == "ops@example"
        assert ledger.events("k")[: len(before)] == before
        assert [s.key for s in ledger.open_effects()] == (["k"] if effect == "unknown" else [])
        far_side.raise_after = None
        later = await _execute(ledger, "k", far_side)
        if next_operation == "start_action":
            assert later.status == "succeeded" and not later.replayed
            assert (await _execute(ledger, "k", far_side)).replayed
        else:
            assert later.replayed and (later.status, later.effect) == (state.status, state.effect)
            assert later.output == output
            assert later.verdict == verdict
        assert len(far_side.calls) == 1 + (next_operation == "start_action")

    async def test_a_reconciliation_is_checked_before_it_is_recorded(self, ledger: Ledger) -> None:
        """Effect confirmed needs an output that fits the schema the request recorded; a
        key whose effect is not unknown is refused durably; so are unknown verdicts and
        missing actors."""
        fields = {"entry": {"type": "integer"}, "note": {"type": "string"}}
        schema = {"title": "Sent", "type": "object", "properties": fields, "required": ["entry"]}
        far_side = _CountingAdapter(raise_after=ConnectionResetError("lost the reply"))
        await _execute(ledger, request("k", output_schema=schema), far_side)
        assert ledger.state("k").output_schema == schema
        before = ledger.events("k")
        for output, problem in (
            (None, "entry: missing (integer)"),
            ({"note": "x"}, "entry: missing (integer)"),
            ({"entry": "two"}, "entry: expected integer, got 'two'"),
        ):
            with pytest.raises(InvalidRequest, match="effect_confirmed needs the output") as bad:
                await ledger.reconcile("k", "effect_confirmed", "ops", "saw it", output=output)
            assert problem in str(bad.value)
            assert ledger.events("k") == before  # nothing recorded, nothing changed
        state = await ledger.reconcile("k", "effect_confirmed", "ops", "saw", output={"entry": 2})
        assert state.effect is EffectState.OBSERVED and state.output == {"entry": 2}
        await _execute(ledger, "done")
        for key in ("done", "never-seen"):
            with pytest.raises(DecisionRefused) as refused:
                await ledger.reconcile(key, "no_effect_confirmed", "ops", "looked")
            assert refused.value.key == key
            assert ledger.events(key)[-1].type == "action.reconcile_refused"
        assert ledger.state("done").effect is EffectState.OBSERVED
        not_a_verdict: Any = "maybe"  # what mypy refuses, sent anyway
        with pytest.raises(InvalidRequest, match="verdict"):
            await ledger.reconcile("done", not_a_verdict, "ops", "looked")
        with pytest.raises(InvalidRequest, match="actor"):
            await ledger.reconcile("done", "still_unknown", "", "looked")

    # 9 -------------------------------------------------------------------------------
    @pytest.mark.parametrize(
        ("world", "error_type", "retryable", "next_operation"),
        [
            ({"size": 4}, "PreconditionDrift", False, "fix_inputs"),
            (ConnectionRefusedError("store down"), "ConnectionRefusedError", True, "start_action"),
            (TypeError("bug in the resolver"), "TypeError", False, "fix_inputs"),
        ],
        ids=["drift", "io-error", "bug"],
    )
    async def test_a_precondition_not_met_is_refused_before_any_effect(
        self, ledger: Ledger, world: Any, error_type: str, retryable: bool, next_operation: str
    ) -> None:
        """The world drifted from the precondition, or the state resolver failed."""

        def read_state(req: ActionRequest) -> Any:
            if isinstance(world, Exception):
                raise world
            return world

        far_side = _CountingAdapter()
        req = request("k", precondition={"size": 3})
        result = await _execute(ledger, req, far_side, state=read_state)
        assert (result.status, result.effect) == ("failed", EffectState.NONE)
        assert (result.error_type, result.retryable) == (error_type, retryable)
        assert ledger.state("k").next_operation is NextOperation(next_operation)
        assert far_side.calls == [] and "action.execution_started" not in _types(ledger, "k")

    async def test_replay_does_not_reevaluate_the_precondition(self, ledger: Ledger) -> None:
        world = {"size": 3}
        resolver_calls: list[str] = []

        def read_state(req: ActionRequest) -> dict[str, int]:
            resolver_calls.append(req.key)
            return dict(world)

        def grow(req: ActionRequest, ctx: Any) -> dict[str, int]:
            world["size"] += 1
            return dict(world)

        req = functools.partial(request, "k", precondition={"size": 3})
        first = await _execute(ledger, req(), grow, state=read_state)
        assert first.status == "succeeded" and world == {"size": 4}
        replay = await _execute(ledger, req(), grow, state=read_state)
        assert replay.replayed and replay.status == "succeeded"
        assert resolver_calls == ["k"] and world == {"size": 4}

    # 14 ------------------------------------------------------------------------------
    async def test_an_approved_call_acts_once_then_replays(self, ledger: Ledger) -> None:
        """Without a new approval. Approved by someone else: a performer never approves its own
        call."""
        far_side = _CountingAdapter()
        waiting = await _execute(ledger, "k", far_side, requires_approval=True)
        assert (waiting.status, waiting.effect) == ("denied", EffectState.NONE)
        assert waiting.error_type == FailureType.APPROVAL_REQUIRED and far_side.calls == []
        state = ledger.state("k")
        assert state.next_operation is NextOperation.AWAIT_APPROVAL
        assert state.approval is not None and state.approval.state is ApprovalState.REQUESTED
        fingerprint = request("k").fingerprint()
        assert state.approval.fingerprint == fingerprint
        with pytest.raises(DecisionRefused, match="performer"):
            await ledger.approve("k", fingerprint=fingerprint, actor="agent-1", basis="trust me")
        refused = [e for e in ledger.events("k") if e.type == "action.approval_refused"]
        assert refused[0].payload["actor"] == "agent-1"
        assert _approval_state(ledger, "k") is ApprovalState.REQUESTED
        approval = await ledger.approve("k", fingerprint=fingerprint, actor="alice", basis="ok")
        assert approval.state is ApprovalState.APPROVED and approval.actor == "alice"
        first = await _execute(ledger, "k", far_side, requires_approval=True)
        assert first.ok and not first.replayed and len(far_side.calls) == 1
        replay = await _execute(ledger, "k", far_side, requires_approval=True)
        assert replay.replayed and len(far_side.calls) == 1
        started = [e for e in ledger.events("k") if e.type == "action.execution_started"]
        assert [e.payload["approval_id"] for e in started] == [approval.approval_id]
        assert _approval_state(ledger, "k") is ApprovalState.CONSUMED
        # Verify names an execution that bypassed its gate.
        await _execute(ledger, "gated", requires_approval=False)
        assert ledger.verify().ok and ledger.verify(gated=["tickets.*"]).ok
        report = ledger.verify(gated=["files.*"])
        assert not report.ok
        assert any("without an approval" in p and "'gated'" in p for p in report.problems)

    async def test_an_approval_holds_only_for_the_exact_request(self, ledger: Ledger) -> None:
        far_side = _CountingAdapter()
        await _execute(ledger, "k", far_side, requires_approval=True)
        approved = request("k").fingerprint()
        changed = request("k", payload={"line": "refund 2000"})
        with pytest.raises(DecisionRefused, match="fingerprint"):
            await ledger.approve("k", fingerprint=changed.fingerprint(), actor="alice", basis="ok")
        await ledger.approve("k", fingerprint=approved, actor="alice", basis="ok")
        with pytest.raises(IdempotencyConflictError) as conflict:
            await _execute(ledger, changed, far_side, requires_approval=True)
        assert conflict.value.dimensions == ("payload",)
        assert far_side.calls == []
        assert _approval_state(ledger, "k") is ApprovalState.APPROVED
        assert "action.approval_refused" in _types(ledger, "k")

    async def test_a_consumed_approval_does_not_act_again(self, ledger: Ledger) -> None:
        """It does not start a second execution."""
        far_side = _CountingAdapter(raise_after=NoEffect("429 busy", retryable=True))
        await _execute(ledger, "k", far_side, requires_approval=True)
        fingerprint = request("k").fingerprint()
        await ledger.approve("k", fingerprint=fingerprint, actor="alice", basis="ok")
        first = await _execute(ledger, "k", far_side, requires_approval=True)
        assert first.retryable and len(far_side.calls) == 1  # the key may act again...
        again = await _execute(ledger, "k", far_side, requires_approval=True)
        assert again.error_type == FailureType.APPROVAL_REQUIRED  # ...under an approval of its own
        assert ledger.state("k").next_operation is NextOperation.AWAIT_APPROVAL
        with pytest.raises(DecisionRefused):
            await ledger.approve("k", fingerprint=fingerprint, actor="agent-1", basis="mine")
        await ledger.approve("k", fingerprint=fingerprint, actor="bob", basis="once more")
        far_side.raise_after = None
        assert (await _execute(ledger, "k", far_side, requires_approval=True)).ok
        assert len(far_side.calls) == 2

    async def test_a_rejection_ends_the_call_with_no_effect(self, ledger: Ledger) -> None:
        far_side = _CountingAdapter()
        await _execute(ledger, "k", far_side, requires_approval=True)
        fingerprint = request("k").fingerprint()
        rejection = await ledger.approve(
            "k", fingerprint=fingerprint, actor="alice", basis="too much", decision="reject"
        )
        assert rejection.state is ApprovalState.REJECTED
        again = await _execute(ledger, "k", far_side, requires_approval=True)
        assert again.status == "denied"
        assert again.error_type == FailureType.APPROVAL_REJECTED
        assert "too much" in (again.error or "")
        with pytest.raises(DecisionRefused, match="already rejected"):
            await ledger.approve("k", fingerprint=fingerprint, actor="bob", basis="fine by me")
        assert far_side.calls == []
