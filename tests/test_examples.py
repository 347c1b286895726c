"""The example apps (``examples/<name>/``): every module imports, and the plan example's
worker and starter run as processes against the session's dev server."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment

from tests.temporal_support import ROOT, lines

pytestmark = pytest.mark.timeout(180)

#: The Temporal samples layout: every example folder holds these four modules.
LAYOUT = ("activities", "workflows", "worker", "starter")
EXAMPLES = sorted(
    p.parent.name for p in (ROOT / "examples").glob("*/__init__.py") if p.parent.is_dir()
)


def test_every_example_follows_the_samples_layout() -> None:
    assert {"agent", "plan", "tickets"} <= set(EXAMPLES)
    for name in EXAMPLES:
        missing = [m for m in LAYOUT if not (ROOT / "examples" / name / f"{m}.py").is_file()]
        assert not missing, f"examples/{name} lacks {missing}"


@pytest.mark.parametrize("module", [f"examples.{n}.{m}" for n in EXAMPLES for m in LAYOUT])
def test_example_module_imports(module: str) -> None:
    imported = importlib.import_module(module)
    assert imported.__doc__, f"{module} says nothing about how to run it"
    if module.endswith((".worker", ".starter")):
        assert callable(imported.parse_args) and callable(imported.main)
        assert "python -m examples." in imported.__doc__


# -- the plan example, end to end -----------------------------------------------------------


@contextlib.asynccontextmanager
async def worker_process(*args: str) -> AsyncIterator[asyncio.subprocess.Process]:
    """``python -m examples.plan.worker ARGS`` until it says it is ready; SIGTERM on exit
    (what Ctrl-C does), SIGKILL to its process group if it does not stop."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-u",
        "-m",
        "examples.plan.worker",
        *args,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        assert process.stdout is not None
        seen: list[bytes] = []
        while True:
            line = await asyncio.wait_for(process.stdout.readline(), 60)
            if not line:
                await process.wait()
                raise AssertionError(
                    f"the worker exited ({process.returncode}): " + b"".join(seen).decode()
                )
            seen.append(line)
            if line.startswith(b"worker ready"):
                break
        yield process
    finally:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), 30)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                await process.wait()


async def run_starter(*args: str) -> tuple[str, Any]:
    """``python -m examples.plan.starter ARGS``: its workflow id and its result (JSON)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "examples.plan.starter",
        *args,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), 90)
    finally:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
    text = out.decode()
    assert process.returncode == 0, f"starter exited {process.returncode}: {text}{err.decode()}"
    fields = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)
    return fields["workflow id"], json.loads(fields["result"])


async def test_plan_worker_and_starter_append_each_line_once(
    temporal_env: WorkflowEnvironment, temporal_address: str, tmp_path: Path
) -> None:
    task_queue = f"examples-plan-{uuid.uuid4().hex[:8]}"
    common = ["--address", temporal_address, "--task-queue", task_queue]
    plan_file, append_file = tmp_path / "plan.txt", tmp_path / "append.txt"

    async with worker_process(*common, "--ledger", f"sqlite:///{tmp_path / 'ledger.db'}") as worker:
        plan_id, report = await run_starter(
            *common, "--path", str(plan_file), "--lines", "alpha", "beta"
        )
        append_id, total = await run_starter(
            *common,
            "--path",
            str(append_file),
            "--workflow",
            "append-lines",
            "--lines",
            "one",
            "two",
            "three",
        )
    assert worker.returncode == 0, "the worker did not stop cleanly on SIGTERM"
    assert worker.stdout is not None
    assert b"worker stopped" in await worker.stdout.read()

    # Each line appended exactly once, in order.
    assert lines(plan_file) == ["alpha", "beta"]
    assert lines(append_file) == ["one", "two", "three"]
    assert [(s["step"], s["outcome"], s["output"]["lines"]) for s in report["steps"]] == [
        ("line-0", "done", 1),
        ("line-1", "done", 2),
    ]
    assert total == 3
    assert plan_id != append_id
    for workflow_id in (plan_id, append_id):
        described = await temporal_env.client.get_workflow_handle(workflow_id).describe()
        assert described.status == WorkflowExecutionStatus.COMPLETED
        assert described.task_queue == task_queue
