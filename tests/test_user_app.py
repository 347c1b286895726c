"""The library as a user meets it: the built wheel in a fresh virtualenv, driving the
README's app (its own ``activities.py``, ``workflows.py``, ``worker.py``, ``starter.py``
and a ``ledger.py`` of its own) from a folder outside the repository, against the
session's real dev server, with the real ``temporal`` CLI for the operator's part."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import uuid
import zipfile
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import WorkflowEnvironment

from examples import LOSE_NEXT_REPLY
from tests.temporal_support import (
    ROOT,
    lines,
    listed_as_parked,
    query_json,
    send_update,
    temporal_cli,
    wait_for,
)
from tests.test_examples import agent_example_refunds_and_notes_once, starter_output, worker_process
from worker import free_port, temporal_binary

pytestmark = pytest.mark.timeout(600)

#: A client-only process may abort or crash in interpreter teardown after its work is done (the
#: SDK's Rust threads outlive the interpreter: temporalio/sdk-python issue 300); what it
#: printed before is what the test checks.
FINISHED = (0, -6, -11)

APP_FILES = {"ledger.py", "activities.py", "workflows.py", "worker.py", "starter.py"}


def readme_app() -> dict[str, str]:
    """The README's ``python`` blocks whose first line names an app file."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    files = {}
    for block in re.findall(r"```python\n(.*?)```", readme, flags=re.S):
        first, _, _ = block.partition("\n")
        name = first.removeprefix("# ").strip()
        if name in APP_FILES:
            files[name] = block
    return files


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with the wheel and its required dependencies, no extras."""
    return venv_with(wheel, "", tmp_path_factory.mktemp("venv"))


def run_in(venv: Path, code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(venv / "bin" / "python"), "-c", code],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_wheel_holds_only_the_temporal_ledger_namespace(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert tops == {"temporal_ledger", wheel.name.split("-py")[0] + ".dist-info"}, tops
    assert {
        "temporal_ledger/ledger/__init__.py",
        "temporal_ledger/activities/__init__.py",
        "temporal_ledger/workflows/__init__.py",
        "temporal_ledger/ledger/py.typed",
        "temporal_ledger/activities/py.typed",
        "temporal_ledger/workflows/py.typed",
    } <= set(names)
    metadata = zipfile.ZipFile(wheel).read(
        next(n for n in names if n.endswith(".dist-info/METADATA"))
    )
    assert b"License-Expression: MIT" in metadata
    entry_points = zipfile.ZipFile(wheel).read(
        next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    )
    assert b"temporal-ledger = temporal_ledger.ledger._cli:main" in entry_points


def test_the_ledger_imports_no_temporal_module(venv: Path, tmp_path: Path) -> None:
    done = run_in(
        venv,
        "import sys, temporal_ledger.ledger as l; "
        "print(l.__version__, sorted(m for m in sys.modules if m.startswith('temporalio')))",
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    version, modules = done.stdout.split(" ", 1)
    assert modules.strip() == "[]"
    assert version == (ROOT / "ledger" / "_version.py").read_text().split('"')[1]


def test_a_part_whose_extra_is_missing_names_the_extra(venv: Path, tmp_path: Path) -> None:
    postgres = run_in(
        venv,
        "from temporal_ledger.ledger import Ledger; Ledger.open('postgresql://x@127.0.0.1/x')",
        tmp_path,
    )
    assert postgres.returncode == 1
    assert "pip install 'temporal-ledger[postgres]'" in postgres.stderr
    http = run_in(venv, "import temporal_ledger.activities.http", tmp_path)
    assert http.returncode == 1
    assert "pip install 'temporal-ledger[http]'" in http.stderr


async def test_the_readme_app_acts_once_parks_and_is_reconciled_with_the_cli(
    venv: Path, temporal_address: str, tmp_path: Path
) -> None:
    app = tmp_path / "shop"
    app.mkdir()
    files = readme_app()
    assert set(files) == APP_FILES, "the README must show the whole app"
    for name, text in files.items():
        (app / name).write_text(text, encoding="utf-8")
    env = {**os.environ, "TEMPORAL_ADDRESS": temporal_address, "PYTHONPATH": ""}
    python = str(venv / "bin" / "python")
    log = (tmp_path / "worker.log").open("wb")
    worker = await asyncio.create_subprocess_exec(
        python, "worker.py", cwd=app, env=env, stdout=log, stderr=log
    )
    starters: list[asyncio.subprocess.Process] = []
    try:
        checkout = await asyncio.create_subprocess_exec(
            python, "starter.py", "checkout", "alice", "1250",
            cwd=app, env=env, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        starters.append(checkout)
        out, _ = await asyncio.wait_for(checkout.communicate(), 120)
        assert out.decode().splitlines()[-1] == "entry 1", out
        assert checkout.returncode in FINISHED

        relay = f"127.0.0.1:{free_port()}"  # nothing listens there: the receipt's ack fails
        receipt = await asyncio.create_subprocess_exec(
            python, "starter.py", "receipt", "alice", relay,
            cwd=app, env=env, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        starters.append(receipt)
        assert receipt.stdout is not None
        workflow_id = (await asyncio.wait_for(receipt.stdout.readline(), 60)).decode().strip()
        parked: list[dict[str, object]] = []
        for _ in range(120):
            found = await query_json(temporal_address, workflow_id, "open_effects")
            parked = found if isinstance(found, list) else [found] if found else []
            if parked:
                break
            await asyncio.sleep(0.5)
        assert len(parked) == 1 and parked[0]["tool"] == "send_receipt", parked
        key = str(parked[0]["key"])
        assert key.startswith(f"{workflow_id}/") and key.endswith("/receipt")

        # The operator looks with the installed console script, then answers.
        cli = await asyncio.create_subprocess_exec(
            str(venv / "bin" / "temporal-ledger"), "--db", "sqlite:///shop-ledger.db",
            "--json", "open-effects", cwd=app, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        listed, _ = await asyncio.wait_for(cli.communicate(), 60)
        assert cli.returncode == 0
        assert [s["key"] for s in json.loads(listed)] == [key]
        verdict = {
            "key": key,
            "verdict": "effect_confirmed",
            "actor": "ops-alice",
            "basis": "the receipt is line 2 of book.jsonl",
            "output": {"entry": 2},
        }
        await temporal_cli(
            temporal_address,
            "workflow", "update", "execute", "--workflow-id", workflow_id,
            "--name", "reconcile", "--input", json.dumps(verdict),
        )  # fmt: skip
        out, _ = await asyncio.wait_for(receipt.communicate(), 120)
        assert out.decode().splitlines()[-1] == "entry 2", out
        assert receipt.returncode in FINISHED
    finally:
        for process in [*starters, worker]:
            if process.returncode is None:
                process.terminate()
                await asyncio.wait_for(process.wait(), 30)
        log.close()

    book = [json.loads(line) for line in (app / "book.jsonl").read_text().splitlines()]
    assert [("charge" in e, "receipt" in e) for e in book] == [(True, False), (False, True)]
    assert (app / "shop-ledger.db").exists()


def venv_with(wheel: Path, extras: str, folder: Path) -> Path:
    """A fresh virtualenv in ``folder`` with the wheel and its ``extras`` (none: ``""``)
    and what they require, resolved from the package index as for a user. uv installs
    them, the newest that fit as pip would, in seconds where pip took up to a minute or
    two; compiled to bytecode as pip does, or with PYTHONDONTWRITEBYTECODE set every
    process of the app would compile its imports again. The venv is the standard
    library's, without pip, which nothing here runs."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True, timeout=300
    )
    requirement = f"{wheel}[{extras}]" if extras else str(wheel)
    uv_install = [sys.executable, "-m", "uv", "pip", "install", "-q", "--compile-bytecode"]
    subprocess.run(
        [*uv_install, "--python", str(folder / "bin" / "python"), requirement],
        check=True,
        timeout=900,
    )
    return folder


def user_app(venv: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``examples/`` copied to a folder of a user's own, outside the repository, whose
    processes (run by ``venv``'s interpreter) import the library from the wheel installed
    there, never from the repository."""
    app = tmp_path / "app"
    shutil.copytree(
        ROOT / "examples", app / "examples", ignore=shutil.ignore_patterns("__pycache__")
    )
    where = run_in(venv, "import temporal_ledger.activities as a; print(a.__file__)", app)
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(venv), where.stdout
    monkeypatch.setenv("PYTHONPATH", "")
    return app


async def run_example_from_the_wheel(
    example: str,
    venv: Path,
    temporal_env: WorkflowEnvironment,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An agent example as an app of a user's own: it refunds and notes once, and a reset
    of the finished run replays both; the same app with ``--no-ledger`` (effects in a
    folder of their own) refunds and notes again after the same reset."""
    app = user_app(venv, tmp_path, monkeypatch)
    python = venv / "bin" / "python"
    for ledger, folder in ((True, tmp_path / "ledgered"), (False, tmp_path / "no-ledger")):
        folder.mkdir()
        await agent_example_refunds_and_notes_once(
            example, temporal_env, folder, monkeypatch, python=python, cwd=app, ledger=ledger
        )


async def lost_reply_parks_in_the_wheel_app(
    example: str,
    venv: Path,
    temporal_address: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    output: Any,
    misfit: tuple[Any, str] | None = None,
) -> None:
    """An agent example as an app of a user's own, whose worker dies right after the
    refund (``lose-next-reply``): the next worker's try finds the claim and no outcome, the
    run parks and is listed by ``LedgerOpenEffects > 0``, the operator answers with the
    real ``temporal workflow update`` (``output``: the refund's result in the framework's
    form), and the run finishes with one refund. With ``misfit`` (an output and the
    reason it is refused for), that answer is sent first and refused, the run stays
    parked, and the command the run printed, with ``output`` filled in, completes it."""
    app = user_app(venv, tmp_path, monkeypatch)
    python = venv / "bin" / "python"
    support = tmp_path / "support"
    support.mkdir()
    (support / LOSE_NEXT_REPLY).touch()
    monkeypatch.setenv("SUPPORT_DIR", str(support))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    # Workflow ids are user text: a space, '/', '#', '%' and non-ASCII.
    workflow_id = f"support ann/ü #{uuid.uuid4().hex[:6]} 100%"
    common = ["--address", temporal_address, "--task-queue", f"lost-{uuid.uuid4().hex[:8]}"]
    worker = ["--ledger", f"sqlite:///{tmp_path / 'ledger.db'}"]
    opts: dict[str, Any] = {"example": example, "python": python, "cwd": app}
    async with worker_process(*common, *worker, **opts) as first:
        starter = asyncio.create_task(
            starter_output(*common, "--workflow-id", workflow_id, within=300, **opts)
        )
        await asyncio.wait_for(first.wait(), 120)
    assert first.returncode == 1, "the worker did not die after the refund"
    assert len(lines(support / "refunds.jsonl")) == 1
    async with worker_process(*common, *worker, **opts):
        await wait_for(
            lambda: listed_as_parked(temporal_address, workflow_id),
            within=120,
            interval=1,
            what="the run to be listed as parked",
        )
        [parked] = await query_json(temporal_address, workflow_id, "open_effects")
        command = shlex.split(parked["update_command"])
        template = json.loads(command[-1])
        verdict = {
            **template,
            "actor": "ops-ann",
            "basis": "refunds.jsonl holds the refund of A-1",
            "output": output,
        }
        if misfit is None:
            done, said = await send_update(temporal_address, workflow_id, "reconcile", verdict)
            assert done == 0, said
        else:
            wrong, reason = misfit
            refused, said = await send_update(
                temporal_address, workflow_id, "reconcile", {**verdict, "output": wrong}
            )
            assert refused != 0 and reason in said, said
            assert await listed_as_parked(temporal_address, workflow_id), "no longer parked"
            # The printed command as printed, with the operator's words in its input.
            assert command[0] == "temporal" and template["output"] != output
            command[-1] = json.dumps(verdict)
            cli = await asyncio.create_subprocess_exec(
                temporal_binary(), *command[1:], stdout=asyncio.subprocess.PIPE
            )
            said_by_cli, _ = await asyncio.wait_for(cli.communicate(), 60)
            assert cli.returncode == 0, said_by_cli
        printed = await starter
    assert (
        json.loads(printed.fields["result"]) == "done: refunded 1250 cents on A-1 | note 1 on T-7"
    )
    assert len(lines(support / "refunds.jsonl")) == 1, "the refund was made again"
    assert lines(support / "notes.txt") == ["T-7: refunded A-1"]


@pytest.fixture(scope="module")
def agents_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel with the extras of the Google ADK and LangGraph integrations."""
    return venv_with(wheel, "google-adk,langgraph", tmp_path_factory.mktemp("agents-venv"))


@pytest.mark.parametrize(
    ("example", "output", "misfit"),
    [
        ("google_adk", "refunded 1250 cents on A-1", None),
        # A parked call of ledger_tool_calls is answered {"content": ...}: the bare
        # content (not an object) is refused at the update with the reason.
        (
            "langgraph",
            {"content": "refunded 1250 cents on A-1"},
            ("refunded 1250 cents on A-1", "output: expected object ToolCallOutput"),
        ),
    ],
)
async def test_a_lost_reply_in_an_agent_app_from_the_wheel_parks_until_reconciled(
    example: str,
    output: Any,
    misfit: tuple[Any, str] | None,
    agents_venv: Path,
    temporal_address: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await lost_reply_parks_in_the_wheel_app(
        example,
        agents_venv,
        temporal_address,
        tmp_path,
        monkeypatch,
        output=output,
        misfit=misfit,
    )


@pytest.mark.parametrize("example", ["google_adk", "langgraph"])
async def test_agent_apps_from_the_wheel_act_once_and_replay_a_reset(
    example: str,
    agents_venv: Path,
    temporal_env: WorkflowEnvironment,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The ADK and LangGraph examples copied out of the repository and run with the
    wheel's venv against the dev server; a ``temporal workflow reset`` of the finished
    run replays every tool call from the ledger, and without the ledger (``--no-ledger``)
    the same app acts twice."""
    await run_example_from_the_wheel(example, agents_venv, temporal_env, tmp_path, monkeypatch)
