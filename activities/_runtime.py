"""What a ledgered activity needs at run time, provided by the plugin's interceptor."""

from __future__ import annotations

import contextvars
import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from temporalio.exceptions import ApplicationError

from ..workflows._seam import ErrorType

if TYPE_CHECKING:
    from ..ledger import Ledger
    from ..ledger._seam import ExecutionContext
    from ._policy import Policy


@dataclasses.dataclass(frozen=True)
class Runtime:
    ledger: Ledger
    policy: Policy
    #: The worker client's target, shown in the operator's commands.
    address: str | None = None
    #: Whether the namespace has the ``LedgerOpenEffects`` search attribute registered.
    open_effects_attribute: bool = False
    #: Whether the namespace has the ``LedgerAwaitingApproval`` search attribute registered.
    awaiting_approval_attribute: bool = False
    #: The ``@tool`` activities of the plugin's workers, by activity name (for probes).
    tools: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    #: The plugin's ``ledger_activities`` rules (for the probes they declare).
    rules: Sequence[Any] = ()
    #: Record calls' arguments and outputs on their spans (opt-in, as OpenTelemetry's are).
    trace_content: bool = False


_runtime: contextvars.ContextVar[Runtime] = contextvars.ContextVar("ledger_runtime")
_execution: contextvars.ContextVar[ExecutionContext] = contextvars.ContextVar("ledger_execution")


def final(message: str, kind: str, *details: Any, **fields: Any) -> ApplicationError:
    """The ledger's answer ``kind`` as an error that Temporal does not retry."""
    return ApplicationError(message, *details, type=kind, non_retryable=True, **fields)


def current_runtime() -> Runtime:
    try:
        return _runtime.get()
    except LookupError:
        raise final(
            "no ledger: register LedgerPlugin(ledger=...) on the Client or Worker that runs "
            "ledgered tools",
            ErrorType.LEDGER_UNAVAILABLE,
        ) from None


def tool_context() -> ExecutionContext:
    """Inside a tool: the idempotency key, action id and fencing token of this execution.

    Forward ``tool_context().key`` to a far side that deduplicates by key.

    Returns:
        The execution's context, as the ledger gives it to the tool.

    Raises:
        RuntimeError: No ``@tool`` is running.
    """
    try:
        return _execution.get()
    except LookupError:
        raise RuntimeError("tool_context() is only available while a @tool runs") from None
