"""The workflow side: ``run_tool``, the inbox where calls wait for people (parking and
approvals), the plugin's workflow interceptor, typed tool errors."""

from ._errors import (
    ToolConflictError,
    ToolDeniedError,
    ToolError,
    ToolFailedError,
    ToolRejectedError,
)
from ._inbox import (
    APPROVE_UPDATE,
    QUERY_APPROVALS,
    QUERY_OPEN,
    QUERY_REJECTED,
    OpenEffect,
    PendingApproval,
    Rejection,
    install_reconciliation,
)
from ._interceptor import LedgerWorkflowInterceptor
from ._replay import ReplayReport, replay_command, replay_histories
from ._run_tool import default_key, run_tool

__all__ = [
    "APPROVE_UPDATE",
    "QUERY_APPROVALS",
    "QUERY_OPEN",
    "QUERY_REJECTED",
    "LedgerWorkflowInterceptor",
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
