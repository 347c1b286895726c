"""What ``LedgerPlugin`` does as a worker starts, before it polls: read which of the
ledger's search attributes the namespace has, open the ledger saying which one, warn of
probes the policy does not name, and stop a worker that must not run without hanging."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shlex
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

import temporalio.client
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.service import RPCError
from temporalio.worker import Worker

from ..ledger import Ledger
from ..ledger._seam import path_from_url, shown_url
from ._policy import Policy

logger = logging.getLogger(__name__)


def warn_of_unnamed_probes(
    policy: Policy, declared: Iterable[str], *, warned: set[str], source: Any
) -> None:
    """Warn, once for each tool, of a declared probe the policy does not let decide.

    Only the tools that ``[reconcile] probes`` names may have their probe settle an
    unknown effect; any other's probe is refused when it would run, and its unknown
    effects park for a person, as if it had none. Declaring ``probe=`` says the
    opposite is wanted, so a worker that starts this way says so, with the fix.

    Args:
        policy: The worker's policy.
        declared: The tools (and rule patterns) that declare a probe.
        warned: Those warned of already; updated.
        source: Where the policy came from (its file, for the fix).
    """
    unnamed = [
        name
        for name in dict.fromkeys(declared)
        if name not in warned and not policy.may_probe(name)
    ]
    if not unnamed:
        return
    warned.update(unnamed)
    probes = json.dumps([*policy.probes, *unnamed])  # a TOML array as well
    if isinstance(source, (str, Path)):
        fix = (
            f"put this line under [reconcile] in {source} (in place of its probes line, "
            f"if any): probes = {probes}"
        )
    else:
        fix = f"give the policy probes={probes} ([reconcile] probes = [...] in its file)"
    logger.warning(
        "ledger policy: the probes of tools %s may not settle an unknown effect: [reconcile] "
        "probes does not name them, so each unknown effect of theirs parks for a person, "
        "unprobed; to let them decide, %s",
        ", ".join(repr(name) for name in unnamed),
        fix,
    )


def _register_command(client: temporalio.client.Client, name: str) -> str:
    """The command that registers ``name`` on the namespace this client uses."""
    return shlex.join(
        [
            "temporal", "operator", "search-attribute", "create",
            "--address", client.service_client.config.target_host,
            "--namespace", client.namespace,
            "--name", name, "--type", "Int",
        ]
    )  # fmt: skip


async def listed_attributes(
    client: temporalio.client.Client, attributes: tuple[str, ...]
) -> set[str]:
    """The ledger's search attributes the namespace lists as Int; warns once for each not."""
    try:
        listed = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=client.namespace)
        )
    except RPCError as exc:
        found: set[str] = set()
        why = f"its search attributes could not be listed ({exc.message})"
    else:
        found = {
            name
            for name in attributes
            if listed.custom_attributes.get(name) == IndexedValueType.INDEXED_VALUE_TYPE_INT
        }
        why = ""
    for name in attributes:
        if name not in found:
            logger.warning(
                "namespace %r: %s; steps still wait, but `temporal workflow list --query "
                "'%s > 0'` will not list them; register it with: %s (then restart this "
                "worker: it looks once, at start)",
                client.namespace,
                why or f"it has no Int search attribute {name}",
                name,
                _register_command(client, name),
            )
    return found


def open_logged(url: str, lease: float) -> Ledger:
    """Open the ledger, saying which one: a mistyped path must not pass for an empty ledger."""
    if url.startswith("sqlite:///"):
        path = path_from_url(url).resolve()
        existed = path.exists()
        ledger = Ledger.open(url, lease=lease)
        if existed:
            logger.info("ledger: SQLite file %s", path)
        else:
            logger.warning("ledger: created a new, empty SQLite ledger at %s", path)
        return ledger
    ledger = Ledger.open(url, lease=lease)
    logger.info("ledger: %s", shown_url(url))
    return ledger


async def stop_unstarted(worker: Worker, next: Callable[[Worker], Awaitable[None]]) -> None:
    """End a worker that must not run as one that ran and stopped: ``async with Worker``
    (and ``shutdown()``) waits for the end of a run, for ever if none comes. Asked to shut
    down before it runs, it stops as soon as it has started."""
    stopping = asyncio.ensure_future(worker.shutdown())
    await asyncio.sleep(0)  # the request to shut down is made before the run begins
    with contextlib.suppress(Exception):  # its own trouble says less than the ledger's
        await next(worker)
    await stopping
