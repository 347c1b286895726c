"""The workflow side: ``run_tool`` and the typed errors it raises.

A call that needs a person (an unknown effect, an approval) waits in its run: the run
answers query ``open_effects`` and ``pending_approvals`` (JSON lists of what waits, each
with the command that answers it), and takes update (or signal) ``reconcile`` and update
``approve``; the ``LedgerPlugin`` registers them as every run starts.
"""

from ._run_tool import (
    ToolConflictError,
    ToolDeniedError,
    ToolError,
    run_tool,
)

__all__ = [
    "ToolConflictError",
    "ToolDeniedError",
    "ToolError",
    "run_tool",
]
