"""The activity side: ``@tool``, ``LedgerPlugin``, the reconcile, approve and probe
activities, and the policy.

The payload models and error types are what crosses between a workflow and its
ledgered activities; ``temporal_ledger.workflows`` is built on them.
"""

from ._generic import LedgeredActivity
from ._keys import step_key
from ._payloads import (
    FINAL_ERROR_TYPES,
    ApprovalNeeded,
    ApproveInput,
    ApproveResult,
    ConflictDetails,
    ErrorType,
    ProbeInput,
    ProbeResult,
    ReconcileInput,
    ReconcileResult,
    ToolCall,
    ToolOutcome,
    UnknownEffect,
)
from ._plugin import AWAITING_APPROVAL_ATTRIBUTE, OPEN_EFFECTS_ATTRIBUTE, LedgerPlugin
from ._policy import Policy
from ._probe import Finding, Probe, ProbeAnswer, absent, inconclusive, present
from ._reconcile import (
    APPROVE_ACTIVITY,
    PROBE_ACTIVITY,
    RECONCILE_ACTIVITY,
    approve_call,
    probe_effect,
    reconcile_effect,
)
from ._runtime import tool_context
from ._tool import Tool, ToolSpec, spec_of, tool

__all__ = [
    "APPROVE_ACTIVITY",
    "AWAITING_APPROVAL_ATTRIBUTE",
    "FINAL_ERROR_TYPES",
    "OPEN_EFFECTS_ATTRIBUTE",
    "PROBE_ACTIVITY",
    "RECONCILE_ACTIVITY",
    "ApprovalNeeded",
    "ApproveInput",
    "ApproveResult",
    "ConflictDetails",
    "ErrorType",
    "Finding",
    "LedgerPlugin",
    "LedgeredActivity",
    "Policy",
    "Probe",
    "ProbeAnswer",
    "ProbeInput",
    "ProbeResult",
    "ReconcileInput",
    "ReconcileResult",
    "Tool",
    "ToolCall",
    "ToolOutcome",
    "ToolSpec",
    "UnknownEffect",
    "absent",
    "approve_call",
    "inconclusive",
    "present",
    "probe_effect",
    "reconcile_effect",
    "spec_of",
    "step_key",
    "tool",
    "tool_context",
]
