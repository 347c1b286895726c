"""The workflow side: ``run_tool``, parking for reconciliation, typed tool errors."""

from ._errors import ToolConflictError, ToolDeniedError, ToolError, ToolFailedError
from ._replay import ReplayReport, replay_command, replay_histories
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
    "ReplayReport",
    "ToolConflictError",
    "ToolDeniedError",
    "ToolError",
    "ToolFailedError",
    "default_key",
    "install_reconciliation",
    "replay_command",
    "replay_histories",
    "run_tool",
]
