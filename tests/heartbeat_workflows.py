"""A workflow that schedules activities of "another library" (plain ``@activity.defn``
functions the plugin ledgers by pattern) with and without a heartbeat timeout."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporal_ledger.ledger import NoEffect
from temporalio import activity, workflow


@activity.defn(name="hb_other_echo")
async def echo(text: str) -> str:
    return text


@activity.defn(name="hb_other_progress")
async def progress(pages: int) -> list[Any]:
    """Heartbeats its progress, then fails with no effect on its first attempt; the next
    attempt returns the heartbeat details it found."""
    if activity.info().attempt > 1:
        return list(activity.info().heartbeat_details)
    activity.heartbeat(f"page {pages}")
    await asyncio.sleep(2.0)  # the ledger's heartbeats run meanwhile
    raise NoEffect("not yet", retryable=True)


@activity.defn(name="unledgered_echo")
async def unledgered(text: str) -> str:
    return text


@workflow.defn
class HeartbeatOptionsWorkflow:
    @workflow.run
    async def run(self) -> list[str]:
        return [
            await workflow.execute_activity(
                "hb_other_echo", "none set", start_to_close_timeout=timedelta(seconds=30)
            ),
            await workflow.execute_activity(
                "hb_other_echo",
                "its own",
                start_to_close_timeout=timedelta(seconds=30),
                heartbeat_timeout=timedelta(seconds=11),
            ),
            await workflow.execute_activity(
                "unledgered_echo", "not ledgered", start_to_close_timeout=timedelta(seconds=30)
            ),
        ]


@workflow.defn
class HeartbeatDetailsWorkflow:
    @workflow.run
    async def run(self) -> list[Any]:
        return await workflow.execute_activity(
            "hb_other_progress",
            3,
            start_to_close_timeout=timedelta(seconds=30),
            heartbeat_timeout=timedelta(seconds=1.5),
        )
