"""The plugin's workflow interceptor: the run anchor on every activity a workflow schedules,
and the whole rule for the activities of other libraries that the plugin ledgers.

An activity of another library (an agent framework's tool call, an MCP ``call_tool``)
whose effect is unknown, or that needs a person's approval, fails on its worker with the
ledger's error. This interceptor runs such a call through the loop a ``run_tool`` step
runs through (``_ledgered``), around the workflow's activity call, before the calling
framework sees the failure: the framework sees an ordinary activity result or error.
Activities that match no ledgered pattern pass through as they are: a workflow that does
not use the ledger is untouched.

Temporal makes the inbound and outbound interceptors once per run: the outbound one,
:class:`LedgeredRun`, holds the run's state (its inbox, the activities' numbering), and
the inbound one makes it current for the workflow's code (:func:`current_run`), so that
nothing is kept on the user's workflow object.
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import json
from collections.abc import Callable, Sequence
from typing import Any, cast

from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue
from temporalio.converter import ActivitySerializationContext, WithSerializationContext
from temporalio.exceptions import ApplicationError
from temporalio.worker import (
    ExecuteWorkflowInput,
    HandleSignalInput,
    HandleUpdateInput,
    Interceptor,
    StartActivityInput,
    StartLocalActivityInput,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)

from ..ledger._seam import output_misfit
from ._inbox import Inbox
from ._ledgered import Face, Ledgered
from ._matching import WorkflowRule, covers, ordered, read_args, served_by
from ._protocol import (
    ANCHOR_HEADER,
    HINTS_HEADER,
    PLACEHOLDER,
    ApprovalNeeded,
    ErrorType,
    InnerCall,
    RunAnchor,
    ToolHints,
    UnknownEffect,
    holds_placeholder,
    one_line,
)
from ._render import Call
from ._results import Answer, AnswerForCall, template_of
from ._scheduling import LedgerOptions, scheduling_own


class LedgerWorkflowInterceptor(Interceptor):
    """Stamps every activity with the run anchor; lets ledgered activities wait for people;
    holds each run's inbox and the options the ledger schedules its activities with.

    ``rules`` are the plugin's ``ledger_activities``: the activity types that go through
    the ledger on the activity side, and how an operator's output becomes their result.
    Put on the workers that run the workflows, and on a ``Replayer`` with the same rules
    (the plugin does both).
    """

    def __init__(self, rules: Sequence[WorkflowRule], options: LedgerOptions | None) -> None:
        self._rules = ordered(rules)
        self._options = options or LedgerOptions()

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        rules, options = self._rules, self._options

        class _Inbound(WorkflowInboundInterceptor):
            """Makes the run's ledger state (one per run: Temporal makes one of these per
            run) current for the workflow's code, in its function and its handlers."""

            def init(self, outbound: WorkflowOutboundInterceptor) -> None:
                self._run = LedgeredRun(outbound, rules, options)
                super().init(self._run)

            async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
                _RUN.set(self._run)
                self._run.inbox.install_at_start()
                return await super().execute_workflow(input)

            async def handle_signal(self, input: HandleSignalInput) -> None:
                _RUN.set(self._run)
                await super().handle_signal(input)

            async def handle_update_handler(self, input: HandleUpdateInput) -> Any:
                _RUN.set(self._run)
                return await super().handle_update_handler(input)

        return _Inbound


class LedgeredRun(WorkflowOutboundInterceptor):
    """The ledger's state of one run, and its outbound interceptor: numbers and anchors the
    activities the workflow schedules, runs the ledgered ones through :class:`Ledgered`,
    and holds the run's inbox (with the plugin's options)."""

    def __init__(
        self,
        next: WorkflowOutboundInterceptor,
        rules: tuple[WorkflowRule, ...],
        options: LedgerOptions,
    ) -> None:
        super().__init__(next)
        self._rules = rules
        self._heartbeat_timeout = options.heartbeat_timeout or None
        self.inbox = Inbox(options)
        #: Activities scheduled so far by every run of this workflow alike (_scheduling).
        self._calls = 0
        #: What each server's tool list said of its tools' hints, by (server, tool).
        self._listed: dict[tuple[str, str], ToolHints] = {}
        #: A ``run_tool`` step being scheduled (see :meth:`start_step`), and its call.
        self._step: Face | None = None
        self._started: Ledgered | None = None

    def start_step(self, face: Face, activity: str, arg: Any, **options: Any) -> Ledgered:
        """Schedule the first attempt of a ``run_tool`` step, as the workflow's own activity
        (through every interceptor, numbered like any other), and return its call."""
        self.inbox.install()
        self._step = face
        try:
            workflow.start_activity(activity, arg, **options)
        finally:
            self._step = None
        started, self._started = self._started, None
        assert started is not None, "an interceptor did not pass the step's activity on"
        return started

    def start_activity(self, input: StartActivityInput) -> workflow.ActivityHandle[Any]:
        call = self._anchor(input)
        if call is None:
            return self.next.start_activity(input)
        step, self._step = self._step, None
        if step is not None:
            self._started = Ledgered(self.next, input, step, self.inbox)
            return self._started.first
        rule = next((r for r in self._rules if covers(r, input.activity, input.args)), None)
        if rule is None:
            return self.next.start_activity(input)
        if input.heartbeat_timeout is None and self._heartbeat_timeout is not None:
            # Frameworks schedule their tool calls without one (pydantic-ai, and
            # temporalio's OpenAI Agents, Strands and LangGraph integrations): a worker
            # killed during one would go unnoticed until the start-to-close timeout.
            # The activity side heartbeats ledgered calls and ties their claim's lease
            # to this timeout (activities._attempt). Replay does not compare activity
            # options, so runs recorded without it replay unchanged.
            input.heartbeat_timeout = self._heartbeat_timeout
        self.inbox.install()  # open_effects and pending_approvals answer from now on
        # Encoded once, as Temporal would: the ledger's reading of them below and every
        # later attempt of the call send these payloads, never what is left of a value
        # that can be read once (an iterator) after a first encoding read it.
        input.args = _encoded_once(input)
        tool = read_args(rule.tool_name, _as_json(input.args)) if rule.tool_name else None
        tool = tool if isinstance(tool, str) else None
        server = served_by(rule, input.activity)
        hints = self._listed.get((server or "", tool)) if tool is not None else None
        if hints is not None:
            hinted = _json_payload(hints.model_dump(by_alias=True))
            input.headers = {**input.headers, HINTS_HEADER: hinted}
        listed = (
            functools.partial(self._remember_tools, server) if rule.lists_tools and server else None
        )
        face = _Activity(input, rule, call, tool, listed)
        return Ledgered(self.next, input, face, self.inbox).as_handle()

    def _remember_tools(self, server: str, result: Any) -> None:
        [listing] = _as_json([result])
        tools = listing.get("tools") if isinstance(listing, dict) else listing
        for tool in tools if isinstance(tools, list) else []:
            if isinstance(tool, dict) and isinstance(tool.get("name"), str):
                # A listed tool without annotations has the MCP defaults (it may destroy).
                hints = ToolHints.parse(tool.get("annotations") or {})
                if hints is not None:
                    self._listed[(server, tool["name"])] = hints

    def start_local_activity(self, input: StartLocalActivityInput) -> workflow.ActivityHandle[Any]:
        self._anchor(input)
        return self.next.start_local_activity(input)

    def _anchor(self, input: StartActivityInput | StartLocalActivityInput) -> str | None:
        """Number the activity, unless it is the ledger's own, and stamp the run anchor on
        it; returns its number."""
        call = None
        if not scheduling_own():
            self._calls += 1
            call = str(self._calls)
        info = workflow.info()
        anchor = RunAnchor(
            first=info.first_execution_run_id, continued=info.continued_run_id, call=call
        )
        # Plain JSON, not the worker's converter: the header is ours and must read the same
        # on any worker whatever converter it configures.
        stamp = _json_payload(anchor.model_dump(exclude_none=True))
        input.headers = {**input.headers, ANCHOR_HEADER: stamp}
        return call


#: The run whose workflow code runs now: set by its inbound interceptor in the task of
#: the workflow's function and of each signal and update handler (tasks they start
#: inherit it), so ``run_tool`` finds its run's state wherever it is called.
_RUN: contextvars.ContextVar[LedgeredRun] = contextvars.ContextVar("temporal_ledger_run")


def current_run() -> LedgeredRun | None:
    """The ledger's state of the run whose code calls, or ``None`` without the plugin."""
    return _RUN.get(None)


@dataclasses.dataclass
class _Activity:
    """A ledgered activity of another library, as :class:`Ledgered` shows and answers it."""

    input: StartActivityInput
    rule: WorkflowRule
    #: The activity's number among those the run schedules (see ``_scheduling``).
    number: str
    #: The tool it calls, where the rule reads one from its arguments.
    tool: str | None = None
    #: Takes the result of a call that lists a server's tools.
    listed: Callable[[Any], None] | None = None

    @property
    def calls_inside(self) -> bool:
        return self.rule.calls_inside

    @property
    def probe_arg(self) -> Any:
        return {"args": self._args_json}

    def shown(self, waiting: ApprovalNeeded | UnknownEffect) -> Call:
        if isinstance(waiting, ApprovalNeeded):
            return self._call(waiting.arguments)
        inner = waiting.inner
        return self._call(None, waiting.output_schema) if inner is None else self._inner_call(inner)

    def received(self, result: Any, waited_on: str | None) -> None:
        if self.listed is not None:
            self.listed(result)
        answer = self._answer
        if waited_on is None or answer is None:
            return
        # The attempt after a wait may replay an answer recorded elsewhere
        # (``temporal-ledger reconcile``), which no validator saw: fail the step if the
        # workflow cannot use it (see :meth:`confirmed`).
        [as_json] = _as_json([result])
        try:
            problem = answer.unusable(as_json)
        except Exception as exc:
            problem = str(exc)
        if problem is not None:
            raise _unusable(self.input.activity, waited_on, problem)

    @functools.cached_property
    def _args_json(self) -> list[Any]:
        """The call's arguments as JSON: read once, as every attempt sends the same."""
        return _as_json(self.input.args)

    @functools.cached_property
    def _answer(self) -> Answer | None:
        """What an answer for this call needs, where its arguments say more than its
        result type (a LangGraph tool node's pending tool calls)."""
        shape = self.rule.output
        if not isinstance(shape, AnswerForCall):
            return None
        try:
            return shape.answer_for(self._args_json)
        except Exception as exc:  # never a workflow task failure: the plain template
            workflow.logger.warning(f"{self.input.activity}: no answer template: {exc}")
            return None

    def confirmed(self, call: Call, unknown: UnknownEffect, output: Any) -> Any:
        """The activity's result for a confirmed effect's output, or a failure of the step.

        The update's validator checked an operator's answer; a probe's, or one that
        reached the ledger another way, is checked here, before the framework's code
        (which runs after this returns, e.g. LangGraph's reducers) could fail the workflow
        task on it again and again.
        """
        problem = call.misfit(output)
        if problem is None:  # the misfit check decoded it: it decodes
            return self._decode(self.rule.output.result(output))
        raise _unusable(call.tool, unknown.key, problem)

    def _call(self, arguments: Any, output_schema: dict[str, Any] | None = None) -> Call:
        answer = self._answer
        template = answer.template if answer else self.rule.output.template(self.input.ret_type)
        if answer is None and template == PLACEHOLDER and output_schema is not None:
            # Frameworks schedule by name: the activity side's schema gives the shape
            # (an answer read from the call's arguments has said what its template is).
            template = template_of(output_schema)
        activity = self.input.activity
        tool = f"{self.tool} ({activity})" if self.tool else activity

        def misfit(output: Any) -> str | None:
            if (problem := _placeholder_left(output, template, tool, output_schema)) is not None:
                return problem
            try:
                problem = answer.misfit(output) if answer is not None else None
                if problem is None:
                    self._decode(self.rule.output.result(output))
            except Exception as exc:  # whatever the framework's type refuses
                problem = one_line(exc)
            if problem is not None:
                return f"effect_confirmed: the output is not a result of {tool}: {problem}"
            return None

        return Call(
            step=f"call {self.number}",
            tool=tool,
            arguments=arguments,
            template=template,
            misfit=misfit,
            tool_calls=answer.tool_calls if answer is not None else [],
        )

    def _inner_call(self, inner: InnerCall) -> Call:
        """A call inside the activity (its own key), as the operator answers for it."""
        tool = f"{inner.tool} (call {inner.call_id} in {self.input.activity})"
        return Call(
            step=f"call {self.number} / {inner.call_id}",
            tool=tool,
            arguments=inner.arguments,
            template=inner.template,
            misfit=lambda output: _placeholder_left(
                output, inner.template, tool, inner.output_schema
            ),
            tool_calls=[
                {"name": inner.tool, "arguments": inner.arguments, "tool_call_id": inner.call_id}
            ],
        )

    def _decode(self, result: Any) -> Any:
        """The activity's result, as the workflow would have received it from the worker."""
        payload = _json_payload(result, sort_keys=False)
        # temporalio's overloads take a type or nothing; its implementation, also None.
        return workflow.payload_converter().from_payload(payload, cast(Any, self.input.ret_type))


def _placeholder_left(
    output: Any, template: Any, tool: str, output_schema: dict[str, Any] | None
) -> str | None:
    """Why ``output`` cannot be the output of a call of ``tool``: it still holds the
    template's placeholder, or does not fit ``output_schema``; ``None`` if neither."""
    if holds_placeholder(output, template):
        return (
            f"effect_confirmed: the output still holds the template's placeholder "
            f"({PLACEHOLDER!r} or the like): put in what {tool} returned"
        )
    return None if output_schema is None else output_misfit(output_schema, output, producer=tool)


def _json_payload(value: Any, *, sort_keys: bool = True) -> Payload:
    """``value`` as a plain JSON payload, whatever converter the worker uses."""
    data = json.dumps(value, sort_keys=sort_keys).encode()
    return Payload(metadata={"encoding": b"json/plain"}, data=data)


def _unusable(tool: str, key: str, problem: str) -> ApplicationError:
    """The failure of a step whose recorded answer the workflow cannot use: the run ends
    with it (or the framework handles it as a failed call), never a workflow task that
    fails on it again and again."""
    return ApplicationError(
        f"{tool}: the answer recorded for {key!r} cannot be the call's result: {problem}",
        type=ErrorType.OUTPUT_INVALID,
        non_retryable=True,
    )


def _encoded_once(input: StartActivityInput) -> list[Any]:
    """The activity's arguments as the payloads Temporal sends (``RawValue`` s, which its
    converter passes through as they are), encoded with the converter bound to the
    activity's serialization context, as Temporal binds it."""
    info = workflow.info()
    converter = workflow.payload_converter()
    if isinstance(converter, WithSerializationContext):
        converter = converter.with_context(
            ActivitySerializationContext(
                namespace=info.namespace,
                workflow_id=info.workflow_id,
                workflow_type=info.workflow_type,
                activity_type=input.activity,
                activity_id=input.activity_id,
                activity_task_queue=input.task_queue or info.task_queue,
                is_local=False,
            )
        )
    return [RawValue(payload) for payload in converter.to_payloads(list(input.args))]


def _as_json(values: Sequence[Any]) -> list[Any]:
    """Values as the worker's converter sends them, read back as JSON (``None`` where not)."""
    payloads = workflow.payload_converter().to_payloads(list(values))
    return [
        json.loads(p.data) if p.metadata.get("encoding") == b"json/plain" else None
        for p in payloads
    ]
