"""The workflow side: ``run_tool``, parking for reconciliation, typed tool errors."""

from ._errors import (
    ToolConflictError,
    ToolDeniedError,
    ToolError,
    ToolFailedError,
    ToolRejectedError,
)
from ._replay import ReplayReport, replay_command, replay_histories
from ._run_tool import (
    APPROVE_UPDATE,
    QUERY_APPROVALS,
    QUERY_OPEN,
    QUERY_REJECTED,
    OpenEffect,
    PendingApproval,
    Rejection,
    default_key,
    install_reconciliation,
    run_tool,
)

__all__ = [
    "APPROVE_UPDATE",
    "QUERY_APPROVALS",
    "QUERY_OPEN",
    "QUERY_REJECTED",
    "OpenEffect",
    "PendingApproval",
    "Rejection",
    "ReplayReport",
    "ToolConflictError",
    "ToolDeniedError",
    "ToolError",
    "ToolFailedError",
    "ToolRejectedError",
    "default_key",
    "install_reconciliation",
    "replay_command",
    "replay_histories",
    "run_tool",
]
