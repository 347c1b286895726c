"""A worker of the pydantic-ai tests in a process of its own, so a test can kill it.

python -m tests.pydantic_ai_worker ADDRESS TASK_QUEUE FOLDER [LEASE]
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from tests.test_pydantic_ai_durability import Desk


async def main(address: str, task_queue: str, folder: str, lease: str = "2.0") -> None:
    desk = Desk(address, Path(folder), task_queue=task_queue, lease=float(lease))
    async with desk.running():
        print("WORKER READY", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
