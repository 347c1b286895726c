"""Replay exported workflow histories against the current workflow code, with the plugin.

A change that would break running workflows (nondeterminism) fails here first::

    temporal workflow show --workflow-id ID -o json > tests/histories/ID.json
    temporal-ledger replay tests/histories/*.json --workflow my_app.workflows:MyWorkflow
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import logging
import os
import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel
from temporalio.client import WorkflowHistory
from temporalio.runtime import LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter
from temporalio.worker import Replayer

from ._plugin import LedgerPlugin

if TYPE_CHECKING:
    from temporalio.worker import Plugin


class ReplayReport(BaseModel):
    """How one history replayed.

    Attributes:
        path: The history file.
        workflow_id: The workflow id (the file's name without ``.json``).
        ok: It replayed without a nondeterminism error.
        error: Why not, if not.
    """

    path: str
    workflow_id: str
    ok: bool
    error: str | None = None


async def replay_histories(
    paths: Iterable[str | Path],
    *,
    workflows: Sequence[type],
    plugins: Sequence[Plugin] | None = None,
) -> list[ReplayReport]:
    """Replay each exported history (``temporal workflow show -o json``); report per file.

    ``plugins`` defaults to a ledger-less :class:`~activities.LedgerPlugin`, which is
    what replay needs for ``run_tool`` steps: the pydantic converter and the sandbox
    pass-through. Runs of an agent framework's app replay with that framework's plugin
    and the ledger's as the worker had them (its ``ledger_activities`` rules included:
    a run that waited scheduled what a run that did not never does), in any order.

    Args:
        paths: The exported histories, one JSON file each (named after its workflow id).
        workflows: The workflow classes to replay them with.
        plugins: The plugins the workers had.

    Returns:
        One report per file, in order; a file that cannot be read is reported as such.
    """
    if plugins is None:
        plugins = [LedgerPlugin()]
    # The ledger's plugin last: a framework's plugin that installs a converter of its own
    # (the OpenAI Agents integration's refuses any other) sets it first, and ours keeps it.
    plugins = sorted(plugins, key=lambda plugin: isinstance(plugin, LedgerPlugin))
    # Core's WARN lines and the worker's tracebacks would repeat what each report says.
    quiet = Runtime(
        telemetry=TelemetryConfig(
            logging=LoggingConfig(filter=TelemetryFilter(core_level="ERROR", other_level="ERROR"))
        )
    )
    replayer = Replayer(workflows=list(workflows), plugins=list(plugins), runtime=quiet)
    reports = []
    for path in map(Path, paths):
        report = ReplayReport(path=str(path), workflow_id=path.stem, ok=False)
        try:
            history = WorkflowHistory.from_json(path.stem, path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            reports.append(report.model_copy(update={"error": f"cannot read history: {exc}"}))
            continue
        with _worker_logs_muted():
            failure = (
                await replayer.replay_workflow(history, raise_on_replay_failure=False)
            ).replay_failure
        # Temporal's own words for an unregistered type do not say what to do.
        error = None
        if failure is not None:
            error = _unregistered(history, str(failure)) or f"{type(failure).__name__}: {failure}"
        reports.append(report.model_copy(update={"ok": failure is None, "error": error}))
    return reports


@contextlib.contextmanager
def _worker_logs_muted() -> Iterator[None]:
    """The worker's logs of a failed replay (a traceback per task) mute: the report has it."""
    logger = logging.getLogger("temporalio.worker")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def _unregistered(history: WorkflowHistory, failure: str) -> str | None:
    """Why ``history`` cannot replay, when the failure is that its type is not registered."""
    found = re.search(r"is not registered on this worker, available workflows: ([^\"]*)", failure)
    if found is None:
        return None
    # Temporal names the type only from the history's first event, which starts the run.
    name = history.events[0].workflow_execution_started_event_attributes.workflow_type.name
    return (
        f"workflow type {name!r} is not registered (given: {found.group(1).strip() or 'none'}); "
        f"register the class that defines it: --workflow MODULE:CLASS (temporal-ledger replay) or "
        f"Replayer(workflows=[...])"
    )


def _load(spec: str) -> type:
    module_name, _, attr = spec.partition(":")
    if not attr:
        raise argparse.ArgumentTypeError(f"expected module:Class, got {spec!r}")
    try:
        workflow_class: type = getattr(importlib.import_module(module_name), attr)
        return workflow_class
    except (ImportError, AttributeError) as exc:
        raise argparse.ArgumentTypeError(f"cannot load {spec!r}: {exc}") from None


def replay_command(histories: Sequence[Path], workflow_specs: Sequence[str]) -> int:
    """``temporal-ledger replay``: replay files with the named ``module:Class`` workflows."""
    if not workflow_specs:
        print(
            "error: name the workflow classes to replay with: --workflow module:Class",
            file=sys.stderr,
        )
        return 2
    # Like ``python -m``: the user's modules are found from where the command runs.
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        workflows = [_load(spec) for spec in workflow_specs]
    except argparse.ArgumentTypeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    reports = asyncio.run(replay_histories(histories, workflows=workflows))
    for report in reports:
        if report.error and "\n" not in report.error:
            print(f"FAIL {report.path}: {report.error}")
        else:
            shown = f"\n     {report.error}" if report.error else ""
            print(f"{'ok  ' if report.ok else 'FAIL'} {report.path}{shown}")
    failed = sum(not r.ok for r in reports)
    print(f"{len(reports) - failed} replayed, {failed} failed")
    return 1 if failed else 0
