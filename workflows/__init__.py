"""The workflow side: ``run_tool`` and the typed errors it raises.

A call that needs a person (an unknown effect, an approval) waits in its run: the run
answers query ``open_effects`` and ``pending_approvals`` (JSON lists of what waits, each
with the command that answers it), and takes update (or signal) ``reconcile`` and update
``approve``; :func:`install_reconciliation` registers them before the first call.
"""

import importlib
from typing import Any

from ..ledger._seam import moved
from . import _inbox, _run_tool, _waiting
from ._errors import (
    ToolConflictError,
    ToolDeniedError,
    ToolError,
    ToolFailedError,
    ToolRejectedError,
)
from ._options import ActivityOptions as _ActivityOptions
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
_MOVED: dict[str, tuple[Any, str]] = {
    "ActivityOptions": (_ActivityOptions, "pass run_tool options=ActivityConfig(...)"),
    "OpenEffect": (_waiting.OpenEffect, _QUERY.format("open_effects")),
    "PendingApproval": (_waiting.PendingApproval, _QUERY.format("pending_approvals")),
    "Rejection": (_waiting.Rejection, _QUERY.format("reconcile_rejections")),
    "install_reconciliation": (
        _inbox.install_reconciliation,
        "the LedgerPlugin registers the handlers as every run starts",
    ),
    "default_key": (_run_tool.default_key, "use activities.step_key(...)"),
}
#: The replay needs the plugin, so it lives on the activity side, which imports this
#: one; these two old names find it by name when asked, and the workflow side never
#: imports the activity side (docs/repository.md, Imports).
_REPLAY_NAMES = ("ReplayReport", "replay_histories")
_REPLAY = "replay with temporalio's Replayer and the LedgerPlugin"


def _moved_object(name: str) -> Any:
    if name in _REPLAY_NAMES:
        return getattr(importlib.import_module("temporal_ledger.activities._replay"), name)
    return _MOVED[name][0]


def _instead(name: str) -> str | None:
    return _REPLAY if name in _REPLAY_NAMES else _MOVED[name][1] if name in _MOVED else None


__getattr__ = moved(__name__, _moved_object, _instead)
