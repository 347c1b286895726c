"""The ledger's behaviour, once for every backend: the recorder contract's test suite.

A backend's test module subclasses :class:`LedgerContract` and says how to open a ledger
of that backend: ``ledger_url``, a URL :meth:`Ledger.open` takes, or ``open_ledger``,
any callable that opens a :class:`Ledger` over the same, at first empty, storage each
time it is called (a third backend is a
:class:`~temporal_ledger.ledger._recorder.Recorder` subclass plus this suite)::

    import pytest
    from temporal_ledger.ledger import Ledger
    from temporal_ledger.ledger.testing import LedgerContract

    class TestMyLedger(LedgerContract):
        @pytest.fixture
        def open_ledger(self):
            store = MyStore()
            return lambda **options: Ledger(MyRecorder(store), **options)

A backend opened by ``open_ledger`` alone skips the tests that start other processes on
the ledger (they need a URL those processes can open); one that gives ``ledger_url``
runs them too.

The suite runs under pytest with pytest-asyncio in ``asyncio_mode = "auto"``; both come
with the ``test`` extra (``pip install 'temporal-ledger[test]'``). Importing
``temporal_ledger.ledger`` never needs them, only importing this module does.
"""

from __future__ import annotations

import asyncio
import functools
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

try:
    import pytest
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        "temporal_ledger.ledger.testing is a pytest suite and needs pytest and "
        "pytest-asyncio: pip install 'temporal-ledger[test]'"
    ) from exc

from temporal_ledger.ledger import (
    ActionInProgressError,
    ActionRequest,
    ActionResult,
    ActionStatus,
    ApprovalRefused,
    Authority,
    IdempotencyConflictError,
    InvalidRequest,
    Ledger,
    NoEffect,
    ReconciliationRefused,
    Verdict,
)

from ._models import ApprovalState, EffectState, FailureType, NextOperation
from ._rule import Answer, Ask, admit
from ._testing_child import AUTHORITY, count_effects, hammer_worker, request

__all__ = ["LedgerContract"]


class _CountingAdapter:
    """A far side that counts the effects it is asked to cause."""

    def __init__(self, output: Any = None, *, raise_after: BaseException | None = None) -> None:
        self.calls: list[Any] = []
        self.output = output if output is not None else {"written": True}
        self.raise_after = raise_after

    def __call__(self, req: ActionRequest, ctx: Any) -> Any:
        self.calls.append(ctx)
        if self.raise_after is not None:
            raise self.raise_after
        return self.output


async def _execute(
    ledger: Ledger, req: ActionRequest | dict[str, Any] | str, adapter: Any = None, **options: Any
) -> ActionResult:
    """``ledger.execute`` under :data:`AUTHORITY`: ``req`` a request, or a key to build the
    suite's request for; ``adapter`` a counting far side unless given."""
    return await ledger.execute(
        request(req) if isinstance(req, str) else req,
        authority=AUTHORITY,
        adapter=_CountingAdapter() if adapter is None else adapter,
        **options,
    )


def _types(ledger: Ledger, key: str) -> list[str]:
    return [e.type for e in ledger.events(key)]


def _approval_state(ledger: Ledger, key: str) -> ApprovalState | None:
    approval = ledger.state(key).approval
    return None if approval is None else approval.state


class LedgerContract:
    """Behaviour every backend must show. Subclasses provide ``ledger_url`` or
    ``open_ledger`` (see the module's docstring)."""

    @pytest.fixture
    def ledger_url(self) -> str:
        """Override: a URL of the backend, at first empty, that ``Ledger.open`` and other
        processes can open. By default the tests that need one are skipped.

        Returns:
            The URL.
        """
        pytest.skip("this backend has no URL that another process could open")

    @pytest.fixture
    def open_ledger(self, ledger_url: str) -> Callable[..., Ledger]:
        """Override, or give ``ledger_url``: ``open_ledger(**options)`` opens a new
        :class:`Ledger` over the test's storage each time it is called.

        Args:
            ledger_url: The backend's URL (the fixture above).

        Returns:
            The opener; its keyword arguments are ``Ledger``'s (``lease=...``).
        """
        return functools.partial(Ledger.open, ledger_url)

    @pytest.fixture
    async def ledger(self, open_ledger: Callable[..., Ledger]) -> AsyncIterator[Ledger]:
        """An open ledger with a 2 second lease, verified again after the test.

        Args:
            open_ledger: The opener (the fixture above).

        Yields:
            The ledger.
        """
        async with open_ledger(lease=2.0) as ledger:
            yield ledger
        # Every ledger a test builds must still verify.
        with open_ledger() as reopened:
            report = reopened.verify()
            assert report.ok, report.problems

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

    @pytest.mark.parametrize(
        "bad",
        [
            float("nan"),
            float("inf"),
            float("-inf"),
            {1, 2},
            b"bytes",
            (1, 2),
            2**60,
            object(),
            "lone \ud800 surrogate",
        ],
        ids=["nan", "inf", "-inf", "set", "bytes", "tuple", "bigint", "object", "surrogate"],
    )
    async def test_values_json_cannot_represent_are_refused(self, ledger: Ledger, bad: Any) -> None:
        with pytest.raises(InvalidRequest):
            await _execute(
                ledger,
                {
                    "key": "k",
                    "capability": "files.append",
                    "instruction": "i",
                    "payload": {"value": bad},
                    "performer": "p",
                },
            )
        with pytest.raises(InvalidRequest):
            request("k", precondition=[bad])
        assert ledger.events() == []

    async def test_a_payload_changed_after_construction_is_checked_again(
        self, ledger: Ledger
    ) -> None:
        req = request("k", payload={"line": "x"})
        req.payload["line"] = float("nan")  # frozen model, mutable dict inside
        with pytest.raises(InvalidRequest, match=r"payload\.line: NaN"):
            await _execute(ledger, req)
        assert ledger.events() == []

    async def test_cyclic_payload_is_refused(self, ledger: Ledger) -> None:
        cyclic: dict[str, Any] = {}
        cyclic["self"] = cyclic
        with pytest.raises(InvalidRequest, match="cyclic"):
            request("k", payload=cyclic)
        listed: list[Any] = []
        listed.append(listed)
        with pytest.raises(InvalidRequest, match="cyclic"):
            await _execute(
                ledger,
                {
                    "key": "k",
                    "capability": "a.b",
                    "instruction": "i",
                    "performer": "p",
                    "payload": {"l": listed},
                },
            )
        assert ledger.events() == []

    @pytest.mark.parametrize(
        "change",
        [
            {"key": ""},
            {"key": "x" * 256},
            {"key": "tab\there"},
            {"capability": "no spaces"},
            {"performer": ""},
            {"payload": [1]},
        ],
        ids=["empty-key", "long-key", "unprintable-key", "capability", "performer", "payload"],
    )
    def test_malformed_fields_are_named(self, change: dict[str, Any]) -> None:
        with pytest.raises(InvalidRequest) as caught:
            request("k", **change)
        assert next(iter(change)) in str(caught.value)

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
        effects = tmp_path / "effects.txt"
        lease = 1.5
        _crash_after_acting(ledger_url, "k", effects, lease)
        far_side = _CountingAdapter()
        async with open_ledger(lease=lease) as ledger:
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
            assert ledger.verify().ok
        assert far_side.calls == []
        assert count_effects(effects) == {"k": 1}

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

    # 8 -------------------------------------------------------------------------------
    async def _unknown(self, ledger: Ledger, key: str) -> _CountingAdapter:
        far_side = _CountingAdapter(raise_after=ConnectionResetError("reset"))
        result = await _execute(ledger, key, far_side)
        assert result.effect is EffectState.UNKNOWN
        return far_side

    async def test_effect_confirmed_returns_the_operators_output(self, ledger: Ledger) -> None:
        far_side = await self._unknown(ledger, "k")
        before = ledger.events("k")
        state = await ledger.reconcile(
            "k",
            Verdict.EFFECT_CONFIRMED,
            actor="ops@example",
            basis="line found in file",
            evidence=["file:/tmp/out.txt#L3"],
            output={"line": 3},
        )
        assert (state.effect, state.status, state.next_operation) == (
            EffectState.OBSERVED,
            ActionStatus.FAILED,
            NextOperation.NONE,
        )
        assert state.reconciliations[0].actor == "ops@example"
        assert ledger.events("k")[: len(before)] == before
        assert ledger.open_effects() == []
        later = await _execute(ledger, "k", far_side)
        assert later.replayed and later.output == {"line": 3}
        assert later.status is ActionStatus.FAILED and later.effect is EffectState.OBSERVED
        assert later.verdict is Verdict.EFFECT_CONFIRMED
        assert len(far_side.calls) == 1

    async def test_no_effect_confirmed_acts_exactly_once_more(self, ledger: Ledger) -> None:
        far_side = await self._unknown(ledger, "k")
        state = await ledger.reconcile("k", "no_effect_confirmed", "ops", "file unchanged")
        assert state.next_operation is NextOperation.START_ACTION
        far_side.raise_after = None
        again = await _execute(ledger, "k", far_side)
        assert again.status is ActionStatus.SUCCEEDED and not again.replayed
        once_more = await _execute(ledger, "k", far_side)
        assert once_more.replayed
        assert len(far_side.calls) == 2

    @pytest.mark.parametrize(
        ("actor", "basis", "evidence", "named"),
        [
            ("YOUR-NAME", "the file has the line", [], "actor"),
            ("you", "the file has the line", [], "actor"),
            ("ops-ann", "WHY", [], "basis"),
            ("ops-ann", "WHAT-YOU-SAW", [], "basis"),
            ("ops-ann", "saw <what you saw>", [], "basis"),
            ("ops-ann", "the file has the line", ["<a link to it>"], "evidence"),
            ("probe:append", "the far side said so", [], "evidence"),
        ],
    )
    async def test_a_verdict_in_nobodys_name_is_refused_and_records_nothing(
        self, ledger: Ledger, actor: str, basis: str, evidence: list[Any], named: str
    ) -> None:
        await self._unknown(ledger, "k")
        before = ledger.events("k")
        with pytest.raises(InvalidRequest, match=named):
            await ledger.reconcile("k", "no_effect_confirmed", actor, basis, evidence=evidence)
        assert ledger.events("k") == before
        assert ledger.state("k").next_operation is NextOperation.RECONCILE_EFFECT

    async def test_an_approval_in_nobodys_name_is_refused_and_records_nothing(
        self, ledger: Ledger
    ) -> None:
        gated = await _execute(ledger, "k", requires_approval=True)
        assert gated.error_type == FailureType.APPROVAL_REQUIRED
        pending = ledger.state("k").approval
        assert pending is not None
        before = ledger.events("k")
        for actor, basis in (("YOUR-NAME", "the refund is right"), ("lead-ann", "WHY")):
            with pytest.raises(InvalidRequest, match="placeholder"):
                await ledger.approve("k", fingerprint=pending.fingerprint, actor=actor, basis=basis)
        assert ledger.events("k") == before
        assert ledger.state("k").approval == pending

    async def test_still_unknown_keeps_the_effect_open(self, ledger: Ledger) -> None:
        far_side = await self._unknown(ledger, "k")
        state = await ledger.reconcile("k", "still_unknown", "ops", "far side unreachable")
        assert state.effect is EffectState.UNKNOWN
        assert state.next_operation is NextOperation.RECONCILE_EFFECT
        assert [s.key for s in ledger.open_effects()] == ["k"]
        replay = await _execute(ledger, "k", far_side)
        assert replay.replayed and len(far_side.calls) == 1

    async def test_effect_confirmed_must_carry_an_output_that_fits_the_recorded_schema(
        self, ledger: Ledger
    ) -> None:
        schema = {
            "title": "Sent",
            "type": "object",
            "properties": {"entry": {"type": "integer"}, "note": {"type": "string"}},
            "required": ["entry"],
        }
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
        state = await ledger.reconcile(
            "k", "effect_confirmed", "ops", "saw it", output={"entry": 2}
        )
        assert state.effect is EffectState.OBSERVED and state.output == {"entry": 2}

    async def test_the_same_submission_again_gets_its_recorded_answer(self, ledger: Ledger) -> None:
        far_side = _CountingAdapter({"line": 1})
        first = await _execute(ledger, request("k", action_id="act-1"), far_side)
        events = ledger.events("k")
        again = await _execute(ledger, request("k", action_id="act-1"), far_side)
        assert again == first and len(far_side.calls) == 1
        assert ledger.events("k") == events  # a resubmission is not a new request
        replay = await _execute(ledger, request("k", action_id="act-2"), far_side)
        replay_again = await _execute(ledger, request("k", action_id="act-2"), far_side)
        assert replay_again == replay and replay.reused_from_action_id == "act-1"
        with pytest.raises(InvalidRequest, match="for a different request"):
            await _execute(
                ledger, request("k", action_id="act-1", payload={"line": "other"}), far_side
            )
        assert len(far_side.calls) == 1

    async def test_reconciling_what_is_not_unknown_is_refused_durably(self, ledger: Ledger) -> None:
        await _execute(ledger, "done")
        for key in ("done", "never-seen"):
            with pytest.raises(ReconciliationRefused) as refused:
                await ledger.reconcile(key, "no_effect_confirmed", "ops", "looked")
            assert refused.value.key == key
            assert ledger.events(key)[-1].type == "action.reconcile_refused"
        assert ledger.state("done").effect is EffectState.OBSERVED
        with pytest.raises(InvalidRequest, match="verdict"):
            await ledger.reconcile("done", "maybe", "ops", "looked")
        with pytest.raises(InvalidRequest, match="actor"):
            await ledger.reconcile("done", "still_unknown", "", "looked")

    # 9 -------------------------------------------------------------------------------
    async def test_precondition_drift_is_refused_before_any_effect(self, ledger: Ledger) -> None:
        far_side = _CountingAdapter()
        result = await _execute(
            ledger, request("k", precondition={"size": 3}), far_side, state=lambda req: {"size": 4}
        )
        assert (result.status, result.effect) == (ActionStatus.FAILED, EffectState.NONE)
        assert result.error_type == "PreconditionDrift"
        assert ledger.state("k").next_operation is NextOperation.FIX_INPUTS
        assert far_side.calls == []
        assert "action.execution_started" not in _types(ledger, "k")

    @pytest.mark.parametrize(
        ("failure", "retryable", "next_operation"),
        [
            (ConnectionRefusedError("state store down"), True, NextOperation.START_ACTION),
            (TypeError("bug in the resolver"), False, NextOperation.FIX_INPUTS),
        ],
        ids=["io-error", "bug"],
    )
    async def test_a_failing_state_resolver_acts_nothing(
        self,
        ledger: Ledger,
        failure: Exception,
        retryable: bool,
        next_operation: NextOperation,
    ) -> None:
        def read_state(req: ActionRequest) -> Any:
            raise failure

        far_side = _CountingAdapter()
        result = await _execute(
            ledger, request("k", precondition={"size": 1}), far_side, state=read_state
        )
        assert (result.status, result.effect, result.retryable) == (
            ActionStatus.FAILED,
            EffectState.NONE,
            retryable,
        )
        assert ledger.state("k").next_operation is next_operation
        assert far_side.calls == []

    async def test_precondition_without_a_resolver_is_refused(self, ledger: Ledger) -> None:
        with pytest.raises(InvalidRequest, match="precondition"):
            await _execute(ledger, request("k", precondition={"size": 3}))
        assert ledger.events() == []

    async def test_replay_does_not_reevaluate_the_precondition(self, ledger: Ledger) -> None:
        world = {"size": 3}
        resolver_calls: list[str] = []

        def read_state(req: ActionRequest) -> dict[str, int]:
            resolver_calls.append(req.key)
            return dict(world)

        def grow(req: ActionRequest, ctx: Any) -> dict[str, int]:
            world["size"] += 1
            return dict(world)

        first = await _execute(
            ledger, request("k", precondition={"size": 3}), grow, state=read_state
        )
        assert first.status is ActionStatus.SUCCEEDED and world == {"size": 4}
        replay = await _execute(
            ledger, request("k", precondition={"size": 3}), grow, state=read_state
        )
        assert replay.replayed and replay.status is ActionStatus.SUCCEEDED
        assert resolver_calls == ["k"] and world == {"size": 4}

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

    # 14 ------------------------------------------------------------------------------
    async def test_an_approved_call_acts_once_and_replays_without_a_new_approval(
        self, ledger: Ledger
    ) -> None:
        far_side = _CountingAdapter()
        waiting = await _execute(ledger, "k", far_side, requires_approval=True)
        assert (waiting.status, waiting.effect) == (ActionStatus.DENIED, EffectState.NONE)
        assert waiting.error_type == FailureType.APPROVAL_REQUIRED and far_side.calls == []
        state = ledger.state("k")
        assert state.next_operation is NextOperation.AWAIT_APPROVAL
        assert state.approval is not None and state.approval.state is ApprovalState.REQUESTED
        assert state.approval.fingerprint == request("k").fingerprint()
        approval = await ledger.approve(
            "k", fingerprint=request("k").fingerprint(), actor="alice", basis="looked right"
        )
        assert approval.state is ApprovalState.APPROVED and approval.actor == "alice"
        first = await _execute(ledger, "k", far_side, requires_approval=True)
        assert first.ok and not first.replayed and len(far_side.calls) == 1
        replay = await _execute(ledger, "k", far_side, requires_approval=True)
        assert replay.replayed and len(far_side.calls) == 1
        started = [e for e in ledger.events("k") if e.type == "action.execution_started"]
        assert [e.payload["approval_id"] for e in started] == [approval.approval_id]
        assert _approval_state(ledger, "k") is ApprovalState.CONSUMED

    async def test_an_approval_holds_only_for_the_exact_request(self, ledger: Ledger) -> None:
        far_side = _CountingAdapter()
        await _execute(ledger, "k", far_side, requires_approval=True)
        approved = request("k").fingerprint()
        changed = request("k", payload={"line": "refund 2000"})
        with pytest.raises(ApprovalRefused, match="fingerprint"):
            await ledger.approve("k", fingerprint=changed.fingerprint(), actor="alice", basis="ok")
        await ledger.approve("k", fingerprint=approved, actor="alice", basis="ok")
        with pytest.raises(IdempotencyConflictError) as conflict:
            await _execute(ledger, changed, far_side, requires_approval=True)
        assert conflict.value.dimensions == ("payload",)
        assert far_side.calls == []
        assert _approval_state(ledger, "k") is ApprovalState.APPROVED
        assert "action.approval_refused" in _types(ledger, "k")

    async def test_a_consumed_approval_does_not_start_a_second_execution(
        self, ledger: Ledger
    ) -> None:
        far_side = _CountingAdapter(raise_after=NoEffect("429 busy", retryable=True))
        await _execute(ledger, "k", far_side, requires_approval=True)
        fingerprint = request("k").fingerprint()
        await ledger.approve("k", fingerprint=fingerprint, actor="alice", basis="ok")
        first = await _execute(ledger, "k", far_side, requires_approval=True)
        assert first.retryable and len(far_side.calls) == 1  # the key may act again...
        again = await _execute(ledger, "k", far_side, requires_approval=True)
        assert again.error_type == FailureType.APPROVAL_REQUIRED  # ...under an approval of its own
        assert ledger.state("k").next_operation is NextOperation.AWAIT_APPROVAL
        assert len(far_side.calls) == 1
        with pytest.raises(ApprovalRefused):
            await ledger.approve("k", fingerprint=fingerprint, actor="agent-1", basis="mine")
        await ledger.approve("k", fingerprint=fingerprint, actor="bob", basis="once more")
        far_side.raise_after = None
        assert (await _execute(ledger, "k", far_side, requires_approval=True)).ok
        assert len(far_side.calls) == 2

    async def test_a_performer_never_approves_its_own_call(self, ledger: Ledger) -> None:
        await _execute(ledger, "k", requires_approval=True)
        with pytest.raises(ApprovalRefused, match="performer"):
            await ledger.approve(
                "k", fingerprint=request("k").fingerprint(), actor="agent-1", basis="trust me"
            )
        refused = [e for e in ledger.events("k") if e.type == "action.approval_refused"]
        assert refused[0].payload["actor"] == "agent-1"
        assert _approval_state(ledger, "k") is ApprovalState.REQUESTED

    async def test_a_rejection_ends_the_call_with_no_effect(self, ledger: Ledger) -> None:
        far_side = _CountingAdapter()
        await _execute(ledger, "k", far_side, requires_approval=True)
        fingerprint = request("k").fingerprint()
        rejection = await ledger.approve(
            "k", fingerprint=fingerprint, actor="alice", basis="too much", decision="reject"
        )
        assert rejection.state is ApprovalState.REJECTED
        again = await _execute(ledger, "k", far_side, requires_approval=True)
        assert (
            again.status is ActionStatus.DENIED
            and again.error_type == FailureType.APPROVAL_REJECTED
        )
        assert "too much" in (again.error or "")
        with pytest.raises(ApprovalRefused, match="already rejected"):
            await ledger.approve("k", fingerprint=fingerprint, actor="bob", basis="fine by me")
        assert far_side.calls == []

    async def test_bad_approval_input_records_nothing(self, ledger: Ledger) -> None:
        await _execute(ledger, "k", requires_approval=True)
        before = ledger.events("k")
        fingerprint = request("k").fingerprint()
        bad_inputs: tuple[dict[str, Any], ...] = (
            dict(fingerprint=fingerprint, actor="", basis="b"),
            dict(fingerprint=fingerprint, actor="a", basis=" "),
            dict(fingerprint="", actor="a", basis="b"),
            dict(fingerprint=fingerprint, actor="a", basis="b", decision="maybe"),
        )
        for bad in bad_inputs:
            with pytest.raises(InvalidRequest):
                await ledger.approve("k", **bad)
        assert ledger.events("k") == before

    async def test_verify_names_an_execution_that_bypassed_its_gate(self, ledger: Ledger) -> None:
        await _execute(ledger, "gated", requires_approval=False)
        assert ledger.verify().ok
        report = ledger.verify(gated=["files.*"])
        assert not report.ok
        assert any("without an approval" in p and "'gated'" in p for p in report.problems)
        assert ledger.verify(gated=["tickets.*"]).ok

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
    async def test_an_output_holding_nul_replays_for_ever(
        self, ledger: Ledger, open_ledger: Callable[..., Ledger]
    ) -> None:
        """A NUL in an output is recorded like any character: the key replays, also after
        the ledger is reopened (no write of the same output is refused later)."""
        output = {"ok": "a\u0000b", "\u0000key": ["\u0000"]}
        far_side = _CountingAdapter(output)
        first = await _execute(ledger, "k", far_side)
        again = await _execute(ledger, "k", far_side)
        assert first.ok and first.output == output
        assert again.replayed and again.output == output
        async with open_ledger() as reopened:
            third = await _execute(reopened, "k", far_side)
        assert third.replayed and third.output == output
        assert len(far_side.calls) == 1
        assert ledger.state("k").output == output

    async def test_nesting_past_the_limit_is_bad_input_naming_it(self, ledger: Ledger) -> None:
        deep: Any = "bottom"
        for _ in range(5000):
            deep = {"a": deep}
        with pytest.raises(InvalidRequest, match=r"nested deeper than 100 arrays and objects"):
            await _execute(ledger, request("k", payload={"deep": deep}))
        with pytest.raises(InvalidRequest, match="payload"):
            request("k", payload={"deep": deep})
        assert ledger.events() == []

    async def test_an_output_that_cannot_be_recorded_is_an_observed_effect(
        self, ledger: Ledger, open_ledger: Callable[..., Ledger]
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
            assert (first.status, first.effect, first.error_type) == (
                ActionStatus.FAILED,
                EffectState.OBSERVED,
                "UnrecordableOutput",
            )
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

    @pytest.mark.parametrize("field", ["instruction", "performer", "action_id"])
    async def test_text_that_cannot_be_recorded_is_refused_before_acting(
        self, ledger: Ledger, field: str
    ) -> None:
        for bad in ("lone \ud800 surrogate", "nul \u0000 inside"):
            if bad.startswith("nul") and field != "action_id":
                continue  # inside JSON a NUL is an escape like any other
            with pytest.raises(InvalidRequest, match=field):
                await _execute(ledger, request("k", **{field: bad}))
        with pytest.raises(InvalidRequest, match="principal"):
            Authority("lone \ud800", ["files.*"])
        with pytest.raises(InvalidRequest, match="actor"):
            await ledger.reconcile("k", "still_unknown", "ops \ud800", "seen")
        assert ledger.events() == []

    async def test_sql_like_text_round_trips_exactly(
        self, ledger: Ledger, open_ledger: Callable[..., Ledger]
    ) -> None:
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
        far_side = _CountingAdapter({"echo": texts})
        first = await _execute(
            ledger,
            request(key, instruction=texts[0], payload=payload, performer=texts[3]),
            far_side,
        )
        assert first.ok and first.output == {"echo": texts}
        async with open_ledger() as reopened:
            again = await _execute(
                reopened,
                request(key, instruction=texts[0], payload=payload, performer=texts[3]),
                far_side,
            )
            requested = reopened.events(key)[0]
        assert again.replayed and again.output == {"echo": texts}
        assert requested.payload["payload"] == payload
        assert requested.payload["instruction"] == texts[0]
        assert len(far_side.calls) == 1
        assert {s.key for s in ledger.open_effects()} == set()
        assert [e.key for e in ledger.events(key)] == [key] * len(ledger.events(key))

    # A resubmission: the same ActionRequest (same action_id) again ----------------------
    async def test_a_deferred_submission_is_answered_once_the_holders_lease_expired(
        self, ledger_url: str, open_ledger: Callable[..., Ledger], tmp_path: Path
    ) -> None:
        """The holder acted and died. A request deferred while its lease was live, submitted
        again (the same action_id) after the lease expired, gets the crash-gap answer
        (failed, effect unknown) like a new submission, and never acts."""
        effects = tmp_path / "effects.txt"
        lease = 3.0  # long enough to be deferred first, on a slow machine too
        _crash_after_acting(ledger_url, "k", effects, lease)
        far_side = _CountingAdapter()
        async with open_ledger(lease=lease) as ledger:
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
            report = ledger.verify()
            assert report.ok, report.problems
        assert far_side.calls == []
        assert count_effects(effects) == {"k": 1}

    async def test_the_holders_own_submission_again_settles_its_crash_gap(
        self, ledger_url: str, open_ledger: Callable[..., Ledger], tmp_path: Path
    ) -> None:
        effects = tmp_path / "effects.txt"
        lease = 1.5
        _crash_after_acting(ledger_url, "k", effects, lease)
        far_side = _CountingAdapter()
        async with open_ledger(lease=lease) as ledger:
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
            report = ledger.verify()
            assert report.ok, report.problems
        assert far_side.calls == []
        assert count_effects(effects) == {"k": 1}


def _crash_after_acting(url: str, key: str, effects: Path, lease: float) -> None:
    """A worker in another process claims ``key``, acts, and is killed before it reports."""
    child = _spawn_hanging_child(url, key, effects, lease, forever=True)
    try:
        _wait_for_line(child, "ACTED")
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
    finally:
        _reap(child)


def _spawn_hanging_child(
    url: str, key: str, effects: Path, lease: float, *, forever: bool, hang_for: float = 0
) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env["HANG_FOREVER" if forever else "HANG_FOR"] = "1" if forever else str(hang_for)
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "temporal_ledger.ledger._testing_child",
            "act-then-hang",
            url,
            key,
            str(effects),
            str(lease),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _wait_for_line(child: subprocess.Popen[str], expected: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    assert child.stdout is not None
    lines = []
    while time.monotonic() < deadline:
        line = child.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line.strip() == expected:
            return
    raise AssertionError(f"child never printed {expected!r}: {''.join(lines)}")


def _reap(child: subprocess.Popen[str]) -> None:
    if child.poll() is None:
        child.send_signal(signal.SIGCONT)
        child.kill()
        child.wait(timeout=10)


def _run_hammer(
    url: str, keys: list[str], effects: Path, *, processes: int
) -> list[dict[str, int]]:
    """Start ``processes`` workers together on ``keys``; return their tallies."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(processes)
    results = ctx.Queue()
    workers = [
        ctx.Process(target=hammer_worker, args=(url, keys, str(effects), barrier, results, seed))
        for seed in range(processes)
    ]
    for worker in workers:
        worker.start()
    try:
        tallies = [results.get(timeout=300) for _ in workers]
    finally:
        for worker in workers:
            worker.join(timeout=30)
            if worker.is_alive():
                worker.kill()
    return tallies
