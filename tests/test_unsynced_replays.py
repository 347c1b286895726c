"""Replays that do not wait for the disk: a crash may lose the record of a replay, never
an effect or a decision, and the ledger still verifies.

A power cut cannot be staged here; what can be is the same loss seen from the ledger:
the process holding the SQLite file killed with SIGKILL between its commits, and a
PostgreSQL server stopped in ``immediate`` mode (a crash: what its WAL writer had not
flushed is gone) while a worker makes fresh calls and replays.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator

import pytest
from temporal_ledger.ledger import Ledger
from temporal_ledger.ledger._testing_child import AUTHORITY, _CountingAdapter, request

from tests import pg

# Fresh calls and replays, one after another, as fast as they go; each answer printed
# once the ledger gave it (so it was committed: durably for a fresh call).
_WORKER = textwrap.dedent(
    """
    import asyncio, json, sys
    from temporal_ledger.ledger import Ledger
    from temporal_ledger.ledger._testing_child import AUTHORITY, request

    async def effect(req, ctx):
        return {"done": req.key}

    async def main(url):
        async with Ledger.open(url) as ledger:
            n = 0
            while True:
                key = f"k{n}"
                fresh = await ledger.execute(request(key), authority=AUTHORITY, adapter=effect)
                print(json.dumps(["fresh", key, fresh.action_id]), flush=True)
                for back in range(max(0, n - 3), n + 1):
                    again = await ledger.execute(
                        request(f"k{back}"), authority=AUTHORITY, adapter=effect
                    )
                    assert again.replayed, again
                    print(json.dumps(["replay", f"k{back}", again.action_id]), flush=True)
                n += 1

    asyncio.run(main(sys.argv[1]))
    """
)


def _start_worker(url: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _WORKER, url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _answers_until(worker: subprocess.Popen[str], fresh: int) -> list[list[str]]:
    """The worker's answers, read until it has answered ``fresh`` fresh calls."""
    assert worker.stdout is not None
    answers: list[list[str]] = []
    deadline = time.monotonic() + 60
    while sum(a[0] == "fresh" for a in answers) < fresh:
        line = worker.stdout.readline()
        if not line:
            raise AssertionError(
                f"the worker stopped: {worker.stderr.read() if worker.stderr else ''}"
            )
        answers.append(json.loads(line))
        assert time.monotonic() < deadline, "the worker is too slow"
    return answers


def _check_after_the_crash(url: str, answers: list[list[str]]) -> None:
    """Every fresh call the worker was answered keeps its outcome; the ledger verifies;
    a replay after the crash still replays, and nothing acts twice."""
    far_side = _CountingAdapter()
    with Ledger.open(url) as ledger:
        report = ledger.verify()
        assert report.ok, report.problems
        fresh = {key: action_id for kind, key, action_id in answers if kind == "fresh"}
        for key, action_id in fresh.items():
            state = ledger.state(key)
            assert state.status == "succeeded", (key, state)
            assert state.outcome_action_id == action_id
            assert state.output == {"done": key}
        kept = {e.action_id for e in ledger.events() if e.type == "action.completed"}
        replays = [action_id for kind, _, action_id in answers if kind == "replay"]
        # Replays answered before the crash: their records may be gone, not required to.
        assert set(fresh.values()) <= kept
        assert len(replays) > 0

    async def replay_all() -> None:
        async with Ledger.open(url) as ledger:
            for key in fresh:
                again = await ledger.execute(request(key), authority=AUTHORITY, adapter=far_side)
                assert again.replayed and again.output == {"done": key}
            assert ledger.verify().ok

    asyncio.run(replay_all())
    assert far_side.calls == []


def test_a_killed_sqlite_worker_loses_no_outcome(tmp_path: os.PathLike[str]) -> None:
    url = f"sqlite:///{tmp_path}/ledger.db"
    worker = _start_worker(url)
    try:
        answers = _answers_until(worker, fresh=40)
        worker.send_signal(signal.SIGKILL)
        worker.wait(10)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(10)
    _check_after_the_crash(url, answers)


@pytest.fixture
def own_server() -> Iterator[tuple[str, Callable[..., None]]]:
    """A private PostgreSQL server this test may crash (the shared one it must not)."""
    with pg.private_server() as server:
        yield server


def test_a_crashed_postgres_server_loses_no_outcome(
    own_server: tuple[str, Callable[..., None]],
) -> None:
    url, ctl = own_server
    worker = _start_worker(url)
    try:
        answers = _answers_until(worker, fresh=40)
        ctl("stop", "immediate")
        worker.kill()
        worker.wait(10)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(10)
    ctl("start")
    _check_after_the_crash(url, answers)


@pytest.mark.parametrize("setting", ["committed", "durable"])
async def test_replays_wait_for_the_disk_only_when_asked(
    tmp_path: os.PathLike[str], setting: str
) -> None:
    """SQLite commits a batch of replays' records with ``synchronous=NORMAL`` (written to
    the WAL, synced by the next durable commit), unless ``replay_audit="durable"``."""
    far_side = _CountingAdapter()
    async with Ledger.open(f"sqlite:///{tmp_path}/ledger.db", replay_audit=setting) as ledger:
        conn = ledger._recorder._conn  # type: ignore[attr-defined]  # the writer's connection
        await ledger.execute(request("k"), authority=AUTHORITY, adapter=far_side)
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        again = await ledger.execute(request("k"), authority=AUTHORITY, adapter=far_side)
        assert again.replayed
        level = conn.execute("PRAGMA synchronous").fetchone()[0]
        assert level == (1 if setting == "committed" else 2)  # NORMAL or FULL
        await ledger.execute(request("other"), authority=AUTHORITY, adapter=far_side)
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2
        assert ledger.verify().ok
    assert len(far_side.calls) == 2
