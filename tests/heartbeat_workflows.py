"""A workflow that schedules activities of "another library" (plain ``@activity.defn``
functions the plugin ledgers by pattern) with and without a heartbeat timeout."""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity, workflow


@activity.defn(name="hb_other_echo")
async def echo(text: str) -> str:
    return text


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
