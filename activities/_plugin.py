"""``LedgerPlugin``: the ledger, the reconcile activity, the pydantic converter, the sandbox,
and what it does as a worker starts, before it polls: read which of the ledger's search
attributes the namespace has, open the ledger saying which one, warn of probes the policy
does not name, and stop a worker that must not run without hanging."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import shlex
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import temporalio.client
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import ClientConfig
from temporalio.contrib.pydantic import (
    PydanticJSONPlainPayloadConverter,
    PydanticPayloadConverter,
    pydantic_data_converter,
)
from temporalio.converter import CompositePayloadConverter, DataConverter
from temporalio.plugin import SimplePlugin
from temporalio.service import RPCError
from temporalio.worker import Worker, WorkerConfig, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from ..ledger import Ledger
from ..ledger._seam import opener as ledger_opener
from ..ledger._seam import path_from_url, shown_url
from ..workflows._seam import (
    AWAITING_APPROVAL_ATTRIBUTE,
    OPEN_EFFECTS_ATTRIBUTE,
    LedgerOptions,
    LedgerWorkflowInterceptor,
    ordered,
)
from ._attempt import ActivityInterceptor
from ._delivered import keeps_delivered, with_delivered_payloads
from ._generic import activity_attempt
from ._policy import Policy
from ._reconcile import approve_call, probe_effect, reconcile_effect
from ._rules import LedgeredActivity
from ._runtime import Runtime

logger = logging.getLogger(__name__)

#: The plugin's own activities, added to every worker; they record answers in the ledger.
_LEDGER_ACTIVITIES = (reconcile_effect, approve_call, probe_effect)

#: Modules whose code is safe inside workflows and whose state must not be re-imported
#: per workflow run (pydantic model classes must be the same objects on both sides).
#: Only this library and the pydantic stack: a user's own modules are theirs to pass
#: through (``workflow.unsafe.imports_passed_through()``) or to re-import per run.
PASSTHROUGH_MODULES = (
    "pydantic",
    "pydantic_core",
    "annotated_types",
    "temporal_ledger",
    # Checks the signatures of decisions in update validators (pure computation).
    "cryptography",
)


def _pydantic_converter(existing: DataConverter | None) -> DataConverter:
    if existing is None or existing is DataConverter.default:
        existing = pydantic_data_converter
    elif not _uses_pydantic(existing):  # pydantic-ai's or the OpenAI Agents SDK's: kept
        kind = pydantic_data_converter.payload_converter_class
        existing = dataclasses.replace(existing, payload_converter_class=kind)
    return with_delivered_payloads(existing)


def _uses_pydantic(converter: DataConverter) -> bool:
    """Whether the converter encodes JSON with pydantic: temporalio's pydantic converter
    or a subclass (pydantic-ai's), or a composite whose JSON converter is pydantic's
    (the OpenAI Agents integration's, which adds ``exclude_unset``)."""
    kind = converter.payload_converter_class
    if issubclass(kind, PydanticPayloadConverter):
        return True
    if not issubclass(kind, CompositePayloadConverter):
        return False
    try:
        json_converter = kind().converters.get(b"json/plain")
    except TypeError:  # a converter class that needs arguments: not one we can tell
        return False
    return isinstance(json_converter, PydanticJSONPlainPayloadConverter)


def _sandbox(existing: WorkflowRunner | None) -> WorkflowRunner:
    existing = existing or SandboxedWorkflowRunner()
    if not isinstance(existing, SandboxedWorkflowRunner):
        return existing
    passed = existing.restrictions.with_passthrough_modules(*PASSTHROUGH_MODULES)
    return dataclasses.replace(existing, restrictions=passed)


class LedgerPlugin(SimplePlugin):
    """Puts the ledger between Temporal and every ``@tool`` activity.

    A ``temporalio.plugin`` plugin: use it on ``Client.connect(plugins=[...])`` (its
    workers inherit it) or ``Worker(plugins=[...])``, and on ``Replayer(plugins=[...])``
    (no ledger is needed to replay). It adds the ledger, the activities that record
    verdicts, decisions and probes' findings, the pydantic data converter (keeping a
    user's codec), sandbox pass-through of this library, and the workflow interceptor
    that keys activities and lets waiting calls wait in their run.

    Args:
        ledger: A URL (``sqlite:///path``, ``postgresql://...``) opened when the first
            worker starts and closed when the last one stops, or an open
            :class:`~temporal_ledger.ledger.Ledger` that stays the caller's. A URL the
            ledger cannot open stops the worker at start, never at a tool call: a bad
            scheme, a missing folder or a missing extra when the ``Worker`` is made, a
            database that cannot be reached (or a policy file that does not load) when
            it starts to run, before it polls.
        policy: Which performers may use which capabilities, who may reconcile and who
            may approve: a :class:`Policy`, the path of its TOML file, or ``None`` for
            the logged allow-all of local development. A worker whose tools declare a
            probe that its ``[reconcile] probes`` does not name warns at start, once,
            naming them and the line to put in the policy.
        ledger_activities: Activities you did not write with ``@tool`` to put through
            the ledger too: glob patterns of activity types (such as pydantic-ai's
            ``agent__*``) or :class:`LedgeredActivity` rules. They are keyed by workflow,
            first run and the call's number.
        trace_content: With the ``[otel]`` extra, every ledgered call gets a span saying
            what the ledger decided; this records its arguments and output on it too.
        options: The lease, and how every run schedules the ledger's activities (tool
            calls without options of their own, recording verdicts and decisions,
            probes).

    Attributes:
        search_attributes: The Int search attributes a namespace needs registered for
            operators to list the runs that wait (``temporal workflow list --query
            'LedgerOpenEffects > 0'``); without them calls still wait, unlisted.

    Raises:
        TypeError: ``ledger`` is neither a URL nor a ``Ledger``.
    """

    search_attributes: ClassVar[tuple[str, ...]] = (
        OPEN_EFFECTS_ATTRIBUTE,
        AWAITING_APPROVAL_ATTRIBUTE,
    )

    def __init__(
        self,
        ledger: str | Ledger | None = None,
        *,
        policy: Policy | str | Path | None = None,
        ledger_activities: Sequence[str | LedgeredActivity] = (),
        trace_content: bool = False,
        options: LedgerOptions | None = None,
    ) -> None:
        if ledger is not None and not isinstance(ledger, (str, Ledger)):
            raise TypeError("ledger must be a URL or a Ledger")
        self._ledger_source = ledger
        #: Glob patterns of activity types from other libraries (e.g. pydantic-ai's
        #: ``agent__*``) whose every attempt also goes through the ledger.
        self.ledger_activities = ordered(
            rule if isinstance(rule, LedgeredActivity) else LedgeredActivity(rule)
            for rule in ledger_activities
        )
        self.options = options or LedgerOptions()
        self._trace_content = trace_content
        self._policy_source = policy
        self._runtime: Runtime | None = None
        self._open_lock = asyncio.Lock()
        self._owned: Ledger | None = None
        self._workers = 0
        #: The worker client's address and the search attributes its namespace has.
        self._namespace: dict[str, Any] = {}
        #: Every @tool on this plugin's workers, by name: the probe activity finds them here.
        self._tools: dict[str, Any] = {}
        #: The tools whose probe the policy does not name, warned of at a worker's start.
        self._warned_probes: set[str] = set()
        super().__init__(
            "temporal_ledger.LedgerPlugin",
            data_converter=_pydantic_converter,
            activities=_add_ledger_activities,
            workflow_runner=_sandbox,
            # The activity interceptor (_attempt) hands activities the ledger; it gets
            # _generic's describer from here, as _generic imports _attempt. The workflow
            # interceptor stamps the anchor header (keys that survive a reset), lets
            # ledger_activities calls wait in the run's inbox, and gives every run the
            # options its ledger activities are scheduled with.
            interceptors=[
                ActivityInterceptor(
                    self._open_runtime, self.ledger_activities, activity_attempt, _LEDGER_ACTIVITIES
                ),
                LedgerWorkflowInterceptor(self.ledger_activities, options),
            ],
            run_context=self._worker_running,
        )

    def configure_client(self, config: ClientConfig) -> ClientConfig:
        """The client's configuration with the pydantic data converter (Temporal calls it).

        Args:
            config: The client's configuration.

        Returns:
            The configuration, with the converter unless a later plugin brings its own.
        """
        later = list(config.get("plugins") or ())
        later = later[later.index(self) + 1 :] if self in later else []
        existing = config.get("data_converter")
        defer = (existing is None or existing is DataConverter.default) and any(
            isinstance(plugin, SimplePlugin) and plugin.data_converter is not None
            for plugin in later
        )
        config = super().configure_client(config)
        if defer:
            # A plugin after this one installs a converter of its own (the OpenAI Agents
            # integration's, which refuses any other): leave the class to it, with the
            # codec that shows the ledger what Temporal delivered (_delivered). A worker
            # still checks that the result speaks pydantic (configure_worker).
            config["data_converter"] = with_delivered_payloads(existing or DataConverter.default)
        return config

    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        """The worker's configuration with the ledger's parts (Temporal calls it).

        Args:
            config: The worker's configuration.

        Returns:
            The configuration, with the plugin's activities, interceptors and sandbox.

        Raises:
            InvalidRequest: The ledger URL is not one the ledger opens (an unknown scheme,
                ``sqlite://`` without its third slash, a folder that does not exist); the
                message names the URL and the fix.
            ImportError: A ``postgresql://`` ledger without the ``[postgres]`` extra.
            ValueError: The worker's client does not use the pydantic data converter, or
                (with ``ledger_activities``) not the plugin's: those are fingerprinted from
                the payloads Temporal delivered, which the plugin's converter shows it.
        """
        if isinstance(self._ledger_source, str):
            # Everything about the URL that needs no connection, before the worker exists.
            ledger_opener(self._ledger_source)
        config = super().configure_worker(config)
        for fn in config.get("activities") or ():
            if hasattr(fn, "__ledger_tool__"):
                self._tools[fn.__ledger_tool__.name] = fn
        client = config.get("client")
        converter = client.data_converter if client is not None else None
        if converter is not None and not _uses_pydantic(converter):
            # A worker encodes with its client's converter, and the plugin does not
            # make clients of its own: the user's client has to speak pydantic.
            raise ValueError(
                "LedgerPlugin: the worker's client does not use the pydantic data converter "
                "that ledgered tools need. Put the plugin on the client "
                "(Client.connect(..., plugins=[LedgerPlugin(...)]); its workers inherit it), "
                "or connect with "
                "data_converter=temporalio.contrib.pydantic.pydantic_data_converter."
            )
        if converter is not None and self.ledger_activities and not keeps_delivered(converter):
            # ledger_activities are fingerprinted from the payloads Temporal delivered,
            # which only the client's converter, as the plugin configures it, shows.
            raise ValueError(
                "LedgerPlugin(ledger_activities=...) on a worker whose client lacks it: put "
                "the plugin on the client (Client.connect(..., plugins=[LedgerPlugin(...)]); "
                "its workers inherit it), after any plugin that replaces the whole data "
                "converter."
            )
        return config

    async def run_worker(self, worker: Worker, next: Callable[[Worker], Awaitable[None]]) -> None:
        """Run the worker, after finding which of the ledger's search attributes its
        namespace has and opening the ledger (Temporal calls it).

        A worker that runs activities opens the ledger (and loads the policy) before it
        polls: a ledger that cannot be opened stops it at start, with the ledger's own
        error, instead of failing every tool call it would take.

        Args:
            worker: The worker.
            next: Runs it.

        Raises:
            LedgerUnavailable: The ledger's database cannot be reached.
            InvalidRequest: The ledger or the policy cannot be used as given.
        """
        listed = await _listed_attributes(worker.client, self.search_attributes)
        self._namespace = {
            "address": worker.client.service_client.config.target_host,
            "open_effects_attribute": OPEN_EFFECTS_ATTRIBUTE in listed,
            "awaiting_approval_attribute": AWAITING_APPROVAL_ATTRIBUTE in listed,
        }
        async with self._worker_running():
            if self._ledger_source is not None and not worker.config().get("no_remote_activities"):
                try:
                    runtime = await self._open_runtime()
                except Exception:
                    await _stop_unstarted(worker, next)
                    raise
                declared = [n for n, fn in self._tools.items() if fn.__ledger_probe__]
                declared += [r.pattern for r in self.ledger_activities if r.probe is not None]
                warned, source = self._warned_probes, self._policy_source
                _warn_of_unnamed_probes(runtime.policy, declared, warned, source)
            await next(worker)

    @contextlib.asynccontextmanager
    async def _worker_running(self) -> AsyncIterator[None]:
        self._workers += 1
        try:
            yield
        finally:
            self._workers -= 1
            if self._workers == 0 and self._owned is not None:
                owned, self._owned, self._runtime = self._owned, None, None
                await owned.aclose()

    async def _open_runtime(self) -> Runtime:
        """The ledger and policy; a URL ledger is opened on first use."""
        if self._runtime is not None:
            return self._runtime
        async with self._open_lock:
            if self._runtime is None:
                policy = self._policy_source
                if policy is None:
                    policy = Policy.permissive()
                elif not isinstance(policy, Policy):
                    policy = await asyncio.to_thread(Policy.load, policy)  # reads a file
                source = self._ledger_source
                if source is None:
                    raise RuntimeError("LedgerPlugin has no ledger: pass ledger=URL or a Ledger")
                if isinstance(source, str):
                    source = await asyncio.to_thread(_open_logged, source, self.options.lease)
                    self._owned = source
                self._runtime = Runtime(
                    source,
                    policy,
                    **self._namespace,
                    tools=self._tools,
                    rules=self.ledger_activities,
                    trace_content=self._trace_content,
                )
        return self._runtime


def _add_ledger_activities(existing: Sequence[Any] | None) -> Sequence[Any]:
    existing = list(existing or [])
    return existing + [fn for fn in _LEDGER_ACTIVITIES if fn not in existing]


# -- as a worker starts: the namespace's search attributes, the ledger, the probes --


def _warn_of_unnamed_probes(
    policy: Policy, declared: Iterable[str], warned: set[str], source: Any
) -> None:
    """Warn, once for each tool (or rule pattern) in ``declared``, of a declared probe the
    policy does not let decide; ``warned`` holds those warned of already.

    Only the tools that ``[reconcile] probes`` names may have their probe settle an
    unknown effect; any other's probe is refused when it would run, and its unknown
    effects park for a person, as if it had none. Declaring ``probe=`` says the
    opposite is wanted, so a worker that starts this way says so, with the fix.
    """
    unnamed = [n for n in dict.fromkeys(declared) if n not in warned and not policy.may_probe(n)]
    if not unnamed:
        return
    warned.update(unnamed)
    probes = json.dumps([*policy.probes, *unnamed])  # a TOML array as well
    fix = (
        f"put this line under [reconcile] in {source} (in place of its probes line, "
        f"if any): probes = {probes}"
        if isinstance(source, (str, Path))
        else f"give the policy probes={probes} ([reconcile] probes = [...] in its file)"
    )
    logger.warning(
        "ledger policy: the probes of tools %s may not settle an unknown effect: [reconcile] "
        "probes does not name them, so each unknown effect of theirs parks for a person, "
        "unprobed; to let them decide, %s",
        ", ".join(repr(name) for name in unnamed),
        fix,
    )


async def _listed_attributes(
    client: temporalio.client.Client, attributes: tuple[str, ...]
) -> set[str]:
    """The ledger's search attributes the namespace lists as Int; warns once for each not."""
    request = ListSearchAttributesRequest(namespace=client.namespace)
    listed: Mapping[str, Any] = {}
    why = ""
    try:
        listed = (await client.operator_service.list_search_attributes(request)).custom_attributes
    except RPCError as exc:
        why = f"its search attributes could not be listed ({exc.message})"
    found = {a for a in attributes if listed.get(a) == IndexedValueType.INDEXED_VALUE_TYPE_INT}
    for name in [a for a in attributes if a not in found]:
        command = shlex.join(
            [
                "temporal", "operator", "search-attribute", "create",
                "--address", client.service_client.config.target_host,
                "--namespace", client.namespace,
                "--name", name, "--type", "Int",
            ]
        )  # fmt: skip
        logger.warning(
            "namespace %r: %s; steps still wait, but `temporal workflow list --query "
            "'%s > 0'` will not list them; register it with: %s (then restart this "
            "worker: it looks once, at start)",
            client.namespace,
            why or f"it has no Int search attribute {name}",
            name,
            command,
        )
    return found


def _open_logged(url: str, lease: float) -> Ledger:
    """Open the ledger, saying which one: a mistyped path must not pass for an empty ledger."""
    path = path_from_url(url).resolve() if url.startswith("sqlite:///") else None
    existed = path is not None and path.exists()
    ledger = Ledger.open(url, lease=lease)
    if path is None:
        logger.info("ledger: %s", shown_url(url))
    elif existed:
        logger.info("ledger: SQLite file %s", path)
    else:
        logger.warning("ledger: created a new, empty SQLite ledger at %s", path)
    return ledger


async def _stop_unstarted(worker: Worker, next: Callable[[Worker], Awaitable[None]]) -> None:
    """End a worker that must not run as one that ran and stopped: ``async with Worker``
    (and ``shutdown()``) waits for the end of a run, for ever if none comes. Asked to shut
    down before it runs, it stops as soon as it has started."""
    stopping = asyncio.ensure_future(worker.shutdown())
    await asyncio.sleep(0)  # the request to shut down is made before the run begins
    with contextlib.suppress(Exception):  # its own trouble says less than the ledger's
        await next(worker)
    await stopping
