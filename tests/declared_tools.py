"""A ``@tool`` whose far side refuses before acting, and says so with its own exception."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from pydantic import BaseModel
from temporal_ledger.activities import tool
from temporal_ledger.workflows import run_tool
from temporalio import workflow
from temporalio.common import RetryPolicy


class Post(BaseModel):
    path: str
    text: str


class Refused(Exception):
    """The far side refused the request before doing anything."""


@tool(capability="board.post", no_effect_errors=(Refused,))
async def post_on_board(arg: Post) -> None:
    """Refuses its first request (a marker file says it was refused), then posts."""
    board = Path(arg.path)
    refused = board.with_suffix(".refused")
    if not refused.exists():
        refused.write_text("refused once\n")
        raise Refused("the board is busy: nothing posted")
    with board.open("a") as handle:
        handle.write(arg.text + "\n")


@workflow.defn
class PostWorkflow:
    @workflow.run
    async def run(self, path: str) -> None:
        await run_tool(
            post_on_board,
            Post(path=path, text="hello"),
            step="post",
            performer="PostWorkflow",
            options=workflow.ActivityConfig(
                start_to_close_timeout=timedelta(seconds=20),
                retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=100)),
            ),
        )
