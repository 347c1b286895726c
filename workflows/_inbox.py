"""The operator inbox of a run: calls that wait for a person, and what people send them.

A call waits here for one of two reasons: its effect is unknown (it is *parked* until an
operator's verdict, update or signal ``reconcile``), or it needs a person's approval
(update ``approve``). Both are one mechanism: check the input against what waits, queue
it, record it in the ledger through an activity, answer the sender with what the ledger
recorded or why it refused. ``run_tool`` steps and the activities of other libraries
that the plugin ledgers wait here alike. Deterministic and sandbox-safe.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import json
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from pydantic import ValidationError
from temporalio import workflow
from temporalio.common import SearchAttributeKey
from temporalio.exceptions import ActivityError, ApplicationError

from ..ledger._seam import Decision, Signers
from . import _render
from ._protocol import (
    APPROVE_ACTIVITY,
    APPROVE_UPDATE,
    AWAITING_APPROVAL_ATTRIBUTE,
    OPEN_EFFECTS_ATTRIBUTE,
    QUERY_APPROVALS,
    QUERY_OPEN,
    QUERY_REJECTED,
    RECONCILE_ACTIVITY,
    RECONCILE_SIGNAL,
    RECONCILE_UPDATE,
    ApprovalNeeded,
    ApproveInput,
    ApproveResult,
    ErrorType,
    ReconcileInput,
    ReconcileResult,
    UnknownEffect,
)
from ._render import Call, OpenEffect, PendingApproval, Rejection
from ._scheduling import Kind, LedgerOptions, scheduling, start_own_activity

try:
    from opentelemetry import trace
except ImportError:  # the [otel] extra is not installed
    trace = None  # type: ignore[assignment]  # no [otel]: None, checked before use

#: The activity that records each kind of input, its result, and its error type for a
#: call that somebody settled elsewhere first.
_RECORDING: dict[str, tuple[str, Any, ErrorType]] = {
    "reconcile": (RECONCILE_ACTIVITY, ReconcileResult, ErrorType.RECONCILE_ALREADY_RESOLVED),
    "approve": (APPROVE_ACTIVITY, ApproveResult, ErrorType.APPROVE_ALREADY_DECIDED),
}
#: What a span event calls a recorded input of each kind (see :func:`decided`).
_SPAN_EVENT = {"reconcile": "verdict", "approve": "approval"}
InT = TypeVar("InT", ReconcileInput, ApproveInput)
ResultT = TypeVar("ResultT", ReconcileResult, ApproveResult)


@dataclasses.dataclass
class _Pending(Generic[InT, ResultT]):
    """An operator's input waiting to be recorded, and what the ledger answered."""

    given: InT
    done: bool = False
    error: str | None = None
    result: ResultT | None = None


class Inbox:
    """Per-run state of waiting calls, held by the plugin's workflow interceptor for its run.

    Args:
        options: The plugin's options: how the activities that record answers and ask
            probes are scheduled.
    """

    def __init__(self, options: LedgerOptions) -> None:
        self.options = options
        self._installed = False
        self.open: dict[str, OpenEffect] = {}
        self.calls: dict[str, Call] = {}
        self.verdicts: dict[str, list[_Pending[ReconcileInput, ReconcileResult]]] = {}
        self.rejections: list[Rejection] = []
        #: The namespace has the search attribute (as the tool's worker found).
        self.listed = False
        self.approvals: dict[str, PendingApproval] = {}
        self.decisions: dict[str, list[_Pending[ApproveInput, ApproveResult]]] = {}
        self.approvals_listed = False

    # -- handlers (registered dynamically, so any workflow can use them) ---------------

    def install(self) -> None:
        """Register the queries, signal and updates (once)."""
        if not self._installed:
            self._installed = True
            workflow.set_query_handler(QUERY_OPEN, lambda: list(self.open.values()))
            workflow.set_query_handler(QUERY_REJECTED, lambda: list(self.rejections))
            workflow.set_signal_handler(RECONCILE_SIGNAL, self.on_signal)
            _update(
                RECONCILE_UPDATE, self.check_verdict, self.verdicts, ErrorType.RECONCILE_REJECTED
            )
            workflow.set_query_handler(QUERY_APPROVALS, lambda: list(self.approvals.values()))
            _update(APPROVE_UPDATE, self.check_decision, self.decisions, ErrorType.APPROVE_REJECTED)

    def install_at_start(self) -> None:
        """Register the handlers as the run starts, so that they answer before any tool
        runs, unless the workflow defines one of these names itself: it keeps its own
        until its first ledgered call (which needs them)."""
        queries = map(workflow.get_query_handler, (QUERY_OPEN, QUERY_REJECTED, QUERY_APPROVALS))
        updates = map(workflow.get_update_handler, (RECONCILE_UPDATE, APPROVE_UPDATE))
        if not any([*queries, workflow.get_signal_handler(RECONCILE_SIGNAL), *updates]):
            self.install()

    def on_signal(self, raw: Any = None) -> None:
        verdict, reason = self.check_verdict(raw)
        if verdict is None:
            self.reject("signal", raw, reason or "invalid")
            workflow.logger.warning(f"reconcile signal rejected: {reason}")
            return
        self.verdicts[verdict.key].append(_Pending(verdict))

    # -- validation -------------------------------------------------------------------

    def check_verdict(self, raw: Any) -> tuple[ReconcileInput | None, str | None]:
        verdict, reason = _parse(raw, ReconcileInput, "reconcile")
        if verdict is None:
            return None, reason
        effect = self.open.get(verdict.key)
        if effect is None:
            known = ", ".join(sorted(self.open)) or "none"
            return None, f"no parked effect under key {verdict.key!r} (open keys: {known})"
        if verdict.action_id is not None and verdict.action_id != effect.action_id:
            return None, (
                f"the verdict is for action {verdict.action_id}, but the parked "
                f"effect of {verdict.key!r} is action {effect.action_id}"
            )
        if not verdict.actor.strip():
            return None, "actor must name who inspected the world"
        if not verdict.basis.strip():
            return None, "basis must say what the verdict rests on"
        if not any(fnmatch.fnmatchcase(verdict.actor, pattern) for pattern in effect.reconcilers):
            return None, f"actor {verdict.actor!r} may not reconcile under the worker's policy"
        if verdict.verdict == "effect_confirmed":
            if misfit := self.calls[verdict.key].misfit(verdict.output):
                return None, misfit
        elif verdict.output is not None:
            return None, (
                f"output is only taken with effect_confirmed: a {verdict.verdict} "
                'verdict leaves "output" out (delete it from the template)'
            )
        if verdict.signature is not None and verdict.action_id is None:
            return None, f"a signed verdict names the action it is about: {effect.action_id}"
        signers = Signers(keys=effect.keys, verdicts_signed=effect.signature_required)
        if (problem := _signature_problem(signers.verdict_problem, verdict)) is not None:
            return None, problem
        # The ledger refuses it, too, if another action's effect is unknown by then.
        return verdict.model_copy(update={"action_id": effect.action_id}), None

    def check_decision(self, raw: Any) -> tuple[ApproveInput | None, str | None]:
        decision, reason = _parse(raw, ApproveInput, "approve")
        if decision is None:
            return None, reason
        waiting = self.approvals.get(decision.key)
        if waiting is None:
            known = ", ".join(sorted(self.approvals)) or "none"
            return None, f"no call awaits approval under key {decision.key!r} (waiting: {known})"
        if decision.fingerprint != waiting.fingerprint:
            return None, (
                f"fingerprint mismatch: the call awaiting approval under {decision.key!r} has "
                f"fingerprint {waiting.fingerprint}, the decision names {decision.fingerprint}; "
                "a decision holds only for the exact request it was shown"
            )
        if not decision.actor.strip():
            return None, "actor must name who decides"
        if not decision.basis.strip():
            return None, "basis must say what the decision rests on"
        if decision.actor == waiting.performer:
            return None, f"{decision.actor!r} is the call's performer and may not approve it"
        if not any(fnmatch.fnmatchcase(decision.actor, pattern) for pattern in waiting.approvers):
            return None, f"actor {decision.actor!r} may not approve under the worker's policy"
        signers = Signers(keys=waiting.keys, decisions_signed=waiting.signature_required)
        if (problem := _signature_problem(signers.decision_problem, decision)) is not None:
            return None, problem
        return decision, None

    def changed(self, *, parked: int = 0) -> None:
        """Tell the cluster, the UI and the metrics how many calls of this run wait."""
        if self.listed:
            workflow.upsert_search_attributes([OPEN_EFFECTS.value_set(len(self.open))])
        if self.approvals_listed:
            workflow.upsert_search_attributes([AWAITING_APPROVAL.value_set(len(self.approvals))])
        workflow.set_current_details(_render.details(self.approvals.values(), self.open.values()))
        if parked:
            _count_parked(parked)

    def reject(self, via: str, raw: Any, reason: str) -> None:
        self.rejections.append(
            Rejection(at=workflow.now().isoformat(), via=via, input=_jsonable(raw), reason=reason)
        )

    # -- the two waits ----------------------------------------------------------------

    async def await_approval(self, call: Call, needed: ApprovalNeeded) -> Decision | None:
        """Wait for a decision that the ledger recorded and return it; ``None`` when the
        call was decided elsewhere (the ledger answers the next attempt with it)."""
        self.approvals_listed = self.approvals_listed or needed.awaiting_approval_attribute
        shown = _render.pending_approval(call, needed)
        workflow.logger.info(
            f"step {call.step!r} awaits approval of key {needed.key!r} "
            f"(fingerprint {needed.fingerprint}); decide with: {shown.approve_command}"
        )
        why = "the call no longer awaits approval"
        with self._waiting(needed.key, self.approvals, shown, self.decisions, why) as queue:
            pending = await self._record_next(queue, "approve")
            return None if pending is None else pending.given.decision

    async def park(self, call: Call, unknown: UnknownEffect) -> ReconcileInput | None:
        """Wait for an operator's verdict that the ledger accepted and return it; ``None``
        when the key was resolved elsewhere (e.g. with ``temporal-ledger reconcile``) and
        the call should run again to pick up the recorded outcome."""
        key = unknown.key
        self.calls[key] = call
        self.listed = self.listed or unknown.open_effects_attribute
        shown = _render.open_effect(call, unknown)
        workflow.logger.warning(
            f"step {call.step!r} parked: the effect of key {key!r} is unknown "
            f"({unknown.error}); reconcile it with: {shown.update_command}"
        )
        why = "the step is no longer parked"
        with self._waiting(key, self.open, shown, self.verdicts, why, parked=1) as queue:
            while (pending := await self._record_next(queue, "reconcile")) is not None:
                if pending.given.verdict != "still_unknown":
                    return pending.given
                update = {"last_verdict": "still_unknown"}
                self.open[key] = self.open[key].model_copy(update=update)
            return None

    @contextlib.contextmanager
    def _waiting(
        self,
        key: str,
        rows: dict[str, Any],
        row: Any,
        queues: dict[str, list[_Pending[InT, ResultT]]],
        why: str,
        *,
        parked: int = 0,
    ) -> Iterator[list[_Pending[InT, ResultT]]]:
        """A call waiting under ``key``, shown as ``row``, with the queue of its inputs.
        When the wait ends, however it ends, the row goes, and inputs still queued are
        refused saying ``why``: a later wait of the same key is a different call or action
        that nobody has looked at yet, so they are never applied to it. Except when the
        worker drops the run (eviction closes its coroutines): the next replay rebuilds
        the wait from history."""
        rows[key], queues[key] = row, []
        self.changed(parked=parked)
        evicted = False
        try:
            yield queues[key]
        except GeneratorExit:
            evicted = True
            raise
        finally:
            if not evicted:
                rows.pop(key, None)
                self.changed(parked=-parked)
                for leftover in queues.pop(key, []):
                    leftover.error = f"{why}; the input was not applied"
                    leftover.done = True
                    self.reject("ledger", leftover.given.model_dump(), leftover.error)

    async def _record_next(
        self, queue: list[_Pending[InT, ResultT]], kind: Kind
    ) -> _Pending[InT, ResultT] | None:
        """Record the next queued input through the ``kind`` activity; answer refused ones
        and go on. Returns the accepted input, or ``None`` when the ledger says somebody
        settled it elsewhere first (the call then runs again to read that)."""
        activity, result_type, decided_elsewhere = _RECORDING[kind]
        while True:
            await workflow.wait_condition(lambda: bool(queue))
            pending = queue.pop(0)
            try:
                pending.result = await start_own_activity(
                    activity,
                    pending.given,
                    result_type=result_type,
                    # By default, a worker that dies during it is noticed within seconds;
                    # the input is then retried on another worker, never dropped.
                    **scheduling(kind, run=self.options),
                )
            except ActivityError as err:
                cause = err.cause
                elsewhere = isinstance(cause, ApplicationError) and cause.type == decided_elsewhere
                if isinstance(cause, ApplicationError) and elsewhere:
                    # Somebody answered first (e.g. ``temporal-ledger reconcile``): this input
                    # only woke the wait. Answer its sender with what stands (the details
                    # the activity adds), if it says; the call goes on.
                    with contextlib.suppress(IndexError, ValidationError):
                        pending.result = result_type.model_validate(cause.details[0])
                if pending.result is None:
                    pending.error = cause_message(err)
                    self.reject("ledger", pending.given.model_dump(), pending.error)
                if elsewhere:
                    return None
                continue
            finally:
                pending.done = True
            shown = {"verdict", "decision", "actor", "fingerprint"}
            decided(
                _SPAN_EVENT[kind],
                pending.given.key,
                **pending.given.model_dump(mode="json", include=shown),
            )
            return pending


def _update(
    name: str,
    check: Callable[[Any], tuple[InT | None, str | None]],
    queues: dict[str, list[_Pending[InT, ResultT]]],
    rejected: ErrorType,
) -> None:
    """Register update ``name``: input that ``check`` refuses is rejected (with
    ``rejected``) before it touches history; the handler answers with what the ledger
    recorded, or why it refused."""

    def checked(raw: Any = None) -> InT:
        given, reason = check(raw)
        if given is None:
            # Sending the same input again cannot succeed: say so to the caller.
            raise ApplicationError(reason or "invalid", type=rejected, non_retryable=True)
        return given

    async def handle(raw: Any = None) -> ResultT:
        # Checked again: the state may have changed between validation and handling.
        pending: _Pending[InT, ResultT] = _Pending(checked(raw))
        queues[pending.given.key].append(pending)
        await workflow.wait_condition(lambda: pending.done)
        if pending.error is not None:
            raise ApplicationError(pending.error, type=rejected, non_retryable=True)
        assert pending.result is not None
        return pending.result

    workflow.set_update_handler(name, handle, validator=checked)


def _parse(raw: Any, model: type[InT], what: str) -> tuple[InT | None, str | None]:
    """An operator's JSON input (an object, or its text) as ``model``, or why not."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return None, "the input is not valid JSON"
    if not isinstance(raw, dict):
        fields = ", ".join(f'"{name}"' for name in model.model_fields if name != "action_id")
        return None, f"the input must be a JSON object {{{fields}}}"
    try:
        return model.model_validate(raw), None
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(x) for x in e['loc']) or 'input'}: "
            + ("missing" if e["type"] == "missing" else f"{e['msg']}, got {e['input']!r}")
            for e in exc.errors()
        )
        return None, f"malformed {what} input: {problems}"


def _signature_problem(
    check: Callable[..., str | None], given: ReconcileInput | ApproveInput
) -> str | None:
    """Why the input does not prove its actor to the tool worker's keys (as its activity
    reported them; ``check`` is the ``Signers`` check of its kind), in this run; ``None``
    if it does, or if nothing needs proving (a policy without keys). A workflow worker
    without ``cryptography`` refuses a signed input, saying so."""
    info = workflow.info()
    try:
        return check(**dict(given), workflow_id=info.workflow_id, namespace=info.namespace)
    except ImportError as exc:
        return f"this workflow worker cannot check signatures: {exc}"


def decided(kind: str, key: str, **attributes: Any) -> None:
    """One decision on the call under ``key`` (``kind``: ``verdict`` or ``approval``) as a
    span event, emitted once: never while a run replays.

    With the ``[otel]`` extra, each decision recorded for a waiting call (an operator's or
    a probe's verdict, an approver's decision) becomes a short span, ``ledger.decision``,
    in the run's trace context (under temporalio's workflow span where its tracing is on),
    with one event saying what was decided. A run's history replays on every worker
    restart and in replay tests; an event emitted then would say twice what happened
    once, so nothing is emitted while the workflow replays. The attributes' namespace is
    ``temporal_ledger``, as on the activity side's spans.
    """
    if trace is None or workflow.unsafe.is_replaying():
        return
    info = workflow.info()
    fields = {
        "temporal_ledger.key": key,
        "temporal_ledger.workflow_id": info.workflow_id,
        **{f"temporal_ledger.{name}": str(value) for name, value in attributes.items()},
    }
    span = trace.get_tracer("temporal_ledger").start_span("ledger.decision", attributes=fields)
    span.add_event(f"temporal_ledger.{kind}", attributes=fields)
    span.end()


def _jsonable(raw: Any) -> Any:
    try:
        json.dumps(raw)
        return raw
    except (TypeError, ValueError):
        return repr(raw)


def cause_message(err: ActivityError) -> str:
    cause = err.cause
    return cause.message if isinstance(cause, ApplicationError) else str(cause or err)


#: The parked steps of the runs this worker process holds, by workflow type and task queue.
_parked: dict[tuple[str, str], int] = {}


def _count_parked(by: int) -> None:
    """``ledger_parked_steps``: the parked steps of the runs this worker process holds.

    Counted on replay too, so a restarted worker that replays a parked run counts it
    again; recorded through the workflow's metric meter, which records nothing while
    replaying. Across a cluster, sum it over workers; the search attribute
    ``LedgerOpenEffects`` is the authoritative list.
    """
    info = workflow.info()
    labels = (info.workflow_type, info.task_queue)
    _parked[labels] = max(_parked.get(labels, 0) + by, 0)
    gauge = workflow.metric_meter().create_gauge(
        "ledger_parked_steps", "steps waiting for an operator's verdict"
    )
    gauge.set(_parked[labels])


OPEN_EFFECTS = SearchAttributeKey.for_int(OPEN_EFFECTS_ATTRIBUTE)
AWAITING_APPROVAL = SearchAttributeKey.for_int(AWAITING_APPROVAL_ATTRIBUTE)
