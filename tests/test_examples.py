"""The example apps (``examples/<name>/``): every module imports, and the plan example's
worker and starter run as processes against the session's dev server."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
import shlex
import signal
import socket
import sys
import threading
import urllib.request
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from temporal_ledger.ledger import Ledger
from temporalio.client import WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment

from tests.temporal_support import ROOT, lines, reset_to_first_task, temporal_cli

pytestmark = pytest.mark.timeout(180)

#: The Temporal samples layout: every example folder holds these four modules.
LAYOUT = ("activities", "workflows", "worker", "starter")
EXAMPLES = sorted(
    p.parent.name for p in (ROOT / "examples").glob("*/__init__.py") if p.parent.is_dir()
)


def test_every_example_follows_the_samples_layout() -> None:
    assert {"agent", "approval", "plan", "probe", "tickets"} <= set(EXAMPLES)
    for name in EXAMPLES:
        missing = [m for m in LAYOUT if not (ROOT / "examples" / name / f"{m}.py").is_file()]
        assert not missing, f"examples/{name} lacks {missing}"
    for name, test_file in OWN_ENVIRONMENT.items():
        assert name in EXAMPLES and (ROOT / test_file).is_file(), (name, test_file)


#: Examples whose framework installs only in an environment of its own, with the test file
#: that runs them there (scripts/test-strands).
OWN_ENVIRONMENT = {"strands": "tests/test_strands_example.py"}


@pytest.mark.parametrize(
    "module",
    [f"examples.{n}.{m}" for n in EXAMPLES if n not in OWN_ENVIRONMENT for m in LAYOUT],
)
def test_example_module_imports(module: str) -> None:
    check_example_module(module)


def check_example_module(module: str) -> None:
    """The module imports, says what it is, and a worker or starter how to run it."""
    imported = importlib.import_module(module)
    assert imported.__doc__, f"{module} says nothing about how to run it"
    if module.endswith((".worker", ".starter")):
        assert callable(imported.parse_args) and callable(imported.main)
        assert "python -m examples." in imported.__doc__


# -- the plan example, end to end -----------------------------------------------------------


@contextlib.asynccontextmanager
async def worker_process(
    *args: str, example: str = "plan", python: str | Path = sys.executable, cwd: Path = ROOT
) -> AsyncIterator[asyncio.subprocess.Process]:
    """``python -m examples.EXAMPLE.worker ARGS`` (in ``cwd``, by default the repository's
    root) until it says it is ready; SIGTERM on exit (what Ctrl-C does), SIGKILL to its
    process group if it does not stop."""
    process = await asyncio.create_subprocess_exec(
        str(python),
        "-u",
        "-m",
        f"examples.{example}.worker",
        *args,
        cwd=cwd,
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
        process.said = b"".join(seen).decode()  # type: ignore[attr-defined]
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


async def run_starter(*args: str, example: str = "plan") -> tuple[str, Any]:
    """``python -m examples.EXAMPLE.starter ARGS``: its workflow id and its result (JSON)."""
    fields = await starter_lines(*args, example=example)
    return fields["workflow id"], json.loads(fields["result"])


async def starter_lines(*args: str, example: str) -> dict[str, str]:
    """``python -m examples.EXAMPLE.starter ARGS``: the ``name: value`` lines it prints."""
    return (await starter_output(*args, example=example)).fields


@dataclass
class Printed:
    """What a starter printed: all of it (stdout and stderr), and its ``name: value`` lines."""

    text: str
    fields: dict[str, str]


async def starter_output(
    *args: str,
    example: str,
    python: str | Path = sys.executable,
    cwd: Path = ROOT,
    within: float = 90,
) -> Printed:
    """``python -m examples.EXAMPLE.starter ARGS``, which must exit 0: what it printed."""
    process = await asyncio.create_subprocess_exec(
        str(python),
        "-m",
        f"examples.{example}.starter",
        *args,
        cwd=cwd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), within)
    finally:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
    text = out.decode()
    assert process.returncode == 0, f"starter exited {process.returncode}: {text}{err.decode()}"
    fields = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)
    return Printed(text + err.decode(), fields)


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


#: What the examples' tools write; none of it may land in the repository they run from.
EFFECT_FILES = ("notes.txt", "refunds.jsonl", "refunds.log")


def root_effect_files() -> dict[str, tuple[int, int]]:
    """The examples' effect files in the repository's root, with their size and mtime."""
    found = {name: ROOT / name for name in EFFECT_FILES}
    return {n: (p.stat().st_size, p.stat().st_mtime_ns) for n, p in found.items() if p.exists()}


async def test_approval_example_acts_once_after_the_operator_approves_with_the_cli(
    temporal_address: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run as the docs say, from the repository's root and without --book: the refund is
    written to the examples' folder in the temporary directory, not the repository."""
    task_queue = f"examples-approval-{uuid.uuid4().hex[:8]}"
    common = ["--address", temporal_address, "--task-queue", task_queue]
    # The processes' temporary directory (no SUPPORT_DIR): where the default folder is.
    monkeypatch.delenv("SUPPORT_DIR", raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    book = tmp_path / "temporal-ledger-examples" / "refunds.log"
    in_root = root_effect_files()
    ledger = f"sqlite:///{tmp_path / 'ledger.db'}"
    async with worker_process(*common, "--ledger", ledger, example="approval"):
        starter = await asyncio.create_subprocess_exec(
            sys.executable, "-u", "-m", "examples.approval.starter", *common,
            "--order", "A-7", "--amount-cents", "2000",
            cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        try:
            assert starter.stdout is not None
            said: dict[str, str] = {}
            while "approve with" not in said:
                line = (await asyncio.wait_for(starter.stdout.readline(), 60)).decode()
                assert line, f"the starter stopped early: {said}"
                name, _, value = line.strip().partition(": ")
                said[name] = value
            pending = json.loads(said["awaiting approval"])
            assert pending["arguments"]["amount_cents"] == 2000 and not book.exists()
            # The printed command pasted unchanged, under the example's allow-all policy:
            # refused, its placeholders named, and no refund made.
            pasted = shlex.split(said["approve with"])
            code, refusal = await temporal_cli(temporal_address, *pasted[1:], check=False)
            assert code != 0 and "placeholder 'YOUR-NAME'" in refusal, refusal
            assert not book.exists()
            # The printed command, as an operator fills it in.
            command = said["approve with"].replace("YOUR-NAME", "lead-ann").replace("WHY", "ok")
            words = shlex.split(command)
            assert words[:4] == ["temporal", "workflow", "update", "execute"]
            await temporal_cli(temporal_address, *[w for w in words[1:]])
            out = (await asyncio.wait_for(starter.stdout.read(), 60)).decode()
            await starter.wait()
        finally:
            if starter.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(starter.pid, signal.SIGKILL)
                await starter.wait()
    result = json.loads(out.split("result: ", 1)[1])
    assert said["book"] == str(book)
    assert lines(book) == [f"{result['refund_id']} A-7 2000 key={pending['key']}"]
    assert root_effect_files() == in_root, "the example wrote into the repository's root"


async def test_probe_example_settles_a_lost_reply_without_parking(
    temporal_address: str, tmp_path: Path
) -> None:
    from examples.probe.far_side import OrderService

    service = OrderService(0, lose_replies=1)
    threading.Thread(target=service.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{service.server_address[1]}"
    task_queue = f"examples-probe-{uuid.uuid4().hex[:8]}"
    common = ["--address", temporal_address, "--task-queue", task_queue]
    ledger = f"sqlite:///{tmp_path / 'ledger.db'}"
    try:
        async with worker_process(*common, "--ledger", ledger, example="probe"):
            printed = await starter_lines(*common, "--url", url, example="probe")
    finally:
        service.shutdown()
        service.server_close()
    assert json.loads(printed["result"]) == {"order_id": "O-1", "item": "book", "quantity": 1}
    # The far side filed the order under the key's one wire form; the starter prints the
    # ledger's key, which `show` takes.
    key = printed["ledger key"]
    assert list(service.orders) == [Ledger.wire_key(key)]
    show = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "temporal_ledger.ledger", "--db", ledger, "show", key,
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    shown, _ = await show.communicate()
    assert show.returncode == 0 and b"effect_confirmed by probe:place_order" in shown


@contextlib.asynccontextmanager
async def tickets_far_side(*args: str) -> AsyncIterator[str]:
    """``python -m examples.tickets.far_side --port 0 ARGS``: its URL, until the block ends."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-u", "-m", "examples.tickets.far_side", "--port", "0", *args,
        cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        said = (await asyncio.wait_for(process.stdout.readline(), 30)).decode()
        assert said.startswith("ticket service on http://"), said
        yield said.split(" on ", 1)[1].strip()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        await process.wait()


async def test_tickets_example_files_one_ticket_on_its_far_side_despite_a_lost_reply(
    temporal_address: str, tmp_path: Path
) -> None:
    """The far side, the worker and the starter as their docs run them: the far side files
    the ticket and loses the reply; the retry under the same key gets the same ticket."""
    task_queue = f"examples-tickets-{uuid.uuid4().hex[:8]}"
    common = ["--address", temporal_address, "--task-queue", task_queue]
    ledger = f"sqlite:///{tmp_path / 'ledger.db'}"
    async with (
        tickets_far_side("--lose-replies", "1") as url,
        worker_process(*common, "--ledger", ledger, example="tickets"),
    ):
        printed = await starter_lines(
            *common, "--url", url, "--title", "api down", example="tickets"
        )
        listed = await asyncio.to_thread(_get_json, f"{url}/tickets")
    key = printed["ledger key"]
    assert json.loads(printed["result"]) == {
        "ticket_id": "T-1",
        "status": 200,
        "already_done": False,
    }
    # One ticket, filed under the key exactly as the header carried it.
    assert listed == [
        {
            "ticket_id": "T-1",
            "title": "api down",
            "body": "",
            "idempotency_key": Ledger.wire_key(key),
        }
    ]


async def test_tickets_starter_says_when_no_far_side_answers(temporal_address: str) -> None:
    """Without a far side the call is never sent and the ledger would retry it for as long
    as the run lives: the starter says so and exits instead of hanging."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        nobody = f"http://127.0.0.1:{probe.getsockname()[1]}"
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "examples.tickets.starter", "--address", temporal_address,
        "--url", nobody, cwd=ROOT, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 2, out.decode() + err.decode()
    assert f"no far side answers at {nobody}" in err.decode()
    assert "python -m examples.tickets.far_side" in err.decode()


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.loads(answer.read())


@pytest.mark.parametrize("example", ["openai_agents", "pydantic_ai", "google_adk", "langgraph"])
async def test_agent_examples_refund_and_note_once_even_when_reset(
    example: str, temporal_env: WorkflowEnvironment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each agent example's worker and starter as docs/agents.md runs them (Strands' runs
    in its own environment: tests/test_strands_example.py)."""
    await agent_example_refunds_and_notes_once(example, temporal_env, tmp_path, monkeypatch)


async def agent_example_refunds_and_notes_once(
    example: str,
    temporal_env: WorkflowEnvironment,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    python: str | Path = sys.executable,
    cwd: Path = ROOT,
    ledger: bool = True,
) -> None:
    """An agent example's worker and starter as docs/agents.md runs them, by default from
    the repository's root (``cwd``: a user's folder holding a copy of ``examples/``, run
    by ``python`` of a venv with the wheel); then a reset of the finished run replays every
    tool call and model answer from the ledger. With ``ledger=False`` the worker runs with
    ``--no-ledger``, and the same reset refunds and notes again: what the ledger prevents.
    The effects land in the examples' folder in the temporary directory, never in the
    repository."""
    address = temporal_env.client.service_client.config.target_host
    # The processes' temporary directory (no SUPPORT_DIR): where the default folder is.
    monkeypatch.delenv("SUPPORT_DIR", raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the worker process inherits it
    folder = tmp_path / "temporal-ledger-examples"
    in_root = root_effect_files()
    task_queue = f"examples-{example}-{uuid.uuid4().hex[:8]}"
    common = ["--address", address, "--task-queue", task_queue]
    ledgered = ["--ledger", f"sqlite:///{tmp_path / 'ledger.db'}"] if ledger else ["--no-ledger"]
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # the model is scripted
    async with worker_process(
        *common, *ledgered, example=example, python=python, cwd=cwd
    ) as worker:
        printed = await starter_output(*common, example=example, python=python, cwd=cwd)
        workflow_id = printed.fields["workflow id"]
        answer = json.loads(printed.fields["result"])
        assert answer == "done: refunded 1250 cents on A-1 | note 1 on T-7"
        first = await temporal_env.client.get_workflow_handle(workflow_id).describe()
        reset_run = await reset_to_first_task(
            address, temporal_env.client, workflow_id, first.run_id, reason="test: replay"
        )
        again = await temporal_env.client.get_workflow_handle(
            workflow_id, run_id=reset_run
        ).result()
    # Ledgered, the reset run's tool calls are the first run's, replayed; without the
    # ledger they act again: a second refund, and a second note on the ticket.
    times = 1 if ledger else 2
    assert again == f"done: refunded 1250 cents on A-1 | note {times} on T-7"
    assert lines(folder / "notes.txt") == ["T-7: refunded A-1"] * times
    assert len(lines(folder / "refunds.jsonl")) == times
    assert root_effect_files() == in_root, "the example wrote into the repository's root"
    # Nothing here needs an OpenAI key: neither process may warn that it is missing.
    assert worker.stdout is not None
    said = worker.said + (await worker.stdout.read()).decode() + printed.text
    assert "OPENAI_API_KEY" not in said, said


def refuses_no_ledger_with_a_policy(
    module: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--no-ledger`` leaves the ledger out: with ``--policy`` (or ``--ledger``) the
    worker says so and exits 2, as argparse does, instead of ignoring the option."""
    parse_args = importlib.import_module(module).parse_args
    for option in (["--policy", "policy.toml"], ["--ledger", "sqlite:///x.db"]):
        monkeypatch.setattr(sys, "argv", [module, "--no-ledger", *option])
        with pytest.raises(SystemExit) as exited:
            parse_args()
        assert exited.value.code == 2
        assert "--no-ledger runs without a ledger" in capsys.readouterr().err
    monkeypatch.setattr(sys, "argv", [module, "--no-ledger"])
    assert parse_args().no_ledger


@pytest.mark.parametrize("example", ["google_adk", "langgraph"])
def test_agent_worker_refuses_no_ledger_with_a_policy(
    example: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    refuses_no_ledger_with_a_policy(f"examples.{example}.worker", monkeypatch, capsys)
