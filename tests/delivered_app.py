"""A plain activity ledgered by ``ledger_activities``, called with what it cannot record."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

from temporalio import activity, workflow


@activity.defn
async def log_reading(sensor: str, reading: float) -> str:
    """Appends a reading to the sensor's log: an effect."""
    with (Path(os.environ["SUPPORT_DIR"]) / "readings.txt").open("a") as handle:
        handle.write(f"{sensor} {reading}\n")
    return "logged"


@workflow.defn
class ReadingWorkflow:
    @workflow.run
    async def run(self, sensor: str, reading: float) -> str:
        return await workflow.execute_activity(
            log_reading, args=[sensor, reading], start_to_close_timeout=timedelta(seconds=20)
        )
