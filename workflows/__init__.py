"""The workflow side: ``run_tool``, the typed errors it raises, what a waiting run shows
its operators, and replay of exported histories.

A call that needs a person (an unknown effect, an approval) waits in its run: the run
answers query ``open_effects`` with :class:`OpenEffect` s and ``pending_approvals`` with
:class:`PendingApproval` s, and takes update (or signal) ``reconcile`` and update
``approve``.
"""

from ..activities import ActivityOptions
from ._errors import (
    ToolConflictError,
    ToolDeniedError,
    ToolError,
    ToolFailedError,
    ToolRejectedError,
)
from ._inbox import OpenEffect, PendingApproval, Rejection, install_reconciliation
from ._replay import ReplayReport, replay_histories
from ._run_tool import default_key, run_tool

__all__ = [
    "ActivityOptions",
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
    "replay_histories",
    "run_tool",
]
