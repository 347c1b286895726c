"""The activity side: ``@tool``, ``LedgerPlugin`` and its options, the policy, probes.

``@tool`` turns an async function of one pydantic model into a Temporal activity whose
every attempt goes through the ledger; ``LedgerPlugin`` puts the ledger on a client's
workers; a probe tells the ledger whether an unknown effect happened. The workflow side
(``temporal_ledger.workflows``) calls the tools with ``run_tool``.
"""

from ._generic import LedgeredActivity
from ._keys import step_key
from ._options import ActivityOptions, LedgerOptions
from ._plugin import LedgerPlugin
from ._policy import Policy
from ._probe import ProbeAnswer, absent, inconclusive, present
from ._protocol import ErrorType, ToolSpec
from ._runtime import tool_context
from ._tool import Tool, tool

__all__ = [
    "ActivityOptions",
    "ErrorType",
    "LedgerOptions",
    "LedgerPlugin",
    "LedgeredActivity",
    "Policy",
    "ProbeAnswer",
    "Tool",
    "ToolSpec",
    "absent",
    "inconclusive",
    "present",
    "step_key",
    "tool",
    "tool_context",
]
