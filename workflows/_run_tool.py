"""``run_tool``: one ledgered tool call as a step of a workflow. Deterministic, sandbox-safe.

The tool's outcomes become the step's return value or a typed error; a call that needs
approval or whose effect is unknown waits in the run's inbox (``_inbox``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

from ..activities import (
    FINAL_ERROR_TYPES,
    ApprovalNeeded,
    ConflictDetails,
    ErrorType,
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
from ._inbox import Call, inbox
from ._probe import ask_probe
from ._scheduling import start_own_activity

OutT = TypeVar("OutT")

#: Temporal retries only what the ledger marks retryable; everything else is final.
TOOL_RETRY_POLICY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=60),
    maximum_attempts=0,
    non_retryable_error_types=list(FINAL_ERROR_TYPES),
)


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
    key = key or default_key(step)
    call = ToolCall(
        key=key,
        step=step,
        performer=performer,
        arg=arg.model_dump(mode="json"),
        precondition=precondition,
    )
    waiting = inbox()
    # The first attempt is scheduled in every run of this workflow; later ones only in a
    # run that waited, so they are the ledger's own (see _scheduling).
    schedule = workflow.start_activity
    while True:
        try:
            outcome = await schedule(
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
            schedule = start_own_activity
            if cause.type == ErrorType.AWAITING_APPROVAL:
                needed = ApprovalNeeded.model_validate(cause.details[0])
                decision = await waiting.await_approval(_call(spec, call), needed)
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
                    found = await ask_probe(spec.name, unknown, call.arg, task_queue=task_queue)
                    if found is not None and found.finding == "present":
                        return _typed_output(spec, found.output, key=key, step=step)
                    if found is not None and found.finding in ("absent", "resolved"):
                        continue  # absent: act again under the key; resolved: read it
                verdict = await waiting.park(_call(spec, call), unknown)
                if verdict is not None and verdict.verdict is Verdict.EFFECT_CONFIRMED:
                    return _typed_output(spec, verdict.output, key=key, step=step)
                # no_effect_confirmed: the same key may act once more; None: resolved
                # elsewhere, and the ledger answers the next attempt with that outcome.
                continue
            raise _final_error(cause, key=key, step=step) from err
        return _typed_output(spec, outcome.output, key=key, step=step)


def _call(spec: ToolSpec[Any, Any], call: ToolCall) -> Call:
    """The step as the inbox shows and checks it."""
    schema = spec.output_schema
    return Call(
        step=call.step,
        tool=spec.name,
        arguments=call.arg,
        template=None if schema is None else output_template(schema),
        misfit=lambda output: _output_misfit(spec, output),
    )


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


def _output_misfit(spec: ToolSpec[Any, Any], output: Any) -> str | None:
    """Each missing or wrong field of an operator's output, with its expected type."""
    if spec.output_type is None or spec.output_schema is None:
        return None if output is None else f"tool {spec.name} returns nothing: output must be null"
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
