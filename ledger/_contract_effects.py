"""The contract suite, second part: effects that fail, may repeat, crash or race. The
outcomes that free a key, leases, late completions, other processes on the same keys."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from temporal_ledger.ledger import (
    ActionInProgressError,
    ActionRequest,
    ActionResult,
    ActionStatus,
    IdempotencyConflictError,
    InvalidRequest,
    Ledger,
    NoEffect,
)

from ._models import EffectState, NextOperation
from ._testing_child import (
    _CountingAdapter,
    _crash_after_acting,
    _execute,
    _reap,
    _run_hammer,
    _spawn_hanging_child,
    _types,
    _wait_for_line,
    count_effects,
    request,
)


@contextlib.asynccontextmanager
async def _after_a_crash(
    ledger_url: str, open_ledger: Callable[..., Ledger], tmp_path: Path, *, lease: float
) -> AsyncIterator[tuple[Ledger, _CountingAdapter]]:
    """A ledger whose key ``k`` a worker in another process claimed, acted on and was
    killed before it reported. After the block the ledger still verifies, nothing acted
    again, and the world saw the one effect."""
    effects = tmp_path / "effects.txt"
    _crash_after_acting(ledger_url, "k", effects, lease)
    far_side = _CountingAdapter()
    async with open_ledger(lease=lease) as ledger:
        yield ledger, far_side
        report = ledger.verify()
        assert report.ok, report.problems
    assert far_side.calls == []
    assert count_effects(effects) == {"k": 1}


class EffectContract:
    """Effects that fail, may repeat, crash or race (mixed into ``LedgerContract``)."""

    # 5 -------------------------------------------------------------------------------
    async def test_failure_after_acting_is_an_unknown_effect(self, ledger: Ledger) -> None:
        acted: list[str] = []

        def adapter(req: ActionRequest, ctx: Any) -> None:
            acted.append(req.key)
            raise ConnectionError("connection lost after sending")

        result = await _execute(ledger, "k", adapter)
        assert (result.status, result.effect) == (ActionStatus.FAILED, EffectState.UNKNOWN)
        assert "ConnectionError" in (result.error or "")
        state = ledger.state("k")
        assert state.next_operation is NextOperation.RECONCILE_EFFECT
        assert [s.key for s in ledger.open_effects()] == ["k"]
        retry = await _execute(ledger, "k", adapter)
        assert retry.replayed and retry.status is ActionStatus.FAILED
        assert retry.effect is EffectState.UNKNOWN
        assert retry.reused_from_action_id == result.action_id
        assert acted == ["k"]

    async def test_unknown_effect_of_a_retry_safe_tool_acts_again(self, ledger: Ledger) -> None:
        far_side = _CountingAdapter(raise_after=TimeoutError("no answer"))
        first = await _execute(ledger, "k", far_side, retry_safe=True)
        assert first.effect is EffectState.UNKNOWN
        far_side.raise_after = None
        second = await _execute(ledger, "k", far_side, retry_safe=True)
        assert second.status is ActionStatus.SUCCEEDED and not second.replayed
        # Retry-safe calls act before they record anything: no claim, no token.
        assert [c.fencing_token for c in far_side.calls] == [0, 0]
        assert all(c.key == "k" for c in far_side.calls)
        third = await _execute(ledger, "k", far_side, retry_safe=True)
        assert third.replayed and third.reused_from_action_id == second.action_id
        assert len(far_side.calls) == 2

    async def test_a_caller_cannot_declare_an_unguarded_unknown_effect_retry_safe(
        self, ledger: Ledger
    ) -> None:
        far_side = _CountingAdapter(raise_after=TimeoutError("no answer"))
        first = await _execute(ledger, "k", far_side)
        assert first.effect is EffectState.UNKNOWN
        again = await _execute(ledger, "k", far_side, retry_safe=True)
        assert again.replayed and again.effect is EffectState.UNKNOWN
        assert len(far_side.calls) == 1

    async def test_a_retry_safe_call_records_its_request_and_outcome_in_one_write(
        self, ledger: Ledger
    ) -> None:
        far_side = _CountingAdapter({"reply": "hello"})
        fresh = await _execute(ledger, "k", far_side, retry_safe=True)
        assert fresh.output == {"reply": "hello"} and not fresh.replayed
        # No claim and no started marker: the request and its outcome, written together.
        assert _types(ledger, "k") == ["action.requested", "action.completed"]
        assert len({e.recorded_at for e in ledger.events("k")}) == 1
        again = await _execute(ledger, "k", far_side, retry_safe=True)
        assert again.replayed and again.output == {"reply": "hello"}
        assert len(far_side.calls) == 1
        assert ledger.verify().ok

    async def test_a_retry_safe_submission_sent_again_to_a_new_ledger_gets_its_outcome(
        self, ledger: Ledger, open_ledger: Callable[..., Ledger]
    ) -> None:
        # A worker that dies after its commit but before it answered: the same submission
        # (same action_id) comes again to a process that has never seen the key.
        req = request("k")
        first = await _execute(ledger, req, _CountingAdapter({"n": 1}), retry_safe=True)
        async with open_ledger() as reopened:
            # Busy with other keys, as a worker is: a backend may then expect a key it
            # has not met to be vacant, act, and learn otherwise from its write.
            await _execute(reopened, "other", retry_safe=True)
            again = await _execute(reopened, req, _CountingAdapter({"n": 2}), retry_safe=True)
        assert again.output == {"n": 1} and again.action_id == first.action_id
        assert ledger.state("k").output == {"n": 1}
        assert _types(ledger, "k")[:2] == ["action.requested", "action.completed"]
        assert ledger.verify().ok

    async def test_two_retry_safe_attempts_may_both_act_and_the_first_recorded_wins(
        self, ledger: Ledger
    ) -> None:
        first_recorded = asyncio.Event()
        both_acting = asyncio.Barrier(2)

        async def quick(req: ActionRequest, ctx: Any) -> dict[str, str]:
            await both_acting.wait()
            return {"by": "quick"}

        async def slow(req: ActionRequest, ctx: Any) -> dict[str, str]:
            await both_acting.wait()
            await first_recorded.wait()
            return {"by": "slow"}

        async def recorded_first() -> ActionResult:
            try:
                return await _execute(ledger, "k", quick, retry_safe=True)
            finally:
                first_recorded.set()

        slow_result, quick_result = await asyncio.gather(
            _execute(ledger, "k", slow, retry_safe=True),
            recorded_first(),
        )
        assert quick_result.output == {"by": "quick"} and not quick_result.replayed
        assert slow_result.replayed and slow_result.output == {"by": "quick"}
        assert slow_result.reused_from_action_id == quick_result.action_id
        # What the later attempt did is kept as evidence, not as the outcome.
        late = [e for e in ledger.events("k") if e.type == "action.late_completion"]
        assert [e.payload["output"] for e in late] == [{"by": "slow"}]
        assert late[0].action_id == slow_result.action_id
        assert ledger.state("k").output == {"by": "quick"}
        assert ledger.verify().ok

    async def test_a_retry_safe_call_does_not_act_on_a_key_another_call_holds(
        self, ledger: Ledger
    ) -> None:
        release = asyncio.Event()

        async def held(req: ActionRequest, ctx: Any) -> str:
            await release.wait()
            return "held"

        holder = asyncio.create_task(_execute(ledger, "k", held))
        while ledger.state("k").next_operation is not NextOperation.WAIT:
            await asyncio.sleep(0.01)
        far_side = _CountingAdapter()
        with pytest.raises(ActionInProgressError):
            await _execute(ledger, "k", far_side, retry_safe=True)
        other = request("k", payload={"line": "another"})
        with pytest.raises(IdempotencyConflictError):
            await _execute(ledger, other, far_side, retry_safe=True)
        release.set()
        assert (await holder).output == "held"
        replayed = await _execute(ledger, "k", far_side, retry_safe=True)
        assert replayed.replayed and replayed.output == "held"
        assert far_side.calls == []
        assert ledger.verify().ok

    # 6 -------------------------------------------------------------------------------
    async def test_retryable_no_effect_lets_the_key_act_again(self, ledger: Ledger) -> None:
        far_side = _CountingAdapter(
            raise_after=NoEffect("429 busy", retryable=True, retry_after=1.5)
        )
        first = await _execute(ledger, "k", far_side)
        assert (first.status, first.effect) == (ActionStatus.FAILED, EffectState.NONE)
        assert first.retryable and first.retry_after == 1.5
        assert ledger.state("k").next_operation is NextOperation.START_ACTION
        assert ledger.open_effects() == []
        far_side.raise_after = None
        second = await _execute(ledger, "k", far_side)
        assert second.status is ActionStatus.SUCCEEDED and not second.replayed
        third = await _execute(ledger, "k", far_side)
        assert third.replayed and third.reused_from_action_id == second.action_id
        assert len(far_side.calls) == 2

    async def test_final_no_effect_replays_the_failure(self, ledger: Ledger) -> None:
        far_side = _CountingAdapter(raise_after=NoEffect("400 bad request", retryable=False))
        first = await _execute(ledger, "k", far_side)
        assert (first.status, first.effect, first.retryable) == (
            ActionStatus.FAILED,
            EffectState.NONE,
            False,
        )
        assert ledger.state("k").next_operation is NextOperation.FIX_INPUTS
        second = await _execute(ledger, "k", far_side)
        assert second.replayed and second.status is ActionStatus.FAILED
        assert second.error == "400 bad request"
        assert len(far_side.calls) == 1

    # 7 -------------------------------------------------------------------------------
    async def test_crash_gap_is_recorded_and_never_acted_again(
        self, ledger_url: str, open_ledger: Callable[..., Ledger], tmp_path: Path
    ) -> None:
        crashed = _after_a_crash(ledger_url, open_ledger, tmp_path, lease=1.5)
        async with crashed as (ledger, far_side):
            state = ledger.state("k")
            if state.next_operation is NextOperation.WAIT:
                with pytest.raises(ActionInProgressError) as busy:
                    await _execute(ledger, "k", far_side)
                assert busy.value.lease_remaining > 0
                assert ledger.events("k")[-1].type == "action.deferred"
                await asyncio.sleep(busy.value.lease_remaining + 0.2)
            result = await _execute(ledger, "k", far_side)
            assert (result.status, result.effect) == (ActionStatus.FAILED, EffectState.UNKNOWN)
            assert result.replayed and result.error_type == "Interrupted"
            again = await _execute(ledger, "k", far_side)
            assert again.replayed and again.effect is EffectState.UNKNOWN
            assert [s.key for s in ledger.open_effects()] == ["k"]

    async def test_a_request_during_the_live_execution_is_deferred(self, ledger: Ledger) -> None:
        release = threading.Event()
        started = threading.Event()

        def slow(req: ActionRequest, ctx: Any) -> str:
            started.set()
            release.wait(10)
            return "slow"

        running = asyncio.create_task(_execute(ledger, "k", slow))
        await asyncio.to_thread(started.wait, 10)
        with pytest.raises(ActionInProgressError) as busy:
            await _execute(ledger, "k")
        assert busy.value.holder_action_id == ledger.state("k").holder_action_id
        assert ledger.events("k")[-1].type == "action.deferred"
        waiting = asyncio.create_task(_execute(ledger, "k", wait=10))
        await asyncio.sleep(0.2)
        assert not waiting.done()
        release.set()
        first, second = await running, await waiting
        assert first.output == "slow" and not first.replayed
        assert second.replayed and second.reused_from_action_id == first.action_id

    async def test_the_lease_is_renewed_while_the_adapter_runs(self, ledger: Ledger) -> None:
        # lease 2s: an adapter running 3s must keep its key the whole time.
        def slow(req: ActionRequest, ctx: Any) -> str:
            time.sleep(3.0)
            return "finished"

        running = asyncio.create_task(_execute(ledger, "k", slow))
        await asyncio.sleep(2.5)
        with pytest.raises(ActionInProgressError):
            await _execute(ledger, "k")
        result = await running
        assert result.status is ActionStatus.SUCCEEDED and not result.replayed

    async def test_a_calls_own_lease_holds_its_key_and_is_renewed(self, ledger: Ledger) -> None:
        # The ledger's lease is 2 s; this call's, 0.6 s, renewed while its adapter runs.
        release = asyncio.Event()

        async def held(req: ActionRequest, ctx: Any) -> str:
            await release.wait()
            return "held"

        running = asyncio.create_task(_execute(ledger, "k", held, lease=0.6))
        await asyncio.sleep(1.2)  # twice the call's lease: alive only if renewed
        with pytest.raises(ActionInProgressError) as busy:
            await _execute(ledger, "k")
        assert 0 < busy.value.lease_remaining <= 0.6
        release.set()
        assert (await running).output == "held"
        for bad in (0, -1.0, float("nan")):
            with pytest.raises(InvalidRequest, match="lease"):
                await _execute(ledger, "other", lease=bad)
        assert ledger.verify().ok

    async def test_a_late_completion_is_kept_while_a_newer_attempt_holds_the_key(
        self, open_ledger: Callable[..., Ledger]
    ) -> None:
        """Attempt A stalls past its lease; B (retry-safe) recovers the key and is still
        running when A reports: A's report is kept as evidence, and A is told the key
        is held. (Their precondition makes both claim the key: a retry-safe call without
        one acts before it records anything and holds no claim.)"""
        lease = 0.6
        a_result: dict[str, Any] = {}

        def size(req: ActionRequest) -> dict[str, int]:
            return {"size": 3}

        def attempt_a() -> None:
            async def stalled(req: ActionRequest, ctx: Any) -> dict[str, bool]:
                time.sleep(lease * 3)  # blocks A's loop: no lease renewal happens
                return {"a": True}

            async def run() -> None:
                async with open_ledger(lease=lease) as a:
                    try:
                        a_result["value"] = await _execute(
                            a,
                            request("k", precondition={"size": 3}),
                            stalled,
                            state=size,
                            retry_safe=True,
                        )
                    except Exception as exc:
                        a_result["error"] = exc

            asyncio.run(run())

        thread = threading.Thread(target=attempt_a)
        thread.start()
        release = threading.Event()

        def held(req: ActionRequest, ctx: Any) -> dict[str, bool]:
            release.wait(10)
            return {"b": True}

        async with open_ledger(lease=lease) as b:
            await asyncio.sleep(lease * 1.5)
            running = asyncio.create_task(
                _execute(
                    b, request("k", precondition={"size": 3}), held, state=size, retry_safe=True
                )
            )
            await asyncio.to_thread(thread.join, 10)
            release.set()
            b_outcome = await running
            events = b.events("k")
            assert b.verify().ok
        assert isinstance(a_result.get("error"), ActionInProgressError), a_result
        late = [e for e in events if e.type == "action.late_completion"]
        assert len(late) == 1 and late[0].payload["output"] == {"a": True}
        assert b_outcome.output == {"b": True} and not b_outcome.replayed

    async def test_a_caller_that_stops_waiting_is_still_resolved(self, ledger: Ledger) -> None:
        release = threading.Event()

        def slow(req: ActionRequest, ctx: Any) -> str:
            release.wait(10)
            return "slow"

        running = asyncio.create_task(_execute(ledger, "k", slow))
        await asyncio.sleep(0.2)
        waiter = request("k")
        waiting = asyncio.create_task(_execute(ledger, waiter, wait=30))
        await asyncio.sleep(0.3)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        release.set()
        await running
        mine = [e for e in ledger.events("k") if e.action_id == waiter.action_id]
        assert [e.type for e in mine] == ["action.requested", "action.deferred"]
        assert ledger.verify().ok

    # 10 ------------------------------------------------------------------------------
    def test_concurrent_processes_cause_one_effect_per_key(
        self, ledger_url: str, open_ledger: Callable[..., Ledger], tmp_path: Path
    ) -> None:
        keys = [f"key-{i:03d}" for i in range(200)]
        effects = tmp_path / "effects.txt"
        with open_ledger():
            pass  # create the schema before the race
        tallies = _run_hammer(ledger_url, keys, effects, processes=8)
        counts = count_effects(effects)
        assert sum(counts.values()) == 200
        assert set(counts) == set(keys) and set(counts.values()) == {1}
        assert sum(t["errors"] for t in tallies) == 0
        assert sum(t["fresh"] for t in tallies) == 200
        assert sum(t["replayed"] + t["deferred"] for t in tallies) == 7 * 200
        with open_ledger() as ledger:
            report = ledger.verify()
            assert report.ok, report.problems

    # 11 ------------------------------------------------------------------------------
    async def test_a_completion_under_a_stale_token_is_only_evidence(
        self, ledger_url: str, open_ledger: Callable[..., Ledger], tmp_path: Path
    ) -> None:
        effects = tmp_path / "effects.txt"
        lease = 1.0
        child = _spawn_hanging_child(ledger_url, "k", effects, lease, forever=False, hang_for=0.5)
        try:
            _wait_for_line(child, "ACTED")
            child.send_signal(signal.SIGSTOP)  # a stalled worker: it cannot renew its lease
            await asyncio.sleep(lease + 0.5)
            async with open_ledger(lease=lease) as ledger:
                taken = await _execute(ledger, "k")
                assert taken.error_type == "Interrupted" and taken.replayed
            child.send_signal(signal.SIGCONT)
            out, _ = child.communicate(timeout=30)
        finally:
            _reap(child)
        assert child.returncode == 0, out
        async with open_ledger(lease=lease) as ledger:
            late = [e for e in ledger.events("k") if e.type == "action.late_completion"]
            assert len(late) == 1
            assert late[0].payload["status"] == "succeeded"
            assert late[0].payload["output"] == {"late": True}
            state = ledger.state("k")
            assert (state.status, state.effect) == (ActionStatus.FAILED, EffectState.UNKNOWN)
            assert ledger.verify().ok
        assert count_effects(effects) == {"k": 1}

    # A resubmission: the same ActionRequest (same action_id) again ----------------------
    async def test_a_deferred_submission_is_answered_once_the_holders_lease_expired(
        self, ledger_url: str, open_ledger: Callable[..., Ledger], tmp_path: Path
    ) -> None:
        """The holder acted and died. A request deferred while its lease was live, submitted
        again (the same action_id) after the lease expired, gets the crash-gap answer
        (failed, effect unknown) like a new submission, and never acts."""
        # A lease long enough to be deferred first, on a slow machine too.
        crashed = _after_a_crash(ledger_url, open_ledger, tmp_path, lease=3.0)
        async with crashed as (ledger, far_side):
            holder = ledger.state("k").holder_action_id
            assert holder is not None
            deferred = request("k")
            with pytest.raises(ActionInProgressError):
                await _execute(ledger, deferred, far_side)
            while ledger.state("k").next_operation is NextOperation.WAIT:
                await asyncio.sleep(0.1)
            answered = await _execute(ledger, deferred, far_side)
            assert (answered.status, answered.effect) == (ActionStatus.FAILED, EffectState.UNKNOWN)
            assert answered.error_type == "Interrupted" and answered.replayed
            assert answered.reused_from_action_id == holder
            assert answered.action_id == deferred.action_id
            again = await _execute(ledger, deferred, far_side)
            assert again == answered
            # The holder's own submission again: its own interruption, not a replay.
            own = await _execute(ledger, request("k", action_id=holder), far_side)
            assert own.action_id == holder and not own.replayed
            assert own.error_type == "Interrupted"

    async def test_the_holders_own_submission_again_settles_its_crash_gap(
        self, ledger_url: str, open_ledger: Callable[..., Ledger], tmp_path: Path
    ) -> None:
        crashed = _after_a_crash(ledger_url, open_ledger, tmp_path, lease=1.5)
        async with crashed as (ledger, far_side):
            holder = ledger.state("k").holder_action_id
            assert holder is not None
            own = request("k", action_id=holder)
            with pytest.raises(ActionInProgressError) as busy:
                await _execute(ledger, own, far_side)
            assert busy.value.holder_action_id == holder
            await asyncio.sleep(busy.value.lease_remaining + 0.2)
            answered = await _execute(ledger, own, far_side)
            assert (answered.status, answered.effect) == (ActionStatus.FAILED, EffectState.UNKNOWN)
            assert answered.error_type == "Interrupted" and not answered.replayed
            completions = [e for e in ledger.events("k") if e.type == "action.completed"]
            assert [e.action_id for e in completions] == [holder]
            later = await _execute(ledger, "k", far_side)
            assert later.replayed and later.reused_from_action_id == holder
