"""Typed, non-retryable errors that ``run_tool`` raises into the workflow.

They are ``ApplicationError`` subclasses, so an uncaught one fails the workflow with
its type rather than retrying the workflow task forever.
"""

from __future__ import annotations

from typing import Any

from temporalio.exceptions import ApplicationError

from ._protocol import ErrorType


class ToolError(ApplicationError):
    """A ledgered tool step ended without the tool's output.

    Catch it (or a subclass) around ``run_tool``; uncaught, it fails the workflow.

    Args:
        message: What happened.
        *details: Details for the failure, as ``ApplicationError`` carries them.
        type: The error type that ended the step, e.g. ``'ToolConflict'``.
        key: The step's idempotency key.
        step: The step's name.

    Attributes:
        key: The step's idempotency key.
        step: The step's name.
    """

    def __init__(self, message: str, *details: Any, type: str, key: str, step: str) -> None:
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


class ToolFailedError(ToolError):
    """The tool failed for good (a rejected request, precondition drift, an output that
    no longer fits...).

    Args:
        message: The failure.
        key: The step's idempotency key.
        step: The step's name.
        error_type: The error type that ended the step, e.g. ``'ToolConflict'``.
    """

    def __init__(
        self, message: str, *, key: str, step: str, error_type: str = ErrorType.FAILED
    ) -> None:
        super().__init__(message, type=error_type, key=key, step=step)
