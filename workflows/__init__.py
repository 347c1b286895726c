"""The workflow side: ``run_tool``, parking for reconciliation, typed tool errors."""

from ._errors import ToolConflictError, ToolDeniedError, ToolError, ToolFailedError
from ._run_tool import (
    QUERY_OPEN,
    QUERY_REJECTED,
    OpenEffect,
    Rejection,
    default_key,
    install_reconciliation,
    run_tool,
)

__all__ = [
    "QUERY_OPEN",
    "QUERY_REJECTED",
    "OpenEffect",
    "Rejection",
    "ToolConflictError",
    "ToolDeniedError",
    "ToolError",
    "ToolFailedError",
    "default_key",
    "install_reconciliation",
    "run_tool",
]
