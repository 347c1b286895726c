"""What the activity side uses of the workflow side beyond its public face.

The workflow side owns the protocol between the two (the payloads, names and headers,
what a tool is, the options and the key) and the interceptor the plugin installs; the
activity side implements the one and installs the other. It imports the workflow side
from its public face (``temporal_ledger.workflows``) or from here, never from its other
private modules (``docs/repository.md``, Imports). Not public API.
"""

from ._interceptor import LedgerWorkflowInterceptor
from ._keys import step_key
from ._matching import covers, ordered, read_args, served_by
from ._options import LedgerOptions
from ._protocol import (
    ANCHOR_HEADER,
    APPROVE_ACTIVITY,
    ASK_ONLY_HEADER,
    AWAITING_APPROVAL_ATTRIBUTE,
    HINTS_HEADER,
    OPEN_EFFECTS_ATTRIBUTE,
    PLACEHOLDER,
    PROBE_ACTIVITY,
    RECONCILE_ACTIVITY,
    ApprovalNeeded,
    ApproveInput,
    ApproveResult,
    ConflictDetails,
    ErrorType,
    InnerCall,
    ProbeInput,
    ProbeOutcome,
    ProbeResult,
    ReconcileInput,
    ReconcileResult,
    RunAnchor,
    ToolCall,
    ToolHints,
    ToolOutcome,
    UnknownEffect,
)
from ._results import Answer, AnswerForCall, AsReturned, ResultShape, result_schema
from ._spec import Tool, ToolSpec

__all__ = [
    "ANCHOR_HEADER",
    "APPROVE_ACTIVITY",
    "ASK_ONLY_HEADER",
    "AWAITING_APPROVAL_ATTRIBUTE",
    "HINTS_HEADER",
    "OPEN_EFFECTS_ATTRIBUTE",
    "PLACEHOLDER",
    "PROBE_ACTIVITY",
    "RECONCILE_ACTIVITY",
    "Answer",
    "AnswerForCall",
    "ApprovalNeeded",
    "ApproveInput",
    "ApproveResult",
    "AsReturned",
    "ConflictDetails",
    "ErrorType",
    "InnerCall",
    "LedgerOptions",
    "LedgerWorkflowInterceptor",
    "ProbeInput",
    "ProbeOutcome",
    "ProbeResult",
    "ReconcileInput",
    "ReconcileResult",
    "ResultShape",
    "RunAnchor",
    "Tool",
    "ToolCall",
    "ToolHints",
    "ToolOutcome",
    "ToolSpec",
    "UnknownEffect",
    "covers",
    "ordered",
    "read_args",
    "result_schema",
    "served_by",
    "step_key",
]
