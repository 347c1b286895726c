"""The activity side: ``@tool``, ``LedgerPlugin`` and its options, the policy, probes.

``@tool`` turns an async function of one pydantic model into a Temporal activity whose
every attempt goes through the ledger; ``LedgerPlugin`` puts the ledger on a client's
workers; a probe tells the ledger whether an unknown effect happened. The workflow side
(``temporal_ledger.workflows``) calls the tools with ``run_tool``.
"""

from typing import Any

from ..ledger._seam import moved_names
from ..workflows import _seam as _workflows
from ..workflows._seam import LedgerOptions, Tool, ToolSpec, step_key
from . import _probe
from ._failures import NonRetryableApplicationError
from ._generic import LedgeredActivity
from ._plugin import LedgerPlugin
from ._policy import Policy
from ._probe import ProbeAnswer
from ._runtime import tool_context
from ._tool import tool

__all__ = [
    "LedgerOptions",
    "LedgerPlugin",
    "LedgeredActivity",
    "NonRetryableApplicationError",
    "Policy",
    "ProbeAnswer",
    "Tool",
    "ToolSpec",
    "step_key",
    "tool",
    "tool_context",
]

#: Names that left the public face in 0.3: where they are now, and what to use instead.
_DEPRECATED: dict[str, tuple[Any, str]] = {
    "ActivityOptions": (_workflows.ActivityOptions, "pass temporalio.workflow.ActivityConfig(...)"),
    "ErrorType": (
        _workflows.ErrorType,
        "compare an error's type with its string, e.g. 'ToolConflict'",
    ),
    "present": (_probe.present, "use ProbeAnswer.present(...)"),
    "absent": (_probe.absent, "use ProbeAnswer.absent(...)"),
    "inconclusive": (_probe.inconclusive, "use ProbeAnswer.inconclusive(...)"),
}

__getattr__ = moved_names(__name__, _DEPRECATED)
