"""The one derivation of an idempotency key from where a step sits in a workflow."""

from __future__ import annotations

import hashlib


def step_key(
    workflow_id: str, first_execution_run_id: str, step: str, *, continued_from: str | None = None
) -> str:
    """``{workflow id}/{first execution run id}[/{continued from}]/{step}``.

    The first execution's run id is kept by worker crashes, ``temporal workflow reset``
    and continue-as-new, so the same step of the same workflow keeps its key, and a
    reset replays its effects from the ledger instead of repeating them; a workflow id
    reused for a new execution gets new keys. A key that would be longer than 255
    characters or unprintable keeps a readable prefix and binds the rest by hash.

    Args:
        workflow_id: The workflow's id.
        first_execution_run_id: The run id of the workflow's first execution.
        step: The step's name (or an activity's number) within the workflow.
        continued_from: The run a continue-as-new, cron or retried run continued from.

    Returns:
        The idempotency key.
    """
    continued = f"/{continued_from}" if continued_from else ""
    key = f"{workflow_id}/{first_execution_run_id}{continued}/{step}"
    if len(key) <= 255 and key.isprintable():
        return key
    digest = hashlib.sha256(key.encode()).hexdigest()
    prefix = "".join(c if c.isprintable() else "?" for c in workflow_id)[:120]
    return f"{prefix}/sha256:{digest}"
