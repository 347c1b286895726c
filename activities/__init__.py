"""The activity side: ``@tool``, ``LedgerPlugin``, the reconcile activity and the policy."""

from ._payloads import ReconcileInput, ReconcileResult, ToolCall, ToolOutcome, UnknownEffect
from ._plugin import LedgerPlugin
from ._policy import Policy
from ._reconcile import RECONCILE_ACTIVITY, reconcile_effect
from ._runtime import tool_context
from ._tool import Tool, ToolSpec, spec_of, tool

__all__ = [
    "RECONCILE_ACTIVITY",
    "LedgerPlugin",
    "Policy",
    "ReconcileInput",
    "ReconcileResult",
    "Tool",
    "ToolCall",
    "ToolOutcome",
    "ToolSpec",
    "UnknownEffect",
    "reconcile_effect",
    "spec_of",
    "tool",
    "tool_context",
]
