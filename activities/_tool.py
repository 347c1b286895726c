"""``@tool``: a ledgered Temporal activity from an async function of one pydantic model,
and what one of its attempts asks the ledger."""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from temporalio import activity

from ..ledger import ActionRequest
from ..ledger._seam import ExecutionContext
from ..workflows._seam import ErrorType, Tool, ToolCall, ToolOutcome
from ._attempt import Attempt, call_context, run_attempt
from ._failures import failed_before_acting, no_effect_errors_of
from ._probe import Probe
from ._runtime import _execution, current_runtime, final

ArgT = TypeVar("ArgT", bound=BaseModel)
OutT = TypeVar("OutT")


def tool(
    *,
    capability: str,
    retry_safe: bool = False,
    state: Callable[[Any], Any] | None = None,
    name: str | None = None,
    requires_approval: bool = False,
    probe: Probe | None = None,
    probe_absence_conclusive: bool = False,
    no_effect_errors: Iterable[type[BaseException]] = (),
) -> Callable[[Callable[[ArgT], Awaitable[OutT]]], Tool[ArgT, OutT]]:
    """Make a ledgered activity of ``async def fn(arg: Model) -> Output | None``.

    Every attempt goes through the ledger: an identical call under the same key replays
    the recorded outcome, a different one is refused, an unknown effect parks the step for
    an operator. The ledger, not Temporal's retry policy, decides whether to act again.

    Args:
        capability: The dotted capability the call needs (e.g. ``files.append``): the
            policy grants it to performers.
        retry_safe: The far side deduplicates by the idempotency key (see
            :func:`tool_context`), so an unknown effect may be tried again under it.
        state: ``state(arg)`` (sync or async) reads the state a ``precondition`` is held to.
        name: The activity's name; default: the function's.
        requires_approval: Each execution waits for a person's approval of its exact
            request (update ``approve``).
        probe: ``async def probe(key, arg)`` that looks the key up on the far side without
            acting and answers ``ProbeAnswer.present``, ``.absent`` or ``.inconclusive``;
            it runs before an unknown effect parks.
        probe_absence_conclusive: The far side shows any operation under a key: ``absent``
            frees it to act again.
        no_effect_errors: Exception types the function raises only before it acts (e.g.
            a ``ConnectionRefusedError`` of its client, or
            :class:`NonRetryableApplicationError` for its ``ApplicationError`` s raised
            with ``non_retryable=True``). Such an exception is recorded as
            ``NoEffect(retryable=True)`` (the key may act again) and reaches Temporal as
            it was raised; any other exception parks the step as an unknown effect.

    Returns:
        A decorator that turns the function into a :class:`Tool`.

    Raises:
        TypeError: The capability is not a dotted name, the probe not an async function,
            ``no_effect_errors`` not exception classes, or (when decorating) the function
            is not async, or does not take one pydantic model and return one or ``None``.
    """
    if not isinstance(capability, str) or not capability:
        raise TypeError("tool(capability=...) needs a dotted capability name")
    if probe is not None and not inspect.iscoroutinefunction(probe):
        raise TypeError("tool(probe=...) needs an async function probe(key, arg)")
    if probe_absence_conclusive and probe is None:
        raise TypeError("tool(probe_absence_conclusive=True) needs a probe=")
    declared = no_effect_errors_of(no_effect_errors)

    def decorate(fn: Callable[[ArgT], Awaitable[OutT]]) -> Tool[ArgT, OutT]:
        if not inspect.iscoroutinefunction(fn):
            raise TypeError(f"@tool needs an async function; {fn.__qualname__} is not")
        arg_type, output_type = _signature(fn)
        ledgered: _LedgeredTool[ArgT, OutT] = _LedgeredTool(
            name=name or fn.__name__,
            capability=capability,
            retry_safe=retry_safe,
            arg_type=arg_type,
            output_type=output_type,
            requires_approval=requires_approval,
            has_probe=probe is not None,
            probe_absence_conclusive=probe_absence_conclusive,
        )
        # Fail at decoration, not in the first workflow, if the name is not a capability.
        ActionRequest(key="k", capability=capability, instruction=ledgered.name, performer="p")
        ledgered.bind(fn, state, declared, probe)
        return activity.defn(name=ledgered.name)(ledgered)

    return decorate


class _LedgeredTool(Tool[ArgT, OutT]):
    """A ``@tool``: the tool, and the activity that runs its function through the ledger
    (Temporal registers a callable object as it does a function)."""

    def bind(
        self,
        fn: Callable[[ArgT], Awaitable[OutT]],
        state: Callable[[Any], Any] | None,
        declared: tuple[type[BaseException], ...],
        probe: Probe | None,
    ) -> None:
        self._fn = fn
        self._state = state
        self._declared = declared
        self.__ledger_probe__ = probe
        # What tools that list a worker's activities read of a function.
        self.__name__ = self.__qualname__ = self.name
        self.__doc__ = fn.__doc__

    async def __call__(self, raw: Any) -> ToolOutcome:
        """One attempt of a ``@tool``: its request to the ledger, the function as the call
        the ledger runs at most once per key, and the ledger's answer as the outcome.

        The call is taken as plain JSON (``Any``: Temporal converts by this annotation) so
        that one that did not come from ``run_tool`` is answered with what to do instead
        of a conversion error retried forever."""
        try:
            call = ToolCall.model_validate(raw)
        except ValidationError:
            raise final(
                f"{self.name} is a ledgered @tool: call it from a workflow with "
                f"temporal_ledger.workflows.run_tool({self.name}, arg, step=..., performer=...), "
                "not with workflow.execute_activity",
                ErrorType.INVALID_REQUEST,
            ) from None
        runtime = current_runtime()
        arg = argument_of(self, call.arg, refused=ErrorType.INVALID_REQUEST)

        async def act(ctx: ExecutionContext) -> Any:
            token = _execution.set(ctx)
            try:
                return await self._fn(arg)
            finally:
                _execution.reset(token)

        def record(output: Any) -> tuple[Any, Any]:
            if self.output_type is not None and not isinstance(output, self.output_type):
                output = self.output_type.model_validate(output)
            return None, output

        async def read_state(request: ActionRequest) -> Any:
            value = self._state(arg)  # type: ignore[misc]  # passed only with a state
            return await value if inspect.isawaitable(value) else value

        request = {
            "key": call.key,
            "capability": self.capability,
            "instruction": self.name,
            "payload": call.arg or {},
            "precondition": call.precondition,
            "performer": call.performer,
            "output_schema": self.output_schema,
            "context": call_context(activity.info(), step=call.step),
        }
        attempt = Attempt(
            spec=self,
            request=request,
            act=act,
            record=record,
            read=lambda outcome: outcome,
            before_acting=functools.partial(failed_before_acting, declared=self._declared),
            fresh=False,  # the outcome names the action: read from the ledger's answer
            state=read_state if self._state is not None else None,
        )
        return typing.cast(ToolOutcome, await run_attempt(runtime, attempt))


def argument_of(spec: Tool[ArgT, Any], raw: Any, *, refused: ErrorType) -> ArgT:
    """The tool's argument model from its JSON; a non-retryable ``refused`` if it does not fit."""
    try:
        return spec.arg_type.model_validate(raw or {})
    except ValidationError as exc:
        raise final(
            f"{spec.name}: argument does not fit {spec.arg_type.__name__}: {exc}", refused
        ) from None


def _signature(fn: Callable[..., Any]) -> tuple[type[Any], type[BaseModel] | None]:
    hints = typing.get_type_hints(fn)
    params = list(inspect.signature(fn).parameters)
    if len(params) != 1 or params[0] not in hints:
        raise TypeError(f"@tool {fn.__qualname__} must take exactly one annotated argument")
    arg_type = hints[params[0]]
    if not (inspect.isclass(arg_type) and issubclass(arg_type, BaseModel)):
        raise TypeError(f"@tool {fn.__qualname__}: its argument must be a pydantic model")
    output = hints.get("return", type(None))
    if output is type(None) or output is None:
        return arg_type, None
    if not (inspect.isclass(output) and issubclass(output, BaseModel)):
        raise TypeError(f"@tool {fn.__qualname__} must return a pydantic model or None")
    return arg_type, output
