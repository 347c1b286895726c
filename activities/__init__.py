"""The activity side: ``@tool``, ``LedgerPlugin`` and its options, the policy, probes.

``@tool`` turns an async function of one pydantic model into a Temporal activity whose
every attempt goes through the ledger; ``LedgerPlugin`` puts the ledger on a client's
workers; a probe tells the ledger whether an unknown effect happened. The workflow side
(``temporal_ledger.workflows``) calls the tools with ``run_tool``.
"""

from ..workflows._seam import LedgerOptions, Tool
from ._failures import NonRetryableApplicationError
from ._plugin import LedgerPlugin
from ._policy import Policy
from ._probe import ProbeAnswer
from ._rules import LedgeredActivity
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
    "tool",
    "tool_context",
]
