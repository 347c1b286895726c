"""The pure decision (``ledger._rule``) against a reference model of the rule.

Random sequences of requests (same or different operation, authorised or not, retry-safe
or not, each ending in success, a no-effect failure, an exception after acting, or a
crash that never reports), lease expiries and operators' verdicts run through the rule's
transition functions on an in-memory store, with no I/O and a clock the test moves. A
small model written from the design's wording predicts every answer; they must agree, and
no sequence may make a key act more often than the outcomes that free it allow.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from temporal_ledger.ledger import (
    ActionRequest,
    ActionResult,
    Authority,
    DecisionRefused,
    IdempotencyConflictError,
)
from temporal_ledger.ledger._answers import failure_fields, success_fields
from temporal_ledger.ledger._completion import complete
from temporal_ledger.ledger._decisions import decide_approval, reconcile_key
from temporal_ledger.ledger._models import (
    VERDICTS,
    ActionStatus,
    Decision,
    EffectState,
    FailureType,
    Verdict,
    may_act_again,
)
from temporal_ledger.ledger._rule import Ask, Busy, Claimed, admit
from temporal_ledger.ledger._transaction import KeyRecord, PendingEvent, Transaction

LEASE = 10.0
KEYS = ("a", "b")
KINDS = ("success", "no_effect_retryable", "no_effect_final", "raised", "crash")


class Sketch(Transaction):
    """A transaction that only collects what the rule writes (``appended``, ``saved``)."""

    def __init__(self, key: str, record: KeyRecord | None, now: float) -> None:
        super().__init__(key, record, now)
        self.appended: list[PendingEvent] = []
        self.saved: KeyRecord | None = None

    def insert_event(self, event: PendingEvent) -> None:
        self.appended.append(event)

    def write_record(self, record: KeyRecord, *, created: bool) -> None:
        self.saved = record

    def compact_bodies(self) -> int:
        raise NotImplementedError("a sketch compacts nothing")


class MemoryStore:
    """Records and events in dictionaries: a transaction commits only if ``fn`` returns."""

    def __init__(self) -> None:
        self.records: dict[str, KeyRecord] = {}
        self.events: list[PendingEvent] = []

    def transact(self, key: str, now: float, fn: Any) -> Any:
        stored = self.records.get(key)
        tx = Sketch(key, KeyRecord.from_json(stored.to_json()) if stored else None, now)
        result = fn(tx)
        self.events += tx.appended
        if tx.saved is not None:
            self.records[key] = KeyRecord.from_json(tx.saved.to_json())
        return result


@dataclasses.dataclass
class ModelKey:
    """What the design says a key holds."""

    fingerprint: str
    running_until: float | None = None  # a started attempt that has not reported
    attempt_retry_safe: bool = False
    status: ActionStatus | None = None
    effect: EffectState | None = None
    retryable: bool = False


@dataclasses.dataclass
class Model:
    keys: dict[str, ModelKey] = dataclasses.field(default_factory=dict)
    executions: dict[str, int] = dataclasses.field(default_factory=dict)
    freed: dict[str, int] = dataclasses.field(default_factory=dict)

    def settle_expired(self, key: str, now: float) -> None:
        held = self.keys.get(key)
        if held is not None and held.running_until is not None and held.running_until <= now:
            held.running_until = None
            held.status, held.effect, held.retryable = (
                "failed",
                EffectState.UNKNOWN,
                False,
            )

    def submit(
        self, key: str, fingerprint: str, *, allowed: bool, retry_safe: bool, now: float
    ) -> str:
        if not allowed:
            return "denied"
        held = self.keys.get(key)
        if held is None:
            return "act"
        if held.fingerprint != fingerprint:
            return "conflict"
        if held.running_until is not None and held.running_until > now:
            return "busy"
        self.settle_expired(key, now)
        assert held.status is not None and held.effect is not None
        if may_act_again(
            status=held.status,
            effect=held.effect,
            retryable=held.retryable,
            retry_safe=retry_safe and held.attempt_retry_safe,
        ):
            self.freed[key] = self.freed.get(key, 0) + 1
            return "act"
        return "replay"

    def acted(self, key: str, fingerprint: str, kind: str, *, retry_safe: bool, now: float) -> None:
        self.executions[key] = self.executions.get(key, 0) + 1
        held = self.keys.setdefault(key, ModelKey(fingerprint=fingerprint))
        held.attempt_retry_safe = retry_safe
        held.running_until = None
        held.retryable = kind == "no_effect_retryable"
        if kind == "crash":
            held.running_until = now + LEASE
            held.status = held.effect = None
        elif kind == "success":
            held.status, held.effect = "succeeded", EffectState.OBSERVED
        elif kind.startswith("no_effect"):
            held.status, held.effect = "failed", EffectState.NONE
        else:
            held.status, held.effect = "failed", EffectState.UNKNOWN

    def reconcile(self, key: str, verdict: Verdict, now: float) -> str:
        held = self.keys.get(key)
        if held is None or (held.running_until is not None and held.running_until > now):
            return "refused"
        self.settle_expired(key, now)
        if held.effect is not EffectState.UNKNOWN:
            return "refused"
        if verdict == "effect_confirmed":
            held.effect = EffectState.OBSERVED
        elif verdict == "no_effect_confirmed":
            held.effect, held.retryable = EffectState.NONE, True
        return "recorded"


operations = st.lists(
    st.one_of(
        st.tuples(
            st.just("submit"),
            st.sampled_from(KEYS),
            st.sampled_from(("x", "y")),  # the operation: same or different under a key
            st.booleans(),  # authorised
            st.booleans(),  # retry-safe
            st.sampled_from(KINDS),
        ),
        st.tuples(st.just("wait"), st.sampled_from((1.0, LEASE + 1.0))),
        st.tuples(st.just("reconcile"), st.sampled_from(KEYS), st.sampled_from(VERDICTS)),
    ),
    max_size=30,
)


def request(key: str, variant: str) -> ActionRequest:
    return ActionRequest(
        key=key,
        capability="files.append",
        instruction="append one line",
        payload={"line": variant},
        performer="agent",
    )


@settings(max_examples=300, deadline=None)
@given(operations)
def test_the_rule_agrees_with_the_model_and_never_acts_twice_unfreed(ops: list[tuple]) -> None:
    store, model, now = MemoryStore(), Model(), 1_000.0
    for op in ops:
        if op[0] == "wait":
            now += op[1]
            continue
        if op[0] == "reconcile":
            _, key, verdict = op
            expected = model.reconcile(key, verdict, now)
            refused = store.transact(
                key,
                now,
                functools.partial(
                    reconcile_key, verdict=verdict, actor="ops", basis="looked", evidence=[],
                    output=None,
                ),
            )  # fmt: skip
            got = "recorded" if refused is None else "refused"
            assert got == expected, (op, expected, got)
            continue
        _, key, variant, allowed, retry_safe, kind = op
        ask = Ask.of(
            request(key, variant),
            Authority("agent", ["files.*"] if allowed else []),
            retry_safe=retry_safe,
            lease=LEASE,
        )
        fingerprint = ask.fingerprint
        expected = model.submit(key, fingerprint, allowed=allowed, retry_safe=retry_safe, now=now)
        decision = store.transact(
            key, now, functools.partial(admit, ask=ask, first=True, give_up=True)
        )
        if isinstance(decision, ActionResult):
            got = "denied" if decision.status == "denied" else "replay"
            if got == "replay":
                held = model.keys[key]
                assert (decision.status, decision.effect) == (
                    held.status,
                    held.effect,
                ), op
        elif isinstance(decision, IdempotencyConflictError):
            got = "conflict"
        elif isinstance(decision, Busy):
            got = "busy"
        else:
            assert isinstance(decision, Claimed)
            got = "act"
        assert got == expected, (op, expected, got)
        if got != "act":
            continue
        model.acted(key, fingerprint, kind, retry_safe=retry_safe, now=now)
        if kind == "crash":
            continue  # the worker died after its started marker: nothing reports
        fields = (
            success_fields({"ok": True})
            if kind == "success"
            else failure_fields(ConnectionResetError("lost"))
            if kind == "raised"
            else {
                "status": "failed",
                "effect": EffectState.NONE,
                "error": "refused",
                "error_type": "NoEffect",
                "retryable": kind == "no_effect_retryable",
                "retry_after": None,
            }
        )
        assert isinstance(decision, Claimed)
        result = store.transact(
            key,
            now,
            functools.partial(
                complete, action_id=ask.request.action_id, token=decision.token, fields=fields
            ),
        )  # fmt: skip
        held = model.keys[key]
        assert (result.status, result.effect) == (held.status, held.effect), op
    for key, count in model.executions.items():
        # A key acts once, and once more only for each outcome that freed it.
        assert count <= 1 + model.freed.get(key, 0)
    started = [e for e in store.events if e.type == "action.execution_started"]
    assert len(started) == sum(model.executions.values())
    tokens = [(e.key, e.payload["token"]) for e in started]
    assert len(tokens) == len(set(tokens))  # at most one execution per fencing token


@dataclasses.dataclass
class GatedKey:
    """What the design says a key that needs approval holds."""

    fingerprint: str  # bound by the first authorised request
    approval: str = "requested"  # requested, approved, rejected, consumed
    approved_fingerprint: str = ""
    decided_by: str = ""
    final: bool = False  # a final outcome: replays from now on


gated_operations = st.lists(
    st.one_of(
        st.tuples(
            st.just("submit"),
            st.sampled_from(KEYS),
            st.sampled_from(("x", "y")),
            st.booleans(),  # authorised
            st.sampled_from(("success", "no_effect_retryable")),
        ),
        st.tuples(
            st.just("decide"),
            st.sampled_from(KEYS),
            st.sampled_from(("x", "y")),  # the request the decision names
            st.sampled_from(("lead", "other-lead", "agent")),  # "agent" is the performer
            st.sampled_from(list(Decision)),
        ),
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(gated_operations)
def test_a_gated_key_acts_only_under_a_fresh_approval_of_its_exact_request(
    ops: list[tuple],
) -> None:
    store, now = MemoryStore(), 1_000.0
    model: dict[str, GatedKey] = {}
    approvals: dict[str, int] = {}
    executions: dict[str, int] = {}
    for op in ops:
        now += 1.0
        if op[0] == "decide":
            _, key, variant, actor, decision = op
            fingerprint = request(key, variant).fingerprint()
            held = model.get(key)
            decided = "approved" if decision is Decision.APPROVE else "rejected"
            if held is None or held.fingerprint != fingerprint or actor == "agent":
                expected = "refused"
            elif held.approval == decided and held.decided_by == actor:
                expected = "recorded"  # the same decision again: answered, nothing new
            elif held.approval != "requested":
                expected = "refused"
            else:
                expected = "recorded"
                held.approval, held.decided_by = decided, actor
                held.approved_fingerprint = fingerprint
                approvals[key] = approvals.get(key, 0) + (decision is Decision.APPROVE)
            answer = store.transact(
                key,
                now,
                functools.partial(
                    decide_approval, fingerprint=fingerprint, decision=decision, actor=actor,
                    basis="looked", approval_id=f"ap-{now}",
                ),
            )  # fmt: skip
            got = "refused" if isinstance(answer, DecisionRefused) else "recorded"
            assert got == expected, (op, answer)
            continue
        _, key, variant, allowed, kind = op
        ask = Ask.of(
            request(key, variant),
            Authority("agent", ["files.*"] if allowed else []),
            lease=LEASE,
            requires_approval=True,
        )
        fingerprint = ask.fingerprint
        held = model.get(key)
        if not allowed:
            expected = "denied"
        elif held is not None and held.fingerprint != fingerprint:
            expected = "conflict"
        elif held is not None and held.final:
            expected = "replay"
        elif held is not None and held.approval == "approved":
            expected = "act"
        elif held is not None and held.approval == "rejected":
            expected = "rejected"
        else:
            expected = "awaiting"
            model.setdefault(key, GatedKey(fingerprint=fingerprint)).approval = "requested"
        decision = store.transact(
            key, now, functools.partial(admit, ask=ask, first=True, give_up=True)
        )
        if isinstance(decision, ActionResult):
            got = {
                FailureType.APPROVAL_REQUIRED: "awaiting",
                FailureType.APPROVAL_REJECTED: "rejected",
                "Denied": "denied",
            }.get(decision.error_type or "", "replay")
        elif isinstance(decision, IdempotencyConflictError):
            got = "conflict"
        else:
            assert isinstance(decision, Claimed)
            got = "act"
        assert got == expected, (op, expected, got)
        if got != "act":
            continue
        held = model[key]
        held.approval = "consumed"
        held.final = kind == "success"
        executions[key] = executions.get(key, 0) + 1
        fields = (
            success_fields({"ok": True})
            if kind == "success"
            else {
                "status": "failed",
                "effect": EffectState.NONE,
                "error": "busy",
                "error_type": "NoEffect",
                "retryable": True,
                "retry_after": None,
            }
        )
        assert isinstance(decision, Claimed)
        store.transact(
            key,
            now,
            functools.partial(
                complete, action_id=ask.request.action_id, token=decision.token, fields=fields
            ),
        )  # fmt: skip
    for key, count in executions.items():
        assert count <= approvals.get(key, 0)  # every execution took an approval of its own
    started = [e for e in store.events if e.type == "action.execution_started"]
    used = [e.payload["approval_id"] for e in started]
    assert len(used) == len(set(used)) == sum(executions.values())
    approved = {
        e.payload["approval_id"]: e.payload["fingerprint"]
        for e in store.events
        if e.type == "action.approved"
    }
    requested = {
        e.action_id: e.payload["fingerprint"] for e in store.events if e.type == "action.requested"
    }
    for event in started:
        assert approved[event.payload["approval_id"]] == requested[event.action_id]
