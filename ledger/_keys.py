"""The one derivation of an idempotency key from where a step sits in a workflow.

The ledger owns it, beside the keys and their wire form (``_wire``): the Temporal side
derives every default key with it, and an operator's script, which holds a ``Ledger``,
finds a step's record by it. Strings only: nothing here knows Temporal.
"""

from __future__ import annotations

import hashlib


def step_key(
    workflow_id: str, first_execution_run_id: str, step: str, *, continued_from: str | None = None
) -> str:
    """``{workflow id}/{first execution run id}[/{continued from}]/{step}``: public as
    ``Ledger.step_key``, which says why."""
    continued = f"/{continued_from}" if continued_from else ""
    key = f"{workflow_id}/{first_execution_run_id}{continued}/{step}"
    if len(key) <= 255 and key.isprintable():
        return key
    digest = hashlib.sha256(key.encode()).hexdigest()
    prefix = "".join(c if c.isprintable() else "?" for c in workflow_id)[:120]
    return f"{prefix}/sha256:{digest}"
