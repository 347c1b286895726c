"""The support agent's function tool: an ordinary Temporal activity with an effect."""

from __future__ import annotations

import json

from temporalio import activity

from examples import lose_the_reply_if_asked, work_dir


@activity.defn
async def issue_refund(order: str, cents: int) -> str:
    """Refund an order: appends the refund to ``refunds.jsonl`` in ``examples.work_dir()``
    (``$SUPPORT_DIR``, or a folder in the system's temporary directory)."""
    path = work_dir() / "refunds.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps({"order": order, "cents": cents}) + "\n")
    lose_the_reply_if_asked()
    return f"refunded {cents} cents on {order}"
