"""The workflow side: ``run_tool`` and the typed errors it raises.

A call that needs a person (an unknown effect, an approval) waits in its run: the run
answers query ``open_effects`` and ``pending_approvals`` (JSON lists of what waits, each
with the command that answers it), and takes update (or signal) ``reconcile`` and update
``approve``; :func:`install_reconciliation` registers them before the first call.
"""

from ..activities._protocol import ActivityOptions as _ActivityOptions
from ..activities._protocol import moved_names
from . import _inbox, _replay, _run_tool, _waiting
from ._errors import (
    ToolConflictError,
    ToolDeniedError,
    ToolError,
    ToolFailedError,
    ToolRejectedError,
)
from ._run_tool import run_tool

__all__ = [
    "ToolConflictError",
    "ToolDeniedError",
    "ToolError",
    "ToolFailedError",
    "ToolRejectedError",
    "run_tool",
]

#: Names that left the public face in 0.3, with what to use instead; gone in 0.4.
_QUERY = "read query {} as JSON"
_REPLAY = "replay with temporalio's Replayer and the LedgerPlugin"
__getattr__ = moved_names(
    __name__,
    {
        "ActivityOptions": (_ActivityOptions, "pass run_tool options=ActivityConfig(...)"),
        "OpenEffect": (_waiting.OpenEffect, _QUERY.format("open_effects")),
        "PendingApproval": (_waiting.PendingApproval, _QUERY.format("pending_approvals")),
        "Rejection": (_waiting.Rejection, _QUERY.format("reconcile_rejections")),
        "ReplayReport": (_replay.ReplayReport, _REPLAY),
        "install_reconciliation": (
            _inbox.install_reconciliation,
            "the LedgerPlugin registers the handlers as every run starts",
        ),
        "default_key": (_run_tool.default_key, "use activities.step_key(...)"),
        "replay_histories": (_replay.replay_histories, _REPLAY),
    },
)
