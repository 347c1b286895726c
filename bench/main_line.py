"""The package files on the main line of one ledgered MCP tool call.

A worker with ``LedgerPlugin(ledger_activities=[...])`` on a Temporal dev server runs one
MCP-like ``temporalio.mcp.notes.call-tool`` activity (its argument a temporalio-mcp
``{"name", "arguments", "meta"}`` dict) through the plugin's activity interceptor, under
``sys.setprofile``. At the first durable write (the recorder's first ``submit*`` or
``transact*`` call) it prints the package files (``ledger/``, ``activities/``,
``workflows/``) on the Python call stack, and, where the write runs as a job in a writer
thread, those on that thread's stack when the job starts: the figure issue 42 bounds.

    python bench/main_line.py

It is a measurement: it exits 0 whatever the figure.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import threading
import uuid
from datetime import timedelta
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from temporal_ledger.activities import LedgerPlugin, Policy  # noqa: E402
from temporalio import activity, workflow  # noqa: E402
from temporalio.client import Client  # noqa: E402
from temporalio.testing import WorkflowEnvironment  # noqa: E402
from temporalio.worker import UnsandboxedWorkflowRunner, Worker  # noqa: E402

from worker import free_port, temporal_binary  # noqa: E402

CALL_TOOL = "temporalio.mcp.notes.call-tool"
PACKAGE = tuple(str(ROOT / folder) + "/" for folder in ("ledger", "activities", "workflows"))


@activity.defn(name=CALL_TOOL)
async def call_tool(arg: dict[str, Any]) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": f"added {arg['arguments']['text']}"}]}


@workflow.defn
class OneCall:
    @workflow.run
    async def run(self) -> Any:
        arg = {"name": "add_note", "arguments": {"text": "hello"}, "meta": None}
        return await workflow.execute_activity(
            CALL_TOOL, arg, start_to_close_timeout=timedelta(seconds=30)
        )


class MainLine:
    """Watches every thread: each call into the recorder that hands it a job (``submit*``,
    ``transact*``) is a candidate; the first of those jobs to start is the first write."""

    def __init__(self) -> None:
        self.stacks: dict[str, list[str]] = {}
        #: The job's code, and the package files on the stack that handed it over.
        self.handed: dict[Any, list[str]] = {}

    @staticmethod
    def _files(frame: FrameType | None) -> list[str]:
        files: list[str] = []
        while frame is not None:
            name = frame.f_code.co_filename
            if name.startswith(PACKAGE) and name not in files:
                files.append(name)
            frame = frame.f_back
        return [str(Path(name).relative_to(ROOT)) for name in reversed(files)]

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or self.stacks:
            return
        code = frame.f_code
        if code in self.handed:
            self.stacks["first write (the recorder's call)"] = self.handed[code]
            if threading.current_thread() is not threading.main_thread():
                self.stacks["writer thread (the job)"] = self._files(frame)
            return
        if not code.co_filename.startswith(PACKAGE[0]):
            return
        if code.co_name.startswith(("submit", "transact")):
            job = frame.f_locals.get("fn")
            job = getattr(job, "func", job)  # a functools.partial
            job = getattr(job, "__func__", job)  # a bound method
            if hasattr(job, "__code__"):
                self.handed[job.__code__] = self._files(frame)


async def main() -> None:
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(),
        ip="127.0.0.1",
        port=free_port(),
        ui=False,
        dev_server_log_level="error",
        dev_server_extra_args=["--http-port", str(free_port())],
    )
    watch = MainLine()
    try:
        with tempfile.TemporaryDirectory() as folder:
            plugin = LedgerPlugin(
                f"sqlite:///{folder}/ledger.db",
                policy=Policy(performers={"*": ["*"]}),
                ledger_activities=["temporalio.mcp.*.call-tool"],
            )
            address = env.client.service_client.config.target_host
            client = await Client.connect(address, plugins=[plugin])
            queue = f"main-line-{uuid.uuid4().hex[:8]}"
            async with Worker(
                client,
                task_queue=queue,
                workflows=[OneCall],
                activities=[call_tool],
                workflow_runner=UnsandboxedWorkflowRunner(),  # this script is no workflow module
            ):
                threading.setprofile(watch.profile)
                sys.setprofile(watch.profile)
                try:
                    await client.execute_workflow(OneCall.run, id=queue, task_queue=queue)
                finally:
                    sys.setprofile(None)
                    threading.setprofile(None)  # type: ignore[arg-type]
    finally:
        await env.shutdown()
    files: list[str] = []
    for where, stack in watch.stacks.items():
        print(f"{where}:")
        for name in stack:
            print(f"  {name}")
        files += [name for name in stack if name not in files]
    print(f"package files on the main line: {len(files)}")


if __name__ == "__main__":
    asyncio.run(main())
