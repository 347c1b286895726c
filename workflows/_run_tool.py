"""``run_tool`` and parking: the workflow side of the ledger. Deterministic, sandbox-safe."""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import shlex
from datetime import timedelta
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey
from temporalio.exceptions import ActivityError, ApplicationError

from ..activities import (
    APPROVE_ACTIVITY,
    AWAITING_APPROVAL_ATTRIBUTE,
    FINAL_ERROR_TYPES,
    OPEN_EFFECTS_ATTRIBUTE,
    PROBE_ACTIVITY,
    RECONCILE_ACTIVITY,
    ApprovalNeeded,
    ApproveInput,
    ApproveResult,
    ConflictDetails,
    ErrorType,
    ProbeInput,
    ProbeResult,
    ReconcileInput,
    ReconcileResult,
    Tool,
    ToolCall,
    ToolOutcome,
    ToolSpec,
    UnknownEffect,
    spec_of,
    step_key,
)
from ..ledger import Decision, Verdict, output_misfit, output_template
from ._errors import ToolConflictError, ToolDeniedError, ToolFailedError, ToolRejectedError

OutT = TypeVar("OutT")

SIGNAL = "reconcile"
UPDATE = "reconcile"
QUERY_OPEN = "open_effects"
QUERY_REJECTED = "reconcile_rejections"
APPROVE_UPDATE = "approve"
QUERY_APPROVALS = "pending_approvals"

#: Temporal retries only what the ledger marks retryable; everything else is final.
TOOL_RETRY_POLICY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=60),
    maximum_attempts=0,
    non_retryable_error_types=list(FINAL_ERROR_TYPES),
)
RECONCILE_TIMEOUT = timedelta(seconds=10)
RECONCILE_HEARTBEAT_TIMEOUT = timedelta(seconds=3)
RECONCILE_RETRY_POLICY = RetryPolicy(
    initial_interval=timedelta(seconds=0.5),
    maximum_interval=timedelta(seconds=5),
    maximum_attempts=0,
    non_retryable_error_types=[ErrorType.RECONCILE_REFUSED, ErrorType.RECONCILE_NOT_ALLOWED],
)
APPROVE_RETRY_POLICY = RetryPolicy(
    initial_interval=timedelta(seconds=0.5),
    maximum_interval=timedelta(seconds=5),
    maximum_attempts=0,
    non_retryable_error_types=[
        ErrorType.APPROVE_REFUSED,
        ErrorType.APPROVE_NOT_ALLOWED,
        ErrorType.APPROVE_ALREADY_DECIDED,
    ],
)
#: A probe only reads; a few tries, then the step parks for a person as it would without one.
PROBE_TIMEOUT = timedelta(seconds=30)
PROBE_RETRY_POLICY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_attempts=3,
    non_retryable_error_types=[ErrorType.PROBE_UNAVAILABLE, ErrorType.RECONCILE_REFUSED],
)


class OpenEffect(BaseModel):
    """A parked step, as query ``open_effects`` shows it to an operator."""

    model_config = ConfigDict(frozen=True)

    key: str
    step: str
    tool: str
    capability: str
    action_id: str
    since: str
    why: str | None
    reconcilers: list[str] = Field(default_factory=list)
    last_verdict: Verdict | None = None
    signal_command: str
    update_command: str


class PendingApproval(BaseModel):
    """A call waiting for a person's approval, as query ``pending_approvals`` shows it."""

    model_config = ConfigDict(frozen=True)

    key: str
    step: str
    tool: str
    capability: str
    performer: str
    #: The call's arguments exactly as the tool will receive them.
    arguments: dict[str, Any] | None
    #: The fingerprint of the request: the decision names it, and holds for it alone.
    fingerprint: str
    since: str
    approvers: list[str] = Field(default_factory=list)
    approve_command: str
    reject_command: str


class Rejection(BaseModel):
    """Operator input that was refused, as query ``reconcile_rejections`` shows it."""

    at: str
    via: str
    input: Any
    reason: str


InT = TypeVar("InT", ReconcileInput, ApproveInput)
ResultT = TypeVar("ResultT", ReconcileResult, ApproveResult)


class _Pending(Generic[InT, ResultT]):
    """An operator's input waiting to be recorded, and what the ledger answered."""

    def __init__(self, given: InT) -> None:
        self.given = given
        self.done = False
        self.error: str | None = None
        self.result: ResultT | None = None


class _Parking:
    """Per-workflow-run state of parked steps, kept on the workflow instance."""

    def __init__(self) -> None:
        self.open: dict[str, OpenEffect] = {}
        self.specs: dict[str, ToolSpec[Any, Any]] = {}
        self.inbox: dict[str, list[_Pending[ReconcileInput, ReconcileResult]]] = {}
        self.rejections: list[Rejection] = []
        #: The namespace has the search attribute (as the tool's worker found).
        self.listed = False
        self.approvals: dict[str, PendingApproval] = {}
        self.decisions: dict[str, list[_Pending[ApproveInput, ApproveResult]]] = {}
        self.approvals_listed = False

    # -- handlers (registered dynamically, so any workflow can use run_tool) --------

    def on_signal(self, raw: Any = None) -> None:
        verdict, reason = self.check(raw)
        if verdict is None:
            self.reject("signal", raw, reason or "invalid")
            workflow.logger.warning("reconcile signal rejected: %s", reason)
            return
        self.inbox[verdict.key].append(_Pending(verdict))

    def validate_update(self, raw: Any = None) -> None:
        verdict, reason = self.check(raw)
        if verdict is None:
            # Sending the same input again cannot succeed: say so to the caller.
            raise ApplicationError(reason, type=ErrorType.RECONCILE_REJECTED, non_retryable=True)

    async def on_update(self, raw: Any = None) -> ReconcileResult:
        verdict, reason = self.check(raw)
        return await _answer(self.inbox, verdict, reason, ErrorType.RECONCILE_REJECTED)

    def query_open(self) -> list[OpenEffect]:
        return list(self.open.values())

    def query_approvals(self) -> list[PendingApproval]:
        return list(self.approvals.values())

    def validate_approve(self, raw: Any = None) -> None:
        decision, reason = self.check_decision(raw)
        if decision is None:
            raise ApplicationError(reason, type=ErrorType.APPROVE_REJECTED, non_retryable=True)

    async def on_approve(self, raw: Any = None) -> ApproveResult:
        decision, reason = self.check_decision(raw)
        return await _answer(self.decisions, decision, reason, ErrorType.APPROVE_REJECTED)

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
        if not any(_glob(decision.actor, pattern) for pattern in waiting.approvers):
            return None, f"actor {decision.actor!r} may not approve under the worker's policy"
        return decision, None

    def query_rejected(self) -> list[Rejection]:
        return list(self.rejections)

    # -- validation -------------------------------------------------------------------

    def check(self, raw: Any) -> tuple[ReconcileInput | None, str | None]:
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
        if not any(_glob(verdict.actor, pattern) for pattern in effect.reconcilers):
            return None, f"actor {verdict.actor!r} may not reconcile under the worker's policy"
        if verdict.verdict is Verdict.EFFECT_CONFIRMED:
            spec = self.specs[verdict.key]
            if spec.output_type is None and verdict.output is not None:
                return None, f"tool {effect.tool} returns nothing: output must be null"
            if spec.output_type is not None:
                misfit = _output_misfit(spec, verdict.output)
                if misfit:
                    return None, misfit
        elif verdict.output is not None:
            return None, "output is only taken with effect_confirmed"
        return verdict, None

    def changed(self, *, parked: int = 0) -> None:
        """Tell the cluster, the UI and the metrics how many steps of this run wait."""
        if self.listed:
            workflow.upsert_search_attributes([OPEN_EFFECTS.value_set(len(self.open))])
        if self.approvals_listed:
            workflow.upsert_search_attributes([AWAITING_APPROVAL.value_set(len(self.approvals))])
        workflow.set_current_details(self.details())
        if parked:
            _PARKED.move(parked)

    def details(self) -> str:
        lines: list[str] = []
        if self.approvals:
            lines += [f"**{len(self.approvals)} call(s) awaiting approval**", ""]
            for waiting in self.approvals.values():
                lines += [
                    f"- step `{waiting.step}` (tool `{waiting.tool}`, performer "
                    f"`{waiting.performer}`), key `{waiting.key}`, since {waiting.since}",
                    f"  arguments: `{json.dumps(waiting.arguments, sort_keys=True)}`",
                    f"  fingerprint: `{waiting.fingerprint}`",
                    "  approve (or reject) exactly this call:",
                    f"  `{waiting.approve_command}`",
                ]
        if self.open:
            if lines:
                lines.append("")
            lines += [f"**{len(self.open)} step(s) parked: the effect is unknown**", ""]
            for effect in self.open.values():
                lines += [
                    f"- step `{effect.step}` (tool `{effect.tool}`), key `{effect.key}`, "
                    f"since {effect.since}: {effect.why}",
                    "  inspect the world, then answer:",
                    f"  `{effect.update_command}`",
                ]
        return "\n".join(lines)

    def reject(self, via: str, raw: Any, reason: str) -> None:
        self.rejections.append(
            Rejection(at=workflow.now().isoformat(), via=via, input=_jsonable(raw), reason=reason)
        )

    # -- approvals --------------------------------------------------------------------

    async def await_approval(
        self, spec: ToolSpec[Any, Any], step: str, call: ToolCall, needed: ApprovalNeeded
    ) -> Decision | None:
        """Wait for a decision that the ledger recorded and return it; ``None`` when the
        call was decided elsewhere (the ledger answers the next attempt with it)."""
        info = workflow.info()
        key = needed.key
        self.decisions[key] = []
        where = _Where(needed.address, info.namespace, info.workflow_id)
        self.approvals[key] = PendingApproval(
            key=key,
            step=step,
            tool=spec.name,
            capability=needed.capability,
            performer=needed.performer,
            arguments=call.arg,
            fingerprint=needed.fingerprint,
            since=workflow.now().isoformat(),
            approvers=needed.approvers,
            approve_command=_approve_command(where, key, needed.fingerprint, Decision.APPROVE),
            reject_command=_approve_command(where, key, needed.fingerprint, Decision.REJECT),
        )
        self.approvals_listed = self.approvals_listed or needed.awaiting_approval_attribute
        self.changed()
        workflow.logger.info(
            "step %r awaits approval of key %r (fingerprint %s); decide with: %s",
            step,
            key,
            needed.fingerprint,
            self.approvals[key].approve_command,
        )
        try:
            pending = await self.record_next(
                self.decisions[key],
                APPROVE_ACTIVITY,
                ApproveResult,
                APPROVE_RETRY_POLICY,
                decided_elsewhere=ErrorType.APPROVE_ALREADY_DECIDED,
            )
            return None if pending is None else pending.given.decision
        finally:
            self.approvals.pop(key, None)
            self.changed()
            self.drop_leftovers(self.decisions.pop(key, []), "the call no longer awaits approval")

    async def record_next(
        self,
        queue: list[_Pending[InT, ResultT]],
        activity: str,
        result_type: type[ResultT],
        retry_policy: RetryPolicy,
        *,
        decided_elsewhere: ErrorType,
    ) -> _Pending[InT, ResultT] | None:
        """Record the next queued input through ``activity``; answer refused ones and go
        on. Returns the accepted input, or ``None`` when the ledger says somebody settled
        it elsewhere first (the step then runs again to read that)."""
        while True:
            await workflow.wait_condition(lambda: bool(queue))
            pending = queue.pop(0)
            try:
                pending.result = await workflow.execute_activity(
                    activity,
                    pending.given,
                    result_type=result_type,
                    # A worker that dies during it is noticed within seconds; the
                    # input is then retried on another worker, never dropped.
                    start_to_close_timeout=RECONCILE_TIMEOUT,
                    heartbeat_timeout=RECONCILE_HEARTBEAT_TIMEOUT,
                    retry_policy=retry_policy,
                )
            except ActivityError as err:
                pending.error = _cause_message(err)
                self.reject("ledger", pending.given.model_dump(), pending.error)
                cause = err.cause
                if isinstance(cause, ApplicationError) and cause.type == decided_elsewhere:
                    return None
                continue
            finally:
                pending.done = True
            return pending

    def drop_leftovers(self, leftovers: list[_Pending[Any, Any]], why: str) -> None:
        # Inputs still queued were given for this wait; a later wait of the same key is
        # a different call or action that nobody has looked at yet: never apply them to it.
        for leftover in leftovers:
            leftover.error = f"{why}; the input was not applied"
            leftover.done = True
            self.reject("ledger", leftover.given.model_dump(), leftover.error)

    # -- parking ----------------------------------------------------------------------

    async def park(
        self, spec: ToolSpec[Any, Any], step: str, unknown: UnknownEffect
    ) -> ReconcileInput | None:
        """Wait for an operator's verdict that the ledger accepted and return it; ``None``
        when the key was resolved elsewhere (e.g. with ``temporal-ledger reconcile``) and
        the step should run again to pick up the recorded outcome."""
        info = workflow.info()
        key = unknown.key
        self.specs[key] = spec
        self.inbox[key] = []
        output = None if spec.output_schema is None else output_template(spec.output_schema)
        where = _Where(unknown.address, info.namespace, info.workflow_id)
        self.open[key] = OpenEffect(
            key=key,
            step=step,
            tool=spec.name,
            capability=spec.capability,
            action_id=unknown.action_id,
            since=workflow.now().isoformat(),
            why=unknown.error,
            reconcilers=unknown.reconcilers,
            signal_command=_command("signal", where, key, unknown.action_id, output),
            update_command=_command("update execute", where, key, unknown.action_id, output),
        )
        self.listed = self.listed or unknown.open_effects_attribute
        self.changed(parked=+1)
        workflow.logger.warning(
            "step %r parked: the effect of key %r is unknown (%s); reconcile it with: %s",
            step,
            key,
            unknown.error,
            self.open[key].update_command,
        )
        try:
            while True:
                pending = await self.record_next(
                    self.inbox[key],
                    RECONCILE_ACTIVITY,
                    ReconcileResult,
                    RECONCILE_RETRY_POLICY,
                    decided_elsewhere=ErrorType.RECONCILE_ALREADY_RESOLVED,
                )
                if pending is None:
                    return None
                if pending.given.verdict is Verdict.STILL_UNKNOWN:
                    self.open[key] = self.open[key].model_copy(
                        update={"last_verdict": Verdict.STILL_UNKNOWN}
                    )
                    continue
                return pending.given
        finally:
            self.open.pop(key, None)
            self.changed(parked=-1)
            self.drop_leftovers(self.inbox.pop(key, []), "the step is no longer parked")


async def _answer(
    queues: dict[str, list[_Pending[InT, ResultT]]],
    given: InT | None,
    reason: str | None,
    rejected: ErrorType,
) -> ResultT:
    """An update's answer: what the ledger recorded for ``given``, or why it was refused."""
    if given is None:  # the state changed between validation and handling
        raise ApplicationError(reason or "invalid", type=rejected, non_retryable=True)
    pending: _Pending[InT, ResultT] = _Pending(given)
    queues[given.key].append(pending)
    await workflow.wait_condition(lambda: pending.done)
    if pending.error is not None:
        raise ApplicationError(pending.error, type=rejected, non_retryable=True)
    assert pending.result is not None
    return pending.result


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


def _output_misfit(spec: ToolSpec[Any, Any], output: Any) -> str | None:
    """Each missing or wrong field of an operator's output, with its expected type."""
    assert spec.output_type is not None and spec.output_schema is not None
    misfit = output_misfit(spec.output_schema, output, producer=spec.name)
    if misfit:
        return misfit
    try:
        spec.output_type.model_validate(output)
    except ValidationError as exc:  # what the schema cannot say (validators, bounds)
        problems = "; ".join(
            f"{'.'.join(str(x) for x in e['loc']) or 'output'}: {e['msg']}" for e in exc.errors()
        )
        return f"effect_confirmed: the output does not fit {spec.name}'s output model: {problems}"
    return None


def _glob(name: str, pattern: str) -> bool:
    return fnmatch.fnmatchcase(name, pattern)


def _jsonable(raw: Any) -> Any:
    try:
        json.dumps(raw)
        return raw
    except (TypeError, ValueError):
        return repr(raw)


@dataclasses.dataclass(frozen=True)
class _Where:
    address: str | None
    namespace: str
    workflow_id: str

    def command(self, kind: str, name: str, template: dict[str, Any]) -> str:
        """The ``temporal workflow KIND`` command that sends ``template`` to this run."""
        address = f"--address {shlex.quote(self.address)} " if self.address else ""
        return (
            f"temporal workflow {kind} {address}--namespace {shlex.quote(self.namespace)} "
            f"--workflow-id {shlex.quote(self.workflow_id)} --name {name} "
            f"--input {shlex.quote(json.dumps(template))}"
        )


def _approve_command(where: _Where, key: str, fingerprint: str, decision: Decision) -> str:
    template = {
        "key": key,
        "fingerprint": fingerprint,
        "decision": decision.value,
        "actor": "YOUR-NAME",
        "basis": "WHY",
    }
    return where.command("update execute", APPROVE_UPDATE, template)


def _command(kind: str, where: _Where, key: str, action_id: str, output: Any) -> str:
    template = {
        "key": key,
        "action_id": action_id,
        "verdict": Verdict.EFFECT_CONFIRMED.value,
        "actor": "YOUR-NAME",
        "basis": "WHAT-YOU-SAW",
        "evidence": [],
        "output": output,
    }
    return where.command(kind, SIGNAL if kind == "signal" else UPDATE, template)


class _ParkedGauge:
    """``ledger_parked_steps``: the parked steps of the runs this worker process holds.

    Counted on replay too, so a restarted worker that replays a parked run counts it
    again; recorded through the workflow's metric meter, which records nothing while
    replaying. Across a cluster, sum it over workers; the search attribute
    ``LedgerOpenEffects`` is the authoritative list.
    """

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], int] = {}

    def move(self, by: int) -> None:
        info = workflow.info()
        labels = (info.workflow_type, info.task_queue)
        self.counts[labels] = max(self.counts.get(labels, 0) + by, 0)
        workflow.metric_meter().create_gauge(
            "ledger_parked_steps", "steps waiting for an operator's verdict"
        ).set(self.counts[labels])


_PARKED = _ParkedGauge()
OPEN_EFFECTS = SearchAttributeKey.for_int(OPEN_EFFECTS_ATTRIBUTE)
AWAITING_APPROVAL = SearchAttributeKey.for_int(AWAITING_APPROVAL_ATTRIBUTE)


def _cause_message(err: ActivityError) -> str:
    cause = err.cause
    return cause.message if isinstance(cause, ApplicationError) else str(cause or err)


_ATTRIBUTE = "__ledger_parking__"


def install_reconciliation() -> None:
    """Register query ``open_effects``/``reconcile_rejections``/``pending_approvals``, signal
    and update ``reconcile``, and update ``approve``.

    ``run_tool`` does this on its first call; call it at the top of ``run`` to answer
    the queries before any tool runs.
    """
    _parking()


def _parking() -> _Parking:
    instance = workflow.instance()
    parking = getattr(instance, _ATTRIBUTE, None)
    if parking is None:
        parking = _Parking()
        setattr(instance, _ATTRIBUTE, parking)
        workflow.set_query_handler(QUERY_OPEN, parking.query_open)
        workflow.set_query_handler(QUERY_REJECTED, parking.query_rejected)
        workflow.set_signal_handler(SIGNAL, parking.on_signal)
        workflow.set_update_handler(UPDATE, parking.on_update, validator=parking.validate_update)
        workflow.set_query_handler(QUERY_APPROVALS, parking.query_approvals)
        workflow.set_update_handler(
            APPROVE_UPDATE, parking.on_approve, validator=parking.validate_approve
        )
    return parking


def default_key(step: str) -> str:
    """The key of a step: workflow id, first execution's run id, step.

    The first execution's run id survives worker crashes, reset and continue-as-new,
    so a reset workflow replays its effects from the ledger instead of repeating them.
    """
    info = workflow.info()
    return step_key(info.workflow_id, info.first_execution_run_id, step)


async def run_tool(
    tool: Tool[Any, OutT] | ToolSpec[Any, OutT],
    arg: BaseModel | dict[str, Any],
    *,
    step: str,
    performer: str,
    precondition: Any = None,
    key: str | None = None,
    start_to_close_timeout: timedelta = timedelta(minutes=5),
    heartbeat_timeout: timedelta | None = timedelta(seconds=30),
    task_queue: str | None = None,
) -> OutT:
    """Run a ledgered tool as one step of this workflow; return its output.

    Raises :class:`ToolConflictError`, :class:`ToolDeniedError`,
    :class:`ToolRejectedError` or :class:`ToolFailedError` for final outcomes. A call
    that needs approval waits for update ``approve`` of its exact request. An unknown
    effect is first put to the tool's probe, if it has one, and otherwise parks the step
    until an operator reconciles it (signal or update ``reconcile``).
    """
    spec = spec_of(tool)
    # Bad input fails the workflow with a typed error; a plain exception here would fail
    # the workflow task instead, and Temporal would retry that task forever.
    if not isinstance(step, str) or not step:
        raise ToolFailedError(
            "run_tool needs a non-empty step name",
            key=key or "-",
            step=str(step),
            error_type=ErrorType.INVALID_REQUEST,
        )
    if not isinstance(arg, spec.arg_type):
        try:
            arg = spec.arg_type.model_validate(arg)
        except ValidationError as exc:
            raise ToolFailedError(
                f"{spec.name}: argument does not fit {spec.arg_type.__name__}: {exc}",
                key=key or "-",
                step=step,
                error_type=ErrorType.INVALID_REQUEST,
            ) from None
    parking = _parking()
    key = key or default_key(step)
    call = ToolCall(
        key=key,
        step=step,
        performer=performer,
        arg=arg.model_dump(mode="json"),
        precondition=precondition,
    )
    while True:
        try:
            outcome = await workflow.execute_activity(
                spec.name,
                call,
                result_type=ToolOutcome,
                start_to_close_timeout=start_to_close_timeout,
                heartbeat_timeout=heartbeat_timeout,
                retry_policy=TOOL_RETRY_POLICY,
                task_queue=task_queue,
            )
        except ActivityError as err:
            cause = err.cause
            if not isinstance(cause, ApplicationError):
                raise
            if cause.type == ErrorType.AWAITING_APPROVAL:
                needed = ApprovalNeeded.model_validate(cause.details[0])
                decision = await parking.await_approval(spec, step, call, needed)
                if decision is Decision.REJECT:
                    raise ToolRejectedError(
                        f"{spec.name}: the call under {key!r} was rejected", key=key, step=step
                    ) from None
                # Approved (or decided elsewhere): the next attempt takes the approval,
                # or is answered with the rejection.
                continue
            if cause.type == ErrorType.EFFECT_UNKNOWN:
                unknown = UnknownEffect.model_validate(cause.details[0])
                if unknown.probe:
                    found = await _probe(spec, call, unknown, task_queue=task_queue)
                    if found is not None and found.finding == "present":
                        return _typed_output(spec, found.output, key=key, step=step)
                    if found is not None and found.finding in ("absent", "resolved"):
                        continue  # absent: act again under the key; resolved: read it
                verdict = await parking.park(spec, step, unknown)
                if verdict is not None and verdict.verdict is Verdict.EFFECT_CONFIRMED:
                    return _typed_output(spec, verdict.output, key=key, step=step)
                # no_effect_confirmed: the same key may act once more; None: resolved
                # elsewhere, and the ledger answers the next attempt with that outcome.
                continue
            raise _final_error(cause, key=key, step=step) from err
        return _typed_output(spec, outcome.output, key=key, step=step)


async def _probe(
    spec: ToolSpec[Any, Any], call: ToolCall, unknown: UnknownEffect, *, task_queue: str | None
) -> ProbeResult | None:
    """Ask the tool's probe about the unknown effect; ``None`` if it could not answer."""
    try:
        return await workflow.execute_activity(
            PROBE_ACTIVITY,
            ProbeInput(key=unknown.key, tool=spec.name, action_id=unknown.action_id, arg=call.arg),
            result_type=ProbeResult,
            start_to_close_timeout=PROBE_TIMEOUT,
            retry_policy=PROBE_RETRY_POLICY,
            task_queue=task_queue,
        )
    except ActivityError as err:
        workflow.logger.warning(
            "the probe of %s for key %r failed (%s); the step parks for an operator",
            spec.name,
            unknown.key,
            _cause_message(err),
        )
        return None


def _typed_output(spec: ToolSpec[Any, Any], output: Any, *, key: str, step: str) -> Any:
    if spec.output_type is None:
        return None
    try:
        return spec.output_type.model_validate(output)
    except ValidationError as exc:
        # A recorded output that no longer fits (the tool's model changed since).
        raise ToolFailedError(
            f"{spec.name}: the recorded output does not fit {spec.output_type.__name__}: {exc}",
            key=key,
            step=step,
            error_type=ErrorType.OUTPUT_INVALID,
        ) from None


def _final_error(cause: ApplicationError, *, key: str, step: str) -> Exception:
    if cause.type == ErrorType.CONFLICT:
        details = ConflictDetails.model_validate(cause.details[0])
        return ToolConflictError(
            cause.message,
            key=key,
            step=step,
            original_action_id=details.original_action_id,
            dimensions=details.dimensions,
        )
    if cause.type == ErrorType.DENIED:
        return ToolDeniedError(cause.message, key=key, step=step)
    if cause.type == ErrorType.REJECTED:
        return ToolRejectedError(cause.message, key=key, step=step)
    return ToolFailedError(
        cause.message, key=key, step=step, error_type=cause.type or ErrorType.FAILED
    )
