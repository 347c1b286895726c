"""The contract suite, second part: effects that fail, may repeat, crash or race. The
outcomes that free a key, leases, late completions, other processes on the same keys."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from ._errors import ActionInProgressError, IdempotencyConflictError, InvalidRequest, NoEffect
from ._ledger import Ledger
from ._models import ActionRequest, ActionResult, EffectState, NextOperation
from ._testing_child import Opener, _CountingAdapter, _execute, _run_hammer, acting_child, request


class EffectContract:
    """Effects that fail, may repeat, crash or race (mixed into ``LedgerContract``)."""

    # 5, 6 ----------------------------------------------------------------------------
    # retry_safe: declared on neither call, on both, or on the second ("later") only.
    @pytest.mark.parametrize(
        ("failure", "retry_safe", "error", "next_operation"),
        [
            (ConnectionError("lost"), "never", "ConnectionError: lost", "reconcile_effect"),
            (TimeoutError("no answer"), "always", "TimeoutError: no answer", "reconcile_effect"),
            (TimeoutError("no answer"), "later", "TimeoutError: no answer", "reconcile_effect"),
            (NoEffect("busy", retryable=True, retry_after=1.5), "never", "busy", "start_action"),
            (NoEffect("bad request", retryable=False), "never", "bad request", "fix_inputs"),
        ],
        ids=["unknown", "retry-safe", "retry-safe-later", "no-effect-retryable", "no-effect-final"],
    )
    async def test_a_failed_call_replays_its_failure_or_acts_again(
        self, ledger: Ledger, failure: Exception, retry_safe: str, error: str, next_operation: str
    ) -> None:
        """An unknown effect replays; a retry-safe tool acts again, but a caller cannot
        declare an unguarded unknown effect retry-safe later. ``NoEffect`` frees the key
        when retryable, and else replays."""
        first_safe, then_safe = retry_safe == "always", retry_safe != "never"
        far_side = _CountingAdapter(raise_after=failure)
        first = await _execute(ledger, "k", far_side, retry_safe=first_safe)
        no_effect = isinstance(failure, NoEffect)
        effect = EffectState.NONE if no_effect else EffectState.UNKNOWN
        assert (first.status, first.effect, first.error) == ("failed", effect, error)
        retry = (getattr(failure, "retryable", False), getattr(failure, "retry_after", None))
        assert (first.retryable, first.retry_after) == retry
        assert ledger.state("k").next_operation is NextOperation(next_operation)
        assert [s.key for s in ledger.open_effects()] == ([] if no_effect else ["k"])
        far_side.raise_after = None
        again = await _execute(ledger, "k", far_side, retry_safe=then_safe)
        acts_again = next_operation == "start_action" or first_safe
        assert again.replayed is not acts_again
        if acts_again:
            assert again.status == "succeeded"
            third = await _execute(ledger, "k", far_side, retry_safe=then_safe)
            assert third.replayed and third.reused_from_action_id == again.action_id
        else:
            assert (again.status, again.effect, again.error) == (first.status, effect, error)
            assert again.reused_from_action_id == first.action_id
        assert [c.key for c in far_side.calls] == ["k"] * (1 + acts_again)
        if first_safe:  # retry-safe calls act before they record anything: no claim, no token
            assert [c.fencing_token for c in far_side.calls] == [0, 0]

    async def test_a_retry_safe_call_writes_once(self, ledger: Ledger, open_ledger: Opener) -> None:
        """It records its request and outcome in one write. The same submission sent
        again to a process that never saw the key (its worker died after the commit,
        before it answered) gets that outcome."""
        req = request("k")
        first = await _execute(ledger, req, _CountingAdapter({"n": 1}), retry_safe=True)
        assert first.output == {"n": 1} and not first.replayed
        # No claim and no started marker: the request and its outcome, written together.
        assert [e.type for e in ledger.events("k")] == ["action.requested", "action.completed"]
        assert len({e.recorded_at for e in ledger.events("k")}) == 1
        async with open_ledger() as reopened:
            # Busy with other keys, as a worker is: a backend may then expect a key it
            # has not met to be vacant, act, and learn otherwise from its write.
            await _execute(reopened, "other", retry_safe=True)
            again = await _execute(reopened, req, _CountingAdapter({"n": 2}), retry_safe=True)
        far_side = _CountingAdapter({"n": 3})
        assert again.output == {"n": 1} and again.action_id == first.action_id
        replay = await _execute(ledger, "k", far_side, retry_safe=True)
        assert replay.replayed and replay.output == {"n": 1}
        assert ledger.state("k").output == {"n": 1} and far_side.calls == []

    async def test_of_two_retry_safe_attempts_the_first_recorded_wins(self, ledger: Ledger) -> None:
        """Both may act; what the later one did is kept as evidence, not as the outcome."""
        both_acting = asyncio.Barrier(2)

        async def quick(req: ActionRequest, ctx: Any) -> dict[str, str]:
            await both_acting.wait()
            return {"by": "quick"}

        async def slow(req: ActionRequest, ctx: Any) -> dict[str, str]:
            await both_acting.wait()
            while ledger.state("k").output is None:  # until the quick one is recorded
                await asyncio.sleep(0.01)
            return {"by": "slow"}

        attempts = (_execute(ledger, "k", adapter, retry_safe=True) for adapter in (slow, quick))
        slow_result, quick_result = await asyncio.gather(*attempts)
        assert quick_result.output == {"by": "quick"} and not quick_result.replayed
        assert slow_result.replayed and slow_result.output == {"by": "quick"}
        assert slow_result.reused_from_action_id == quick_result.action_id
        late = [e for e in ledger.events("k") if e.type == "action.late_completion"]
        assert [(e.action_id, e.payload["output"]) for e in late] == [
            (slow_result.action_id, {"by": "slow"})
        ]
        assert ledger.state("k").output == {"by": "quick"}

    # 7 -------------------------------------------------------------------------------
    @pytest.mark.parametrize("first_back", ["holder", "deferred", "new"])
    async def test_crash_gap_is_recorded_and_never_acted_again(
        self, ledger_url: str, open_ledger: Opener, tmp_path: Path, first_back: str
    ) -> None:
        """The holder acted and died. While its lease is live, a request (or its own
        submission again) is deferred; once it expired, the first back settles the gap
        (failed, effect unknown): the holder's own submission as its interruption,
        another (the deferred one again, or a new one) as a replay of it. Nothing acts."""
        lease = 3.0  # long enough to be deferred first, on a slow machine too
        with acting_child(ledger_url, "k", tmp_path / "effects.txt", lease=lease):
            pass  # killed once it acted, before it reported
        far_side = _CountingAdapter()
        async with open_ledger(lease=lease) as ledger:
            holder = ledger.state("k").holder_action_id
            assert holder is not None
            own = request("k", action_id=holder)
            deferred = own if first_back == "holder" else request("k")
            with pytest.raises(ActionInProgressError) as busy:
                await _execute(ledger, deferred, far_side)
            assert busy.value.holder_action_id == holder and busy.value.lease_remaining > 0
            if deferred is not own:
                assert ledger.events("k")[-1].type == "action.deferred"
            while ledger.state("k").next_operation is NextOperation.WAIT:
                await asyncio.sleep(0.1)
            back = {"holder": own, "deferred": deferred, "new": request("k")}[first_back]
            answered = await _execute(ledger, back, far_side)
            assert (answered.status, answered.effect) == ("failed", EffectState.UNKNOWN)
            assert answered.error_type == "Interrupted" and answered.action_id == back.action_id
            assert await _execute(ledger, back, far_side) == answered
            if back is own:
                assert not answered.replayed
                completions = [e for e in ledger.events("k") if e.type == "action.completed"]
                assert [e.action_id for e in completions] == [holder]
            else:
                assert answered.replayed and answered.reused_from_action_id == holder
                # The holder's own submission again: its own interruption, not a replay.
                mine = await _execute(ledger, own, far_side)
                assert mine.action_id == holder and not mine.replayed
                assert mine.error_type == "Interrupted"
            later = await _execute(ledger, "k", far_side)
            assert later.replayed and later.reused_from_action_id == holder
            assert later.effect is EffectState.UNKNOWN
            assert [s.key for s in ledger.open_effects()] == ["k"]
            assert (report := ledger.verify()).ok, report.problems
        assert far_side.calls == []

    async def test_a_request_during_the_live_execution_is_deferred(self, ledger: Ledger) -> None:
        """A request is deferred, or waits for the outcome; one that stops waiting stays
        recorded as deferred. A retry-safe call does not act on the held key either."""
        release, started = threading.Event(), threading.Event()

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
        far_side = _CountingAdapter()
        with pytest.raises(ActionInProgressError):
            await _execute(ledger, "k", far_side, retry_safe=True)
        with pytest.raises(IdempotencyConflictError):
            await _execute(ledger, request("k", payload={"n": 2}), far_side, retry_safe=True)
        waiting = asyncio.create_task(_execute(ledger, "k", wait=10))
        quitter = request("k")
        quitting = asyncio.create_task(_execute(ledger, quitter, wait=30))
        await asyncio.sleep(0.3)
        assert not waiting.done()
        quitting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await quitting
        release.set()
        first, second = await running, await waiting
        assert first.output == "slow" and not first.replayed
        assert second.replayed and second.reused_from_action_id == first.action_id
        quitted = [e.type for e in ledger.events("k") if e.action_id == quitter.action_id]
        assert quitted == ["action.requested", "action.deferred"]
        replayed = await _execute(ledger, "k", far_side, retry_safe=True)
        assert replayed.replayed and replayed.output == "slow" and far_side.calls == []

    async def test_leases_are_renewed(self, ledger: Ledger, open_ledger: Opener) -> None:
        """The ledger's lease (0.6 s on one ledger) and a call's own (0.6 s on the 2 s
        ledger) hold the key while a sync or an async adapter runs past them."""
        release = threading.Event()

        def held(req: ActionRequest, ctx: Any) -> str:
            release.wait(10)
            return "held"

        async def held_async(req: ActionRequest, ctx: Any) -> str:
            return await asyncio.to_thread(held, req, ctx)

        async with open_ledger(lease=0.6) as short:
            running = [
                asyncio.create_task(_execute(short, "k", held)),
                asyncio.create_task(_execute(ledger, "own", held_async, lease=0.6)),
            ]
            await asyncio.sleep(1.2)  # twice the leases: alive only if renewed
            for key in ("k", "own"):
                with pytest.raises(ActionInProgressError) as busy:
                    await _execute(ledger, key)
                assert 0 < busy.value.lease_remaining <= 0.6
            release.set()
            for result in await asyncio.gather(*running):
                assert result.status == "succeeded" and not result.replayed
                assert result.output == "held"
        for bad in (0, -1.0, float("nan")):
            with pytest.raises(InvalidRequest, match="lease"):
                await _execute(ledger, "other", lease=bad)

    async def test_a_late_completion_is_kept_while_a_newer_attempt_holds_the_key(
        self, open_ledger: Opener
    ) -> None:
        """Attempt A stalls past its lease; B (retry-safe) recovers the key and is still
        running when A reports: A's report is kept as evidence, and A is told the key
        is held. (Their precondition makes both claim the key: a retry-safe call without
        one acts before it records anything and holds no claim.)"""
        lease = 0.6
        release = asyncio.Event()

        async def stalled(req: ActionRequest, ctx: Any) -> dict[str, bool]:
            time.sleep(lease * 3)  # blocks A's loop: no lease renewal happens
            return {"a": True}

        async def held(req: ActionRequest, ctx: Any) -> dict[str, bool]:
            await release.wait()
            return {"b": True}

        async def attempt(ledger: Ledger, adapter: Any) -> ActionResult:
            req = request("k", precondition={"size": 3})
            size = {"size": 3}
            return await _execute(ledger, req, adapter, state=lambda _: size, retry_safe=True)

        async def attempt_a() -> None:  # on a loop of its own, in another thread
            async with open_ledger(lease=lease) as a:
                with pytest.raises(ActionInProgressError):
                    await attempt(a, stalled)

        a_done = asyncio.create_task(asyncio.to_thread(asyncio.run, attempt_a()))
        async with open_ledger(lease=lease) as b:
            await asyncio.sleep(lease * 1.5)
            b_running = asyncio.create_task(attempt(b, held))
            await a_done
            release.set()
            b_outcome = await b_running
            late = [e for e in b.events("k") if e.type == "action.late_completion"]
            assert b.verify().ok
        assert len(late) == 1 and late[0].payload["output"] == {"a": True}
        assert b_outcome.output == {"b": True} and not b_outcome.replayed

    # 10 ------------------------------------------------------------------------------
    def test_concurrent_processes_cause_one_effect_per_key(
        self, ledger_url: str, open_ledger: Opener, tmp_path: Path
    ) -> None:
        keys = [f"key-{i:03d}" for i in range(200)]
        with open_ledger():
            pass  # create the schema before the race
        tallies, effects = _run_hammer(ledger_url, keys, tmp_path / "effects.txt", processes=8)
        assert effects == dict.fromkeys(keys, 1)
        assert sum(t["errors"] for t in tallies) == 0
        assert sum(t["fresh"] for t in tallies) == 200
        assert sum(t["replayed"] + t["deferred"] for t in tallies) == 7 * 200
        with open_ledger() as ledger:
            assert (report := ledger.verify()).ok, report.problems

    # 11 ------------------------------------------------------------------------------
    async def test_a_completion_under_a_stale_token_is_only_evidence(
        self, ledger_url: str, open_ledger: Opener, tmp_path: Path
    ) -> None:
        lease = 1.0
        with acting_child(ledger_url, "k", tmp_path / "e.txt", lease=lease, hang_for=0.5) as child:
            assert child.pid is not None
            os.kill(child.pid, signal.SIGSTOP)  # a stalled worker: it cannot renew its lease
            await asyncio.sleep(lease + 0.5)
            async with open_ledger(lease=lease) as ledger:
                taken = await _execute(ledger, "k")
                assert taken.error_type == "Interrupted" and taken.replayed
            os.kill(child.pid, signal.SIGCONT)
            child.join(30)
            assert child.exitcode == 0
        async with open_ledger(lease=lease) as ledger:
            late = [e for e in ledger.events("k") if e.type == "action.late_completion"]
            assert [e.payload["output"] for e in late] == [{"late": True}]
            assert late[0].payload["status"] == "succeeded"
            state = ledger.state("k")
            assert (state.status, state.effect) == ("failed", EffectState.UNKNOWN)
            assert ledger.verify().ok
