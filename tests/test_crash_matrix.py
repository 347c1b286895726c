"""The crash matrix: every way of calling a tool, killed at every moment of a call.

Ten ways (``run_tool`` with a ``@tool`` and with a retry-safe one, a generic activity
ledgered by pattern, OpenAI Agents ``activity_as_tool`` and MCP ``call_tool``, a
pydantic-ai tool and MCP tool, a Google ADK ``activity_as_tool`` tool and MCP
``call-tool``, a LangGraph tool call in a ``ToolNode``) times five crash points (a:
before the ledger, b: before the effect, c: after the effect, d: after the record, e:
the ledger's connections cut mid-call), against a real Temporal dev server, a real
PostgreSQL ledger and worker processes that are really killed (SIGKILL to the process
group) while every call of a crash point is held at that moment. A new worker then takes
over. Each cell records the effects in the world (lines in the cell's file), whether the
run parked (search attribute ``LedgerOpenEffects``, query ``open_effects``) and what the
operator did: where a run parks, the operator looks at the file and answers with the
real ``temporal`` CLI (``temporal workflow update execute --name reconcile``). Every
cell must end with exactly one effect, and every unknown effect must have parked. The
retry-safe tool claims nothing before it acts (the ledger's one-write path): where it
was killed after its effect, the new attempt acts again and its far side dedupes by the
key; it never parks.

The observed table is the page ``docs/crash-matrix.md``: the test fails when they
differ. ``LEDGER_WRITE_CRASH_MATRIX=1 .venv/bin/pytest tests/test_crash_matrix.py``
rewrites the page from the run. ``LEDGER_CRASH_WAYS=lg_tool,generic`` runs those ways
only; the page's rows of the others stand. Strands' two ways (``activity_as_tool`` and
MCP ``call-tool``) run through this same harness in .venv-strands, where Strands installs
(it needs mcp<2): ``tests/test_crash_matrix_strands.py``, with a worker of its own and a
section of its own on the page.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import difflib
import json
import os
import shlex
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from temporal_ledger.ledger import Ledger
from temporalio.api.enums.v1 import TimeoutType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.common import SearchAttributeKey
from temporalio.contrib.pydantic import pydantic_data_converter

from tests import pg
from tests.crash_points import AFTER_EFFECT, AFTER_RECORD, ARM, KILLED, STOPS, WORLD, output_for
from tests.temporal_support import ROOT, listed_as_parked, query_json, send_update

# alone: its heartbeats and leases are 10 s (tests/crash_worker.py); beside another
# worker's tests on two cores its live calls missed them (tests/conftest.py).
pytestmark = [pytest.mark.postgres, pytest.mark.alone, pytest.mark.timeout(420)]

PAGE = ROOT / "docs" / "crash-matrix.md"
REWRITE = "LEDGER_WRITE_CRASH_MATRIX"
BEGIN = "<!-- crash-matrix: begin (written by tests/test_crash_matrix.py) -->"
END = "<!-- crash-matrix: end -->"
#: How long one phase may take before the test says where it is stuck.
PATIENCE = 120.0
OPEN_EFFECTS = SearchAttributeKey.for_int("LedgerOpenEffects")


@dataclasses.dataclass(frozen=True)
class Way:
    """One way of calling a tool: its workflow, worker and what the operator answers."""

    name: str
    title: str
    workflow: str
    queue: str
    #: The workflow's argument for a cell (the agents get a one-line script).
    argument: Callable[[str], str]
    #: The tool's output, as an operator confirms it, for the output text.
    confirmed: Callable[[str], Any]
    #: What the run returns when the tool returned the output text.
    answer: Callable[[str], str]
    #: The capability of the call's ledger key.
    capability: str
    #: The tool is retry-safe (its far side dedupes by the key): it acts first and the
    #: ledger records its request and outcome in one write, with no claim.
    retry_safe: bool = False
    #: The call is made inside a retry-safe activity that is ledgered too (a LangGraph
    #: tool node), under the node's key and the call's id: a crash after the node's
    #: record replays the node (and so the call), which is the replay counted.
    in_node: bool = False


def _script(tool: str) -> Callable[[str], str]:
    return lambda cell: f"{tool} {json.dumps({'cell': cell})}"


def _done(text: str) -> str:
    return f"done: {text}"


def _same(text: str) -> Any:
    return text


WAYS = [
    Way(
        "run_tool",
        "`run_tool` (a `@tool`)",
        "CrashRunToolWorkflow",
        "plain",
        _same,
        lambda text: {"text": text},
        _same,
        "files.append",
    ),
    Way(
        "run_tool_safe",
        "`run_tool` (a `@tool(retry_safe=True)`, deduped by the key)",
        "CrashRetrySafeWorkflow",
        "plain",
        _same,
        lambda text: {"text": text},
        _same,
        "files.append_once",
        retry_safe=True,
    ),
    Way(
        "generic",
        "generic activity (`LedgerPlugin(ledger_activities=[...])`)",
        "CrashGenericWorkflow",
        "plain",
        _same,
        _same,
        _same,
        "activity.crash_generic_append",
    ),
    Way(
        "oai_tool",
        "OpenAI Agents `activity_as_tool`",
        "CrashOpenAIWorkflow",
        "oai",
        _script("crash_oai_append"),
        _same,
        _done,
        "activity.crash_oai_append",
    ),
    Way(
        "oai_mcp",
        "OpenAI Agents MCP `call_tool`",
        "CrashOpenAIWorkflow",
        "oai",
        _script("append_note"),
        lambda text: [{"type": "text", "text": text}],
        _done,
        "activity.temporalio.mcp.notes.call-tool",
    ),
    Way(
        "pai_tool",
        "pydantic-ai tool (`TemporalDurability`)",
        "CrashPydanticWorkflow",
        "pai",
        _script("append_line"),
        _same,
        _done,
        "activity.agent.crash_agent.toolset._agent_.call_tool",
    ),
    Way(
        "pai_mcp",
        "pydantic-ai MCP tool",
        "CrashPydanticWorkflow",
        "pai",
        _script("append_note"),
        _same,
        _done,
        "activity.agent.crash_agent.mcp_server.notes.call_tool",
    ),
    Way(
        "adk_tool",
        "Google ADK `activity_as_tool`",
        "CrashAdkWorkflow",
        "adk",
        _script("crash_adk_append"),
        _same,
        _done,
        "activity.crash_adk_append",
    ),
    Way(
        "adk_mcp",
        "Google ADK MCP `call-tool` (`TemporalMcpToolSet`)",
        "CrashAdkWorkflow",
        "adk",
        _script("append_note"),
        lambda text: {"content": [{"type": "text", "text": text}]},
        _done,
        "activity.crash-notes-call-tool",
    ),
    Way(
        "lg_tool",
        "LangGraph tool call in a `ToolNode` (`ledger_tool_calls`)",
        "CrashLangGraphWorkflow",
        "lg",
        _same,
        lambda text: {"content": text},
        _done,
        "activity.crash_graph.tools.crash_lg_append",
        in_node=True,
    ),
]
#: ``LEDGER_CRASH_WAYS=lg_tool,generic`` runs those rows only; the page's other rows stand.
SELECT = "LEDGER_CRASH_WAYS"


def selected_ways() -> list[Way]:
    names = [n for n in os.environ.get(SELECT, "").split(",") if n]
    unknown = set(names) - {way.name for way in WAYS}
    assert not unknown, f"{SELECT}: no such way: {sorted(unknown)}"
    return [way for way in WAYS if not names or way.name in names]


POINTS = {
    "a": "a. killed before the ledger",
    "b": "b. killed before the effect",
    "c": "c. killed after the effect",
    "d": "d. killed after the record",
    "e": "e. ledger connection lost",
}
#: What the design promises at each point (DESIGN.md, "The rule, in order"): the call
#: runs once, the new attempt replays the record, or the run parks and the operator's
#: verdict follows from the world.
PROMISED = {
    "a": "ran",  # no claim, no marker: the new worker's attempt is the first to act
    "b": "no_effect_confirmed",  # marker, no effect: the crash gap parks; nothing to see
    "c": "effect_confirmed",  # marker and effect: the crash gap parks; the line is there
    "d": "replayed",  # a final outcome: the new attempt replays it
    "e": "ran",  # the completion is retried on a new connection until it commits
}
#: The same for a retry-safe call (DESIGN.md, "Retry-safe calls"): nothing is recorded
#: before it acts, so a new attempt acts again until one outcome is recorded, and the
#: far side dedupes by the key; a recorded outcome is replayed; nothing parks.
PROMISED_RETRY_SAFE = {
    "a": "ran",  # nothing recorded: the new attempt acts
    "b": "ran",  # no claim, no marker, no effect: the new attempt acts
    "c": "ran",  # an effect, no record: the new attempt acts again, the far side dedupes
    "d": "replayed",  # the one write landed: the new attempt replays it
    "e": "ran",  # the one write is retried on a new connection until it commits
}


@dataclasses.dataclass
class Outcome:
    """What one cell showed."""

    way: Way
    point: str
    workflow_id: str
    #: Lines in the cell's file at the crash (the kill, or the cut of the connections).
    effects_at_crash: int = 0
    #: Lines in it when the run parked, or when it ended without parking.
    effects_seen: int = 0
    #: Lines in all, once the run completed.
    effects: int = 0
    #: Times the tool acted, deduped by the far side or not.
    acts: int = 0
    #: The run's ``LedgerOpenEffects`` (as described) counted the call, and query
    #: ``open_effects`` listed it; ``temporal workflow list`` found the run by it.
    parked: bool = False
    listed: bool = False
    #: The run's history upserted ``LedgerOpenEffects`` above zero.
    parked_in_history: bool = False
    #: The timeouts Temporal gave the run's activity attempts (its history's).
    timeouts: list[str] = dataclasses.field(default_factory=list)
    verdict: str | None = None
    result: str | None = None
    #: From the ledger, for the call's key.
    started: int = 0
    replays: int = 0
    unknown: bool = False
    verdicts: list[str] = dataclasses.field(default_factory=list)

    @property
    def cell(self) -> str:
        return f"{self.way.name}.{self.point}"

    @property
    def ended(self) -> str:
        if self.parked:
            return self.verdict or "parked, no verdict"
        return "replayed" if self.replays else "ran"

    @property
    def promised(self) -> str:
        return (PROMISED_RETRY_SAFE if self.way.retry_safe else PROMISED)[self.point]


def acts_of(world: Path, cell: str) -> int:
    path = world / f"{cell}.acts"
    return len(path.read_text(encoding="utf-8").splitlines()) if path.exists() else 0


def lines_of(world: Path, cell: str) -> int:
    path = world / f"{cell}.txt"
    return len(path.read_text(encoding="utf-8").splitlines()) if path.exists() else 0


@contextlib.asynccontextmanager
async def crash_worker(
    address: str,
    ledger_url: str,
    prefix: str,
    log: Path,
    env: dict[str, str],
    module: str = "tests.crash_tools",
) -> AsyncIterator[asyncio.subprocess.Process]:
    """``python -m tests.crash_tools`` (or ``module``): the frameworks' workers in a
    process group of their own, logging to ``log`` (a pipe nobody reads would fill and
    stall it); yielded once ready, killed on the way out."""
    with log.open("ab") as out:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-u",
            "-m",
            module,
            address,
            ledger_url,
            prefix,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT), **env},
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 60
        while b"WORKER READY" not in log.read_bytes():
            if process.returncode is not None or time.monotonic() > deadline:
                raise AssertionError(f"the crash worker did not start:\n{log.read_text()}")
            await asyncio.sleep(0.1)
        yield process
    finally:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()


class Matrix:
    """One run of the matrix: its world, ledger, task queues and cells; its ways (rows)
    and the worker module that serves them."""

    def __init__(
        self,
        client: Client,
        address: str,
        ledger_url: str,
        folder: Path,
        ways: list[Way] = WAYS,
        worker_module: str = "tests.crash_tools",
    ) -> None:
        self.client = client
        self.ways = ways
        self.worker_module = worker_module
        self.address = address
        self.ledger_url = ledger_url
        self.world = folder / "world"
        self.world.mkdir()
        self.logs = folder
        self.prefix = f"crash-{uuid.uuid4().hex[:8]}"
        self.handles: dict[str, WorkflowHandle[Any, str]] = {}
        self.outcomes: dict[str, Outcome] = {}

    def worker(self, name: str, armed: str) -> contextlib.AbstractAsyncContextManager[Any]:
        env = {WORLD: str(self.world), ARM: armed}
        log = self.logs / f"worker-{name}.log"
        return crash_worker(
            self.address, self.ledger_url, self.prefix, log, env, self.worker_module
        )

    async def start(self, point: str) -> list[str]:
        """Start the point's cell of every way; their names."""
        cells = []
        for way in self.ways:
            cell = f"{way.name}.{point}"
            handle = await self.client.start_workflow(
                way.workflow,
                way.argument(cell),
                id=f"crash-{cell}-{uuid.uuid4().hex[:8]}",
                task_queue=f"{self.prefix}-{way.queue}",
            )
            self.handles[cell] = handle
            self.outcomes[cell] = Outcome(way, point, handle.id)
            cells.append(cell)
        return cells

    async def held(self, cells: list[str]) -> None:
        """Wait until every cell's call is held at its crash point."""
        deadline = time.monotonic() + PATIENCE
        while True:
            missing = [c for c in cells if not (self.world / f"{c}.at").exists()]
            if not missing:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"never reached their crash point: {missing}")
            await asyncio.sleep(0.1)

    def crashed(self, cells: list[str]) -> None:
        """Count the cells' effects at the crash: a line already when held after it."""
        for cell in cells:
            outcome = self.outcomes[cell]
            outcome.effects_at_crash = lines_of(self.world, cell)
            acted = STOPS[outcome.point] in (AFTER_EFFECT, AFTER_RECORD)
            assert outcome.effects_at_crash == int(acted), f"{cell}: {outcome.effects_at_crash}"

    async def settle(self, cell: str) -> Outcome:
        """Follow the cell's run to its end, answering as the operator where it parks."""
        handle, outcome = self.handles[cell], self.outcomes[cell]
        parked = await self._parked_or_done(cell, handle)
        outcome.effects_seen = lines_of(self.world, cell)
        if parked is not None:
            outcome.parked = True
            await self._operate(outcome)
        try:
            outcome.result = await asyncio.wait_for(handle.result(), PATIENCE)
        except Exception as exc:
            raise AssertionError(f"{cell}: the run did not complete: {exc!r}") from exc
        outcome.effects = lines_of(self.world, cell)
        outcome.acts = acts_of(self.world, cell)
        outcome.parked_in_history, outcome.timeouts = await _read_history(handle)
        return outcome

    async def _parked_or_done(
        self, cell: str, handle: WorkflowHandle[Any, str]
    ) -> dict[str, Any] | None:
        """Poll the run's description (the server's, which asks no worker) until it
        completes or its ``LedgerOpenEffects`` says it parked; then its query must list
        the call."""
        deadline = time.monotonic() + PATIENCE
        while time.monotonic() < deadline:
            described = await handle.describe()
            if described.status == WorkflowExecutionStatus.COMPLETED:
                return None
            if described.status != WorkflowExecutionStatus.RUNNING:
                raise AssertionError(f"{cell}: the run ended {described.status}")
            if described.typed_search_attributes.get(OPEN_EFFECTS):
                found = await handle.query("open_effects")
                assert len(found) == 1, f"{cell}: parked, and its query lists {found}"
                return found[0]
            await asyncio.sleep(1.0)
        raise AssertionError(f"{cell}: the run neither parked nor completed")

    async def _operate(self, outcome: Outcome) -> None:
        """The operator: finds the run among those waiting, reads what it waits for,
        looks at the world, and answers with ``temporal workflow update execute``."""
        cell, workflow_id = outcome.cell, outcome.workflow_id
        outcome.listed = await self._listed(workflow_id)
        [waiting] = await query_json(self.address, workflow_id, "open_effects")
        answer = json.loads(shlex.split(waiting["update_command"])[-1])
        seen = lines_of(self.world, cell)
        if seen:
            output = outcome.way.confirmed(output_for(cell, seen))
            answer.update(verdict="effect_confirmed", output=output)
            answer["basis"] = f"line {seen} of {cell}.txt is the call's"
        else:
            answer.pop("output", None)
            answer.update(verdict="no_effect_confirmed", basis=f"{cell}.txt has no line")
        answer["actor"] = "ops-matrix"
        status, printed = await send_update(self.address, workflow_id, "reconcile", answer)
        assert status == 0, f"{cell}: the verdict was refused: {printed}"
        outcome.verdict = answer["verdict"]

    async def _listed(self, workflow_id: str) -> bool:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if await listed_as_parked(self.address, workflow_id):
                return True
            await asyncio.sleep(0.5)
        return False

    def read_ledger(self) -> None:
        """Each cell's call, as the ledger recorded it; the ledger has nothing open."""
        with Ledger.open(self.ledger_url) as ledger:
            events = ledger.events()
            # Beside the workers' logs, for a cell that ends unlike the page.
            with (self.logs / "ledger-events.jsonl").open("w", encoding="utf-8") as dump:
                for event in events:
                    dump.write(event.model_dump_json() + "\n")
            capability = {
                e.key: e.payload.get("capability") for e in events if e.type == "action.requested"
            }
            for outcome in self.outcomes.values():
                keys = {
                    key
                    for key, cap in capability.items()
                    if cap == outcome.way.capability and key.startswith(outcome.workflow_id + "/")
                }
                assert len(keys) == 1, f"{outcome.cell}: the tool's keys: {keys}"
                mine = [e for e in events if e.key in keys]
                completed = [e.payload for e in mine if e.type == "action.completed"]
                outcome.started = sum(e.type == "action.execution_started" for e in mine)
                replaying = keys | (
                    {key.rsplit("/", 1)[0] for key in keys} if outcome.way.in_node else set()
                )
                outcome.replays = sum(
                    bool(e.payload.get("replayed"))
                    for e in events
                    if e.key in replaying and e.type == "action.completed"
                )
                outcome.unknown = any(p.get("effect") == "unknown" for p in completed)
                outcome.verdicts = [
                    e.payload["verdict"] for e in mine if e.type == "action.reconciled"
                ]
            assert ledger.open_effects() == [], "the ledger still has open effects"
            report = ledger.verify()
            assert report.ok, report


async def _read_history(handle: WorkflowHandle[Any, str]) -> tuple[bool, list[str]]:
    """Whether the run's history shows it parked, and the timeouts Temporal gave its
    activity attempts (a later attempt's ``last_failure``): a problem's explanation."""
    parked, timeouts = False, []
    for event in (await handle.fetch_history()).events:
        if event.HasField("upsert_workflow_search_attributes_event_attributes"):
            fields = (
                event.upsert_workflow_search_attributes_event_attributes.search_attributes
            ).indexed_fields
            if "LedgerOpenEffects" in fields and json.loads(fields["LedgerOpenEffects"].data):
                parked = True
        elif event.HasField("activity_task_started_event_attributes"):
            failure = event.activity_task_started_event_attributes.last_failure
            if failure.HasField("timeout_failure_info"):
                kind = TimeoutType.Name(failure.timeout_failure_info.timeout_type)
                timeouts.append(kind.removeprefix("TIMEOUT_TYPE_").lower())
    return parked, timeouts


def _terminate_ledger_connections(ledger_url: str) -> int:
    """``pg_terminate_backend`` every session of the ledger's database; how many."""
    database = ledger_url.rsplit("/", 1)[1]
    admin = pg.admin_url()
    assert admin is not None
    with psycopg.connect(admin, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            (database,),
        ).fetchall()
    return sum(bool(row[0]) for row in rows)


async def _servers_ended(world: Path) -> list[int]:
    """The MCP servers the workers started that are still alive a while after their
    worker died (each wrote its pid under ``servers/``); killed, by pid, and named."""
    listed = world / "servers"
    pids = [int(p.name) for p in listed.glob("*")] if listed.exists() else []

    def alive(pid: int) -> bool:
        try:
            return "tests.crash_mcp" in Path(f"/proc/{pid}/cmdline").read_text()
        except OSError:
            return False

    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    survivors = [pid for pid in pids if alive(pid)]
    for pid in survivors:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return survivors


# -- the page ------------------------------------------------------------------------


def _short(outcome: Outcome) -> str:
    effects = f"{outcome.effects} effect" + ("" if outcome.effects == 1 else "s")
    if outcome.ended == "ran" and outcome.acts > 1:
        return f"{effects}: acted again, deduped by the key"
    says = {
        "ran": "ran once",
        "replayed": "replayed",
        "effect_confirmed": "parked → `effect_confirmed`",
        "no_effect_confirmed": "parked → `no_effect_confirmed`, ran once",
    }.get(outcome.ended, outcome.ended)
    return f"{effects}: {says}"


def _operator(outcome: Outcome) -> str:
    if outcome.ended == "ran" and outcome.acts > 1:
        return (
            "nothing to do: nothing was recorded, so the new attempt acted again; the far "
            "side deduped it by the key, and the one write recorded its outcome"
        )
    return {
        "ran": "nothing to do: the call ran once",
        "replayed": "nothing to do: the new attempt replayed the recorded outcome",
        "effect_confirmed": (
            "parked: the line is there, so `reconcile` `effect_confirmed` with the "
            "tool's output; the run goes on with it"
        ),
        "no_effect_confirmed": (
            "parked: no line, so `reconcile` `no_effect_confirmed`; the call runs once more"
        ),
    }.get(outcome.ended, outcome.ended)


#: A way's rows on the page: its row of the grid, and its rows of the cells.
Rows = tuple[str, list[str]]


def way_rows(way: Way, outcomes: dict[str, Outcome]) -> Rows:
    """The rows a run observed for ``way``."""
    grid = [_short(outcomes[f"{way.name}.{point}"]) for point in POINTS]
    cells = []
    for point in POINTS:
        o = outcomes[f"{way.name}.{point}"]
        parked = "yes" if o.parked else "no"
        cells.append(
            f"| {way.title} | {POINTS[point]} | {o.effects_at_crash} | {parked} | "
            f"{_operator(o)} | {o.effects} | {o.started} |"
        )
    return f"| {way.title} | " + " | ".join(grid) + " |", cells


def page_rows(way: Way) -> Rows:
    """The rows the page has for ``way`` (a way this run left out keeps them)."""
    mine = [
        line
        for line in (_generated_part(PAGE.read_text(encoding="utf-8")) or "").splitlines()
        if line.startswith(f"| {way.title} | ")
    ]
    assert len(mine) == 1 + len(POINTS), (
        f"docs/crash-matrix.md has no rows for {way.name}: run it ({SELECT}={way.name})"
    )
    return mine[0], mine[1:]


def render(rows: dict[str, Rows], ways: list[Way]) -> str:
    """The page's generated part for ``ways``: the grid, then one row per cell."""
    out = ["| Way of calling | " + " | ".join(POINTS.values()) + " |"]
    out.append("|---" * (len(POINTS) + 1) + "|")
    out += [rows[way.name][0] for way in ways]
    out += [
        "",
        "| Way of calling | Crash point | Effects at the crash | Parked | "
        "What the operator sees and does | Effects in all | Executions started |",
        "|---|---|---|---|---|---|---|",
    ]
    for way in ways:
        out += rows[way.name][1]
    return "\n".join(out) + "\n"


def _generated_part(page: str, begin: str = BEGIN, end: str = END) -> str | None:
    if begin not in page or end not in page:
        return None
    return page.split(begin, 1)[1].split(end, 1)[0].strip("\n") + "\n"


def check_page(
    table: str,
    begin: str = BEGIN,
    end: str = END,
    command: str = ".venv/bin/pytest tests/test_crash_matrix.py",
) -> None:
    """Compare the run's table with the page's section between ``begin`` and ``end``;
    with ``LEDGER_WRITE_CRASH_MATRIX=1``, write it into the page instead. ``command``
    runs the test again (for the message)."""
    page = PAGE.read_text(encoding="utf-8")
    if _generated_part(page, begin, end) is None:
        raise AssertionError(f"{PAGE} has no {begin!r} ... {end!r} section")
    if os.environ.get(REWRITE):
        before, rest = page.split(begin, 1)
        after = rest.split(end, 1)[1]
        PAGE.write_text(f"{before}{begin}\n\n{table}\n{end}{after}", encoding="utf-8")
        return
    checked_in = _generated_part(page, begin, end).strip("\n") + "\n"  # type: ignore[union-attr]
    if checked_in != table:
        diff = "".join(
            difflib.unified_diff(
                checked_in.splitlines(keepends=True),
                table.splitlines(keepends=True),
                "docs/crash-matrix.md",
                "this run",
            )
        )
        raise AssertionError(
            "docs/crash-matrix.md is not what this run observed. If the change is meant, "
            f"regenerate the page with {REWRITE}=1 {command} and review its diff:\n{diff}"
        )


# -- the test ------------------------------------------------------------------------


def _problems(outcomes: dict[str, Outcome]) -> list[str]:
    """Every cell: at most one effect, exactly one in the end, every unknown parked,
    the operator's verdict recorded, the run's answer the tool's, the design's promise."""
    problems = []
    for cell, o in outcomes.items():
        if o.effects_seen > 1 or o.effects != 1:
            problems.append(f"{cell}: {o.effects_seen} effects seen, {o.effects} in all")
        if o.parked and o.effects_seen != o.effects_at_crash:
            problems.append(f"{cell}: acted after the crash, before its verdict")
        if o.unknown and not (o.parked and o.listed and o.parked_in_history):
            problems.append(
                f"{cell}: the ledger recorded an unknown effect, but the run was not parked "
                f"and listed (query: {o.parked}, list: {o.listed}, history: "
                f"{o.parked_in_history})"
            )
        if o.parked != o.parked_in_history or (o.parked and not o.unknown):
            problems.append(
                f"{cell}: parked per query {o.parked}, per history {o.parked_in_history}, "
                f"unknown per ledger {o.unknown}"
            )
        if o.verdicts != ([o.verdict] if o.verdict else []):
            problems.append(f"{cell}: the ledger's verdicts {o.verdicts}, sent {o.verdict}")
        expected = o.way.answer(output_for(cell, 1))
        if o.result != expected:
            problems.append(f"{cell}: the run returned {o.result!r}, not {expected!r}")
        if o.ended != o.promised:
            timed_out = f" (Temporal timed out attempts: {o.timeouts})" if o.timeouts else ""
            problems.append(f"{cell}: {o.ended}, where the design promises {o.promised}{timed_out}")
        # Only a retry-safe call killed between its effect and its one write acts twice.
        # Known deviation at d: a worker that has not met the key takes the PostgreSQL
        # recorder's expectation of it (no record) for a vacant key and acts before its
        # one write finds the recorded outcome and replays it (Ledger._act_first). The far
        # side dedupes; the first outcome wins. Expect 1 there once the ledger reads first.
        acts = {2} if o.way.retry_safe and o.point == "c" else {1}
        if o.way.retry_safe and o.point == "d":
            acts = {1, 2}
        if o.acts not in acts:
            problems.append(f"{cell}: the tool acted {o.acts} times, not {sorted(acts)}")
        if o.way.retry_safe and o.started:
            problems.append(f"{cell}: a retry-safe call recorded {o.started} started markers")
    return problems


async def test_every_way_of_calling_a_tool_survives_every_crash_point_with_one_effect(
    temporal_address: str, postgres_url: str, tmp_path: Path
) -> None:
    client = await Client.connect(temporal_address, data_converter=pydantic_data_converter)
    matrix = Matrix(client, temporal_address, postgres_url, tmp_path, selected_ways())
    check_page(await run_matrix(matrix, page=WAYS))


async def run_matrix(matrix: Matrix, page: list[Way] | None = None) -> str:
    """Every cell of the matrix's ways: kill at a to d, cut the ledger's connections at
    e, follow every run to its end; check every cell; the table of the ``page``'s ways
    (by default the matrix's), with the page's rows for those this run left out."""
    began = time.monotonic()
    postgres_url = matrix.ledger_url
    try:
        # a-d: one worker, killed while the call of every cell is held at its moment.
        async with matrix.worker("killed", armed="".join(KILLED)) as doomed:
            cells = [cell for point in KILLED for cell in await matrix.start(point)]
            await matrix.held(cells)
            os.killpg(doomed.pid, signal.SIGKILL)
            await doomed.wait()
        matrix.crashed(cells)
        killed = time.monotonic()
        # A new worker takes over; it also holds the e cells after their effect.
        async with matrix.worker("new", armed="e"):
            await asyncio.gather(*(matrix.settle(cell) for cell in cells))
            taken_over = time.monotonic()
            # e: the ledger's connections are cut while every call is in its tool.
            held = await matrix.start("e")
            await matrix.held(held)
            cut = _terminate_ledger_connections(postgres_url)
            assert cut > 0, "no ledger connection to cut"
            matrix.crashed(held)
            for cell in held:
                (matrix.world / f"{cell}.go").touch()
            await asyncio.gather(*(matrix.settle(cell) for cell in held))
    finally:
        survivors = await _servers_ended(matrix.world)
    assert survivors == [], f"MCP servers outlived their worker: {survivors}"
    matrix.read_ledger()
    shown = page or matrix.ways
    table = render(
        {
            way.name: way_rows(way, matrix.outcomes) if way in matrix.ways else page_rows(way)
            for way in shown
        },
        shown,
    )
    print(
        f"\ncrash matrix: kill after {killed - began:.1f} s, taken over after "
        f"{taken_over - killed:.1f} s, e after {time.monotonic() - taken_over:.1f} s\n{table}"
    )
    problems = _problems(matrix.outcomes)
    assert not problems, "\n".join(problems) + "\n\n" + table
    return table
