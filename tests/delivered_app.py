"""A plain activity ledgered by ``ledger_activities``, called with what it cannot record."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from datetime import timedelta
from pathlib import Path

from pydantic import BaseModel
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


class Readings(BaseModel):
    """Readings as pydantic validates an ``Iterable`` field: lazily, readable once."""

    sensor: str
    values: Iterable[float]


@activity.defn
async def read_sensor(sensor: str) -> Readings:
    """Reads the sensor's log, streaming its values out as a generator."""
    log = Path(os.environ["SUPPORT_DIR"]) / "readings.txt"
    rows = (line.split() for line in log.read_text().splitlines())
    return Readings(sensor=sensor, values=(float(v) for name, v in rows if name == sensor))


@workflow.defn
class SensorWorkflow:
    @workflow.run
    async def run(self, sensor: str) -> list[float]:
        readings = await workflow.execute_activity(
            read_sensor, sensor, start_to_close_timeout=timedelta(seconds=20)
        )
        return list(readings.values)


@activity.defn
async def store_readings(readings: Readings) -> int:
    """Stores the readings; the first time, the reply is lost after they were stored."""
    folder = Path(os.environ["SUPPORT_DIR"])
    values = list(readings.values)
    with (folder / "stored.txt").open("a") as handle:
        handle.write(json.dumps(values) + "\n")
    lost = folder / "stored.lost"
    if not lost.exists():
        lost.write_text("the reply was lost once\n")
        raise ConnectionResetError("the store hung up after storing")
    return len(values)


@workflow.defn
class StoreWorkflow:
    @workflow.run
    async def run(self, values: list[float]) -> int:
        # Built in the workflow from a generator: pydantic keeps it as a lazy iterator,
        # which the first encoding of the argument reads.
        readings = Readings(sensor="boiler", values=(value for value in values))
        return await workflow.execute_activity(
            store_readings, readings, start_to_close_timeout=timedelta(seconds=20)
        )
