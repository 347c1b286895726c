"""The ledger's CLI (``temporal-ledger``) run in the test's process, as a child would run it.

A child interpreter's start (importing temporal_ledger.ledger: 0.5 s of CPU, one to three
seconds on a loaded 2-core machine) cost more than most CLI calls do. Here ``main`` runs
in a thread of its own, in the working directory given, with ``$LEDGER_URL`` only when
given, its output captured; an argparse exit or an uncaught exception (its traceback,
status 1) becomes its exit status, as a child's would. The tests that need a real
process (the entry point, the environment as the shell passes it, a closed pipe) start
one themselves.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import subprocess
import sys
import threading
import traceback
from pathlib import Path

from temporal_ledger.ledger._cli import main

#: One CLI run at a time: it sets the process's working directory, environment and output.
_ONE_RUN = threading.Lock()
#: Unset for the run unless given, as the CLI tests' children had it.
ENV_URL = "LEDGER_URL"


def run_cli(
    args: list[str],
    *,
    cwd: Path | None = None,
    ledger_url: str | None = None,
    merged: bool = False,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """``temporal-ledger ARGS``: its status, stdout and stderr (with ``merged``, both in
    ``stdout``, interleaved as written; ``stderr`` empty)."""
    out = io.StringIO()
    err = out if merged else io.StringIO()
    status: list[int] = []

    def run() -> None:
        try:
            status.append(main(args))
        except SystemExit as exit_:
            code = exit_.code
            if isinstance(code, str):
                print(code, file=sys.stderr)
            status.append(code if isinstance(code, int) else int(code is not None))
        except Exception:
            traceback.print_exc()
            status.append(1)

    with _ONE_RUN:
        saved_url = os.environ.pop(ENV_URL, None)
        saved_cwd = os.getcwd()
        try:
            if ledger_url is not None:
                os.environ[ENV_URL] = ledger_url
            if cwd is not None:
                os.chdir(cwd)
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                runner = threading.Thread(target=run, name="ledger-cli", daemon=True)
                runner.start()
                runner.join(timeout)
            assert not runner.is_alive(), f"the CLI did not end within {timeout} s: {args}"
        finally:
            os.chdir(saved_cwd)
            os.environ.pop(ENV_URL, None)
            if saved_url is not None:
                os.environ[ENV_URL] = saved_url
    return subprocess.CompletedProcess(args, status[0], out.getvalue(), err.getvalue())


async def run_cli_async(args: list[str], *, cwd: Path | None = None) -> tuple[int, str]:
    """:func:`run_cli` from a coroutine, its output merged: the event loop goes on
    meanwhile (an in-process worker may have to answer what the CLI sends)."""
    done = await asyncio.to_thread(run_cli, args, cwd=cwd, merged=True)
    return done.returncode, done.stdout
