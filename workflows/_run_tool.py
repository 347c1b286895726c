"""``run_tool``: one ledgered tool call as a step of a workflow. Deterministic, sandbox-safe.

The step runs through the loop every ledgered call runs through (``_ledgered``), in the
run's state that the plugin's workflow interceptor holds; its outcomes become the step's
return value or a typed error.

Its typed errors are ``ApplicationError`` subclasses, non-retryable, so an uncaught one
fails the workflow with its type rather than retrying the workflow task forever.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar, cast

from pydantic import BaseModel, ValidationError
from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

from ..ledger import InvalidRequest
from ..ledger._seam import output_misfit, output_template, step_key
from ._interceptor import current_run
from ._protocol import (
    ApprovalNeeded,
    ConflictDetails,
    ErrorType,
    ToolCall,
    ToolOutcome,
    UnknownEffect,
    one_line,
)
from ._render import Call
from ._scheduling import scheduling
from ._spec import Tool, argument_json

OutT = TypeVar("OutT")


class ToolError(ApplicationError):
    """A ledgered tool step ended without the tool's output.

    Raised itself for a step that failed for good (a rejected request, precondition
    drift, an output that no longer fits...); its two subclasses are the endings a
    workflow handles differently. Catch them first, then this for the rest::

        try:
            output = await run_tool(...)
        except ToolConflictError: ...  # the key is bound to a different request
        except ToolDeniedError: ...  # the policy or a person refused the call
        except ToolError: ...  # the step failed for good

    Uncaught, it fails the workflow.

    Args:
        message: What happened.
        *details: Details for the failure, as ``ApplicationError`` carries them.
        type: The error type that ended the step, e.g. ``'ToolInvalidRequest'``;
            default ``'ToolFailed'``.
        key: The step's idempotency key.
        step: The step's name.

    Attributes:
        key: The step's idempotency key.
        step: The step's name.
    """

    def __init__(
        self, message: str, *details: Any, type: str = ErrorType.FAILED, key: str, step: str
    ) -> None:
        super().__init__(message, *details, type=type, non_retryable=True)
        self.key = key
        self.step = step


class ToolConflictError(ToolError):
    """The key is bound to a different operation (``action.replay_refused`` recorded).

    Args:
        message: What differs.
        key: The step's idempotency key.
        step: The step's name.
        original_action_id: The action that bound the key first.
        dimensions: What differs from it: ``capability``, ``instruction``, ``payload``,
            ``precondition``, ``performer``.

    Attributes:
        original_action_id: The action that bound the key first.
        dimensions: What differs from it.
    """

    def __init__(
        self, message: str, *, key: str, step: str, original_action_id: str, dimensions: list[str]
    ) -> None:
        super().__init__(
            message,
            {"original_action_id": original_action_id, "dimensions": dimensions},
            type=ErrorType.CONFLICT,
            key=key,
            step=step,
        )
        self.original_action_id = original_action_id
        self.dimensions = dimensions


class ToolDeniedError(ToolError):
    """The call may not run: the performer may not use the tool's capability under the
    current policy (type ``ToolDenied``), or a person rejected the call
    (``action.approval_rejected`` recorded, type ``ToolRejected``). It had no effect.

    Args:
        message: The refusal.
        key: The step's idempotency key.
        step: The step's name.
        error_type: ``'ToolDenied'`` or ``'ToolRejected'``.
    """

    def __init__(
        self, message: str, *, key: str, step: str, error_type: str = ErrorType.DENIED
    ) -> None:
        super().__init__(message, type=error_type, key=key, step=step)


async def run_tool(
    tool: Tool[Any, OutT],
    arg: BaseModel | dict[str, Any],
    *,
    step: str,
    performer: str,
    precondition: Any = None,
    key: str | None = None,
    options: workflow.ActivityConfig | None = None,
) -> OutT:
    """Run a ledgered tool as one step of this workflow and return its output.

    A call that needs approval waits for update ``approve`` of its exact request. An
    unknown effect is first put to the tool's probe, if it has one, and otherwise parks
    the step until an operator reconciles it (update or signal ``reconcile``):
    ``effect_confirmed`` returns the operator's output, ``no_effect_confirmed`` runs the
    step again under the same key.

    Args:
        tool: A ``@tool``, or a :class:`Tool` built to call one the worker registers.
        arg: The tool's argument: its pydantic model, or a dict that fits it.
        step: The step's name, unique within the workflow: the default key holds it.
        performer: Who acts, as the policy knows it.
        precondition: The state the call was planned against (JSON), compared with the
            tool's ``state`` before it acts; part of the request's identity.
        key: The idempotency key; default: ``{workflow id}/{first execution run id}/{step}``
            (``Ledger.step_key``): a reset workflow replays its effects instead of repeating them.
        options: How the tool's activity is scheduled (temporalio's ``ActivityConfig``);
            fields it leaves out come from the plugin's ``LedgerOptions.tool``. Its retry
            policy and timeouts bound the attempts: once they are spent on an attempt
            that timed out, one more attempt only asks the ledger, which gives the
            recorded outcome, parks an unknown effect, or lets the step fail with the
            timeout.

    Returns:
        The tool's output (its output model), replayed from the ledger if the step
        already ran under the key; ``None`` for a tool that returns nothing.

    Raises:
        ToolConflictError: The key is bound to a different request.
        ToolDeniedError: The policy does not let ``performer`` use the capability
            (type ``ToolDenied``), or a person rejected the call (``ToolRejected``).
        ToolError: The tool failed for good (with no effect, or with one the
            ledger recorded), the argument does not fit, or the recorded output no
            longer fits the tool's output model.
        temporalio.exceptions.ActivityError: The retry policy and timeouts in
            ``options`` were spent on attempts that timed out, and the ledger holds no
            outcome of them (the error of the last one, as without the ledger).
    """
    call = _tool_call(tool, arg, step=step, performer=performer, precondition=precondition, key=key)
    run = current_run()
    if run is None:
        raise ToolError(
            "run_tool needs the LedgerPlugin on the worker (or Replayer) that runs this "
            "workflow: Client.connect(..., plugins=[LedgerPlugin(...)])",
            key=call.key,
            step=step,
            type=ErrorType.INVALID_REQUEST,
        )
    scheduled = {"result_type": ToolOutcome, **scheduling("tool", options, run=run.inbox.options)}
    ledgered = run.start_step(_Step(tool, call), tool.name, call, **scheduled)
    try:
        outcome: ToolOutcome = await ledgered.settle()
    except ActivityError as ended:
        if isinstance(ended.cause, ApplicationError):
            raise _final_error(ended.cause, key=call.key, step=step) from ended
        raise  # as it is: "raise ... from" would replace its cause
    # The casts say what the tool's types cannot: OutT is None where output_type is.
    if tool.output_type is None:
        return cast(OutT, None)
    try:
        return cast(OutT, tool.output_type.model_validate(outcome.output))
    except ValidationError as exc:  # a recorded output that no longer fits: the model changed
        raise ToolError(
            f"{tool.name}: the recorded output does not fit {tool.output_type.__name__}: {exc}",
            key=call.key,
            step=step,
            type=ErrorType.OUTPUT_INVALID,
        ) from None


@dataclasses.dataclass(frozen=True)
class _Step:
    """A ``run_tool`` step, as :class:`~._ledgered.Ledgered` shows and answers it."""

    spec: Tool[Any, Any]
    tool_call: ToolCall
    calls_inside = False

    @property
    def probe_arg(self) -> Any:
        return self.tool_call.arg

    def shown(self, waiting: ApprovalNeeded | UnknownEffect) -> Call:
        """The step as the inbox shows and checks it."""
        spec, schema = self.spec, self.spec.output_schema
        return Call(
            step=self.tool_call.step,
            tool=spec.name,
            arguments=self.tool_call.arg,
            template=None if schema is None else output_template(schema),
            misfit=lambda output: _output_misfit(spec, output),
        )

    def confirmed(self, call: Call, unknown: UnknownEffect, output: Any) -> ToolOutcome:
        # run_tool checks the output against the tool's model as it returns it.
        return ToolOutcome(
            key=unknown.key, action_id=unknown.action_id, output=output, reconciled=True
        )

    def received(self, result: Any, waited_on: str | None) -> None:
        pass  # a tool's outcome is checked as run_tool returns it


def _tool_call(
    spec: Tool[BaseModel, Any],
    arg: BaseModel | dict[str, Any],
    *,
    step: str,
    performer: str,
    precondition: Any,
    key: str | None,
) -> ToolCall:
    """The call ``run_tool`` schedules; bad input fails the workflow with a typed error
    (a plain exception would fail the workflow task, retried by Temporal forever).

    The argument travels as the JSON the ledger fingerprints (``argument_json``): a set
    in canonical order, so a worker with another ``PYTHONHASHSEED`` (after a reset, say)
    sends the same request; a NaN or an infinity refused here, naming its field, before
    anything is scheduled or recorded (JSON would carry it as null)."""

    def invalid(message: str) -> ToolError:
        return ToolError(message, key=key or "-", step=str(step), type=ErrorType.INVALID_REQUEST)

    if not isinstance(spec, Tool):
        raise TypeError(f"{spec!r} is not a @tool; decorate it with activities.tool(...)")

    if not isinstance(step, str) or not step:
        raise invalid("run_tool needs a non-empty step name")
    info = workflow.info()
    key = key or step_key(info.workflow_id, info.first_execution_run_id, step)
    try:
        payload = argument_json(spec.arg_type.model_validate(arg))  # an instance as it is
    except ValidationError as exc:
        name = spec.arg_type.__name__
        raise invalid(f"{spec.name}: argument does not fit {name}: {exc}") from None
    except InvalidRequest as exc:
        raise invalid(f"{spec.name}: argument cannot be sent: {exc}") from None
    return ToolCall(key=key, step=step, performer=performer, arg=payload, precondition=precondition)


def _final_error(cause: ApplicationError, *, key: str, step: str) -> Exception:
    if cause.type == ErrorType.CONFLICT:
        details = ConflictDetails.model_validate(cause.details[0])
        differs = details.model_dump(include={"original_action_id", "dimensions"})
        return ToolConflictError(cause.message, key=key, step=step, **differs)
    if cause.type in (ErrorType.DENIED, ErrorType.REJECTED):
        return ToolDeniedError(cause.message, key=key, step=step, error_type=cause.type)
    return ToolError(cause.message, key=key, step=step, type=cause.type or ErrorType.FAILED)


def _output_misfit(spec: Tool[Any, Any], output: Any) -> str | None:
    """Each missing or wrong field of an operator's output, with its expected type."""
    if spec.output_type is None or spec.output_schema is None:
        return None if output is None else f"tool {spec.name} returns nothing: output must be null"
    if misfit := output_misfit(spec.output_schema, output, producer=spec.name):
        return misfit
    try:
        spec.output_type.model_validate(output)
    except ValidationError as exc:  # what the schema cannot say (validators, bounds)
        problems = one_line(exc)
        return f"effect_confirmed: the output does not fit {spec.name}'s output model: {problems}"
    return None
