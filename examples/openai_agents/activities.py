"""The support agent's function tool: an ordinary Temporal activity with an effect."""

from __future__ import annotations

import json
import os
from pathlib import Path

from temporalio import activity


@activity.defn
async def issue_refund(order: str, cents: int) -> str:
    """Refund an order: appends the refund to ``refunds.jsonl`` in ``SUPPORT_DIR``."""
    path = Path(os.environ.get("SUPPORT_DIR", ".")) / "refunds.jsonl"
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps({"order": order, "cents": cents}) + "\n")
    return f"refunded {cents} cents on {order}"
