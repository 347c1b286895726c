"""Tools and a workflow used by the Temporal tests; the far side is local files."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from temporal_ledger.activities import tool, tool_context
from temporal_ledger.ledger import NoEffect
from temporal_ledger.workflows import run_tool
from temporalio import workflow
from temporalio.workflow import ActivityConfig

with workflow.unsafe.imports_passed_through():
    from examples.agent.activities import register_agent_tool
    from examples.agent.models import MODEL_CALL, ModelRequest
    from examples.plan.activities import AppendLine, PostMessage, append_line, post_message


class Hold(BaseModel):
    path: str
    line: str
    #: Wait for this file before acting (to kill the worker before the effect).
    go_file: str | None = None
    #: Written right after the effect (to kill the worker after the effect).
    acted_file: str | None = None
    hold_after: float = 0.0


class Lines(BaseModel):
    lines: int


class Reserve(BaseModel):
    log: str
    reject_first: int
    retry_after: float


class Reserved(BaseModel):
    attempts: int


def _append(path: Path, line: str) -> int:
    with path.open("a", encoding="utf-8") as handle:
        handle.write(line + "\n")
    return len(path.read_text(encoding="utf-8").splitlines())


def _wait_for_file(path: Path) -> None:
    while not path.exists():
        time.sleep(0.05)


@tool(capability="files.append")
async def hold_and_append(arg: Hold) -> Lines:
    if arg.go_file:
        await asyncio.to_thread(_wait_for_file, Path(arg.go_file))
    lines = await asyncio.to_thread(_append, Path(arg.path), arg.line)
    if arg.acted_file:
        await asyncio.to_thread(Path(arg.acted_file).write_text, "acted")
    await asyncio.sleep(arg.hold_after)
    return Lines(lines=lines)


@tool(capability="slots.reserve")
async def reserve_slot(arg: Reserve) -> Reserved:
    """A far side that answers 429 (no effect, retry after) to the first few attempts."""
    entry = json.dumps({"at": time.time(), "key": tool_context().key})
    attempts = await asyncio.to_thread(_append, Path(arg.log), entry)
    if attempts <= arg.reject_first:
        raise NoEffect("429 Too Many Requests", retryable=True, retry_after=arg.retry_after)
    return Reserved(attempts=attempts)


class Guarded(BaseModel):
    path: str
    line: str


def _line_count(arg: Guarded) -> dict[str, int]:
    path = Path(arg.path)
    return {"lines": len(path.read_text().splitlines()) if path.exists() else 0}


@tool(capability="files.append", state=_line_count)
async def append_if_unchanged(arg: Guarded) -> Lines:
    """Append only if the file still has the line count the step was planned against."""
    return Lines(lines=await asyncio.to_thread(_append, Path(arg.path), arg.line))


class Tagged(BaseModel):
    """An argument whose set iterates in an order each process's ``PYTHONHASHSEED`` picks."""

    path: str
    tags: set[str]
    weight: float = 1.0
    limits: dict[str, float] = {}


@tool(capability="files.append")
async def append_tags(arg: Tagged) -> Lines:
    line = " ".join(sorted(arg.tags))
    return Lines(lines=await asyncio.to_thread(_append, Path(arg.path), line))


TEST_TOOLS = {
    "hold_and_append": hold_and_append,
    "reserve_slot": reserve_slot,
    "append_if_unchanged": append_if_unchanged,
    "append_tags": append_tags,
}
register_agent_tool(hold_and_append)


class Call(BaseModel):
    tool: str
    arg: dict[str, Any]
    step: str
    performer: str = "agent"
    key: str | None = None
    precondition: Any = None


@workflow.defn
class StepsWorkflow:
    """Runs tool calls in order; typed errors fail the workflow."""

    @workflow.run
    async def run(self, calls: list[Call]) -> list[dict[str, Any] | None]:
        outputs: list[dict[str, Any] | None] = []
        for call in calls:
            out = await run_tool(
                TEST_TOOLS[call.tool],
                call.arg,
                step=call.step,
                performer=call.performer,
                key=call.key,
                precondition=call.precondition,
                options=ActivityConfig(heartbeat_timeout=timedelta(seconds=2)),
            )
            outputs.append(out.model_dump() if out is not None else None)
        return outputs


@workflow.defn
class ModelCallWorkflow:
    """One recorded model call under an explicit key."""

    @workflow.run
    async def run(self, request: ModelRequest, key: str) -> dict[str, Any]:
        response = await run_tool(MODEL_CALL, request, step="model", performer="agent", key=key)
        return response.model_dump()


@workflow.defn
class PlainCallWorkflow:
    """Misuse: schedules a @tool with plain execute_activity instead of run_tool."""

    @workflow.run
    async def run(self, path: str) -> None:
        await workflow.execute_activity(
            append_line,
            AppendLine(path=path, line="plain"),
            start_to_close_timeout=timedelta(seconds=10),
        )


@workflow.defn
class NotifyWorkflow:
    """Posts one message whose acknowledgement is lost: the step parks."""

    @workflow.run
    async def run(self, outbox: str) -> str:
        message = PostMessage(outbox=outbox, channel="ops", text="hi", lose_ack=True)
        posted = await run_tool(post_message, message, step="notify", performer="agent")
        return posted.message_id


@workflow.defn
class OptionsWorkflow:
    """Two appends: one with the plugin's options, one with its own (no heartbeat
    timeout: ``timedelta(0)``)."""

    @workflow.run
    async def run(self, path: str) -> None:
        await run_tool(append_line, AppendLine(path=path, line="a"), step="a", performer="agent")
        await run_tool(
            append_line,
            AppendLine(path=path, line="b"),
            step="b",
            performer="agent",
            options=ActivityConfig(
                start_to_close_timeout=timedelta(seconds=50), heartbeat_timeout=timedelta(0)
            ),
        )


@workflow.defn
class WaitsBeforeToolsWorkflow:
    """Waits for signal ``go`` before its one tool call: the plugin's handlers must answer
    while no tool has run."""

    def __init__(self) -> None:
        self._go = False

    @workflow.signal
    def go(self) -> None:
        self._go = True

    @workflow.run
    async def run(self, path: str) -> None:
        await workflow.wait_condition(lambda: self._go)
        await run_tool(append_line, AppendLine(path=path, line="went"), step="a", performer="agent")


@workflow.defn
class ToolFromUpdateWorkflow:
    """Calls its tool from an update handler: ``run_tool`` finds its run's ledger state
    there too, and the workflow object holds only its own attributes."""

    def __init__(self) -> None:
        self._done = False

    @workflow.update
    async def append(self, path: str) -> list[str]:
        line = AppendLine(path=path, line="from an update")
        await run_tool(append_line, line, step="u", performer="agent")
        self._done = True
        return sorted(vars(self))

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: self._done)


@workflow.defn
class OwnReconcileWorkflow:
    """A workflow with a signal of its own named ``reconcile``, and no ledgered call."""

    def __init__(self) -> None:
        self._heard: list[str] = []

    @workflow.signal(name="reconcile")
    def own_reconcile(self, word: str) -> None:
        self._heard.append(word)

    @workflow.run
    async def run(self) -> list[str]:
        await workflow.wait_condition(lambda: bool(self._heard))
        return self._heard
