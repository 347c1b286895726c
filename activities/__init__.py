"""The activity side: ``@tool``, ``LedgerPlugin``, the reconcile activity and the policy.

The payload models and error types are what crosses between a workflow and its
ledgered activities; ``temporal_ledger.workflows`` is built on them.
"""

from ._generic import LedgeredActivity
from ._keys import step_key
from ._payloads import (
    FINAL_ERROR_TYPES,
    ConflictDetails,
    ErrorType,
    ReconcileInput,
    ReconcileResult,
    ToolCall,
    ToolOutcome,
    UnknownEffect,
)
from ._plugin import OPEN_EFFECTS_ATTRIBUTE, LedgerPlugin
from ._policy import Policy
from ._reconcile import RECONCILE_ACTIVITY, reconcile_effect
from ._runtime import tool_context
from ._tool import Tool, ToolSpec, spec_of, tool

__all__ = [
    "FINAL_ERROR_TYPES",
    "OPEN_EFFECTS_ATTRIBUTE",
    "RECONCILE_ACTIVITY",
    "ConflictDetails",
    "ErrorType",
    "LedgerPlugin",
    "LedgeredActivity",
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
    "step_key",
    "tool",
    "tool_context",
]
