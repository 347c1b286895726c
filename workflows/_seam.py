"""What the activity side uses of the workflow side beyond its public face.

The workflow side owns the protocol between the two (the payloads, names and headers,
what a tool is, the options and the key) and the interceptor the plugin installs; the
activity side implements the one and installs the other. It imports the workflow side
from its public face (``temporal_ledger.workflows``) or from here, never from its other
private modules (``docs/repository.md``, Imports). Not public API: each name is imported
``as`` itself, which re-exports it.
"""

from ._interceptor import LedgerWorkflowInterceptor as LedgerWorkflowInterceptor
from ._matching import covers as covers
from ._matching import ordered as ordered
from ._matching import read_args as read_args
from ._matching import served_by as served_by
from ._protocol import ANCHOR_HEADER as ANCHOR_HEADER
from ._protocol import APPROVE_ACTIVITY as APPROVE_ACTIVITY
from ._protocol import ASK_ONLY_HEADER as ASK_ONLY_HEADER
from ._protocol import AWAITING_APPROVAL_ATTRIBUTE as AWAITING_APPROVAL_ATTRIBUTE
from ._protocol import HINTS_HEADER as HINTS_HEADER
from ._protocol import OPEN_EFFECTS_ATTRIBUTE as OPEN_EFFECTS_ATTRIBUTE
from ._protocol import PLACEHOLDER as PLACEHOLDER
from ._protocol import PROBE_ACTIVITY as PROBE_ACTIVITY
from ._protocol import RECONCILE_ACTIVITY as RECONCILE_ACTIVITY
from ._protocol import ApprovalNeeded as ApprovalNeeded
from ._protocol import ApproveInput as ApproveInput
from ._protocol import ApproveResult as ApproveResult
from ._protocol import ConflictDetails as ConflictDetails
from ._protocol import ErrorType as ErrorType
from ._protocol import InnerCall as InnerCall
from ._protocol import ProbeInput as ProbeInput
from ._protocol import ProbeOutcome as ProbeOutcome
from ._protocol import ProbeResult as ProbeResult
from ._protocol import ReconcileInput as ReconcileInput
from ._protocol import ReconcileResult as ReconcileResult
from ._protocol import RunAnchor as RunAnchor
from ._protocol import ToolCall as ToolCall
from ._protocol import ToolHints as ToolHints
from ._protocol import ToolOutcome as ToolOutcome
from ._protocol import UnknownEffect as UnknownEffect
from ._results import Answer as Answer
from ._results import AsReturned as AsReturned
from ._results import ResultShape as ResultShape
from ._scheduling import LedgerOptions as LedgerOptions
from ._spec import Tool as Tool
