"""A worker whose ledger cannot be used stops at start (issue 28, item 6).

A bad ledger URL, a missing folder or a missing extra used to start the worker fine; every
tool call then failed and was retried for ever. And ``worker.py --dev`` on a taken port
printed its own address as if its server had started. Each case here is a real worker
process (or a real worker) against the session's dev server, on loopback.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import time
import uuid
from pathlib import Path

import pytest
from temporal_ledger.activities import LedgerPlugin
from temporal_ledger.ledger import LedgerUnavailable
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from tests.temporal_support import ROOT, Setup, lines
from tests.temporal_tools import TEST_TOOLS, Call, StepsWorkflow

WORKER = ROOT / "worker.py"

#: Makes ``psycopg`` (and its pool) missing in the process, as when the ``[postgres]``
#: extra is not installed: the import system asks this finder first, and it refuses.
WITHOUT_PSYCOPG = """
import runpy, sys

class WithoutPsycopg:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("psycopg", "psycopg_pool", "psycopg_binary", "psycopg_c"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, WithoutPsycopg())
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


async def run_worker_py(
    *args: str, cwd: Path, without_psycopg: bool = False, within: float = 5.0
) -> tuple[int, str, str, float]:
    """Run ``worker.py`` until it exits; its status, stdout, stderr and seconds taken.
    It is killed (and the test fails) if it is still running after ``within`` seconds."""
    prefix = ["-c", WITHOUT_PSYCOPG] if without_psycopg else []
    started = time.monotonic()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        *prefix,
        str(WORKER),
        *args,
        cwd=cwd,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), within)
    except TimeoutError:
        os.killpg(process.pid, 9)
        out, err = await process.communicate()
        raise AssertionError(
            f"worker.py {' '.join(args)} still ran after {within} s: {err.decode()}"
        ) from None
    finally:
        if process.returncode is None:
            os.killpg(process.pid, 9)
            await process.wait()
    return process.returncode or 0, out.decode(), err.decode(), time.monotonic() - started


async def a_run_to_serve(client: Client, task_queue: str) -> WorkflowHandle:
    """A run waiting on the worker's task queue: a worker that polled would take its task."""
    return await client.start_workflow(
        "AnyWorkflow", id=f"to-serve-{uuid.uuid4().hex[:8]}", task_queue=task_queue
    )


async def untouched(handle: WorkflowHandle) -> bool:
    """No worker took the run's first task; then it is terminated, left to no one."""
    events = [event.event_type async for event in handle.fetch_history_events()]
    await handle.terminate(reason="test: the worker meant to serve it stopped at start")
    return EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED not in events


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "sqlite:///no/such/dir/l.db",
            "worker: ledger sqlite:///no/such/dir/l.db: folder {cwd}/no/such/dir does not "
            "exist: create it or pass another path (the path after sqlite:/// is relative to "
            "the working directory; for /no/such/dir/l.db write sqlite:////no/such/dir/l.db)",
        ),
        (
            "sqlite://x",
            "worker: ledger sqlite://x: a SQLite ledger URL has three slashes before the "
            "file's path: sqlite:///relative/path.db, or sqlite:////absolute/path.db",
        ),
        (
            "mysql://root:secret@127.0.0.1:3306/ledger",
            "worker: ledger mysql://root:***@127.0.0.1:3306/ledger: unsupported scheme 'mysql': "
            "use sqlite:///path/to/ledger.db (a file on this machine; sqlite:////abs/path.db "
            "for an absolute path) or postgresql://user@host:5432/db (a server; the "
            "'postgres' extra)",
        ),
    ],
)
async def test_a_worker_with_a_bad_ledger_url_exits_at_start_saying_how_to_fix_it(
    setup: Setup, tmp_path: Path, url: str, expected: str
) -> None:
    app = tmp_path / "app"
    app.mkdir()
    client = await Client.connect(setup.address)
    run = await a_run_to_serve(client, setup.task_queue)
    status, out, err, took = await run_worker_py(
        "--address", setup.address, "--task-queue", setup.task_queue, "--ledger", url,
        cwd=app,
    )  # fmt: skip
    assert status != 0 and took < 5
    assert err.splitlines()[-1] == expected.format(cwd=app)
    assert "Traceback" not in err and "secret" not in err
    assert "worker ready" not in out
    assert await untouched(run)
    assert list(app.iterdir()) == []  # no ledger file, no folder made


async def test_a_postgres_ledger_without_the_extra_exits_at_start_naming_it(
    setup: Setup, tmp_path: Path
) -> None:
    url = "postgresql://ledger@127.0.0.1:5432/ledger"
    client = await Client.connect(setup.address)
    run = await a_run_to_serve(client, setup.task_queue)
    status, out, err, took = await run_worker_py(
        "--address", setup.address, "--task-queue", setup.task_queue, "--ledger", url,
        cwd=tmp_path, without_psycopg=True,
    )  # fmt: skip
    assert status != 0 and took < 5
    assert err.splitlines()[-1] == (
        f"worker: ledger {url}: the PostgreSQL ledger needs the 'postgres' extra "
        "(psycopg is missing): pip install 'temporal-ledger[postgres]'"
    )
    assert "Traceback" not in err and "worker ready" not in out
    assert await untouched(run)


async def test_a_ledger_that_cannot_be_opened_stops_the_worker_as_it_starts(
    setup: Setup,
) -> None:
    # The URL is well formed and its folder exists, but the path is a folder: only
    # opening finds out. The worker opens the ledger as it starts, before it polls; it
    # ends at once with the ledger's error (`async with Worker` does not wait for ever),
    # and leaves the task queue to a worker whose ledger opens.
    target = setup.folder / "once.txt"
    bad = await Client.connect(setup.address, plugins=[LedgerPlugin(f"sqlite:///{setup.folder}")])
    client = await setup.client()
    call = Call(tool="hold_and_append", step="s", arg={"path": str(target), "line": "once"})
    handle = await client.start_workflow(
        StepsWorkflow.run, [call], id=f"after-{uuid.uuid4().hex[:8]}", task_queue=setup.task_queue
    )

    async def serve() -> None:
        async with Worker(
            bad,
            task_queue=setup.task_queue,
            workflows=[StepsWorkflow],
            activities=list(TEST_TOOLS.values()),
        ):
            await asyncio.sleep(60)

    started = time.monotonic()
    with pytest.raises(LedgerUnavailable, match=f"cannot open SQLite ledger {setup.folder}"):
        await asyncio.wait_for(serve(), 15)
    assert time.monotonic() - started < 5
    async with setup.workflow_worker(client, tools=True):
        assert await asyncio.wait_for(handle.result(), 30) == [{"lines": 1}]
    assert lines(target) == ["once"]


async def test_the_dev_worker_on_a_taken_port_exits_saying_so(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        status, out, err, took = await run_worker_py(
            "--dev", "--address", f"localhost:{port}", "--dev-db", str(tmp_path / "dev" / "t.db"),
            cwd=tmp_path,
        )  # fmt: skip
    assert status != 0 and took < 5
    assert err.splitlines()[-1] == (
        f"worker --dev: port {port} on 127.0.0.1 for the dev server is taken: stop what "
        "listens there, or choose another port with --address localhost:PORT (the dev "
        "server takes PORT and the UI PORT+1000); to use a Temporal server that is already "
        "running, leave out --dev"
    )
    assert "Temporal dev server" not in out  # it claims no server
    assert not (tmp_path / "dev").exists()  # and started none
