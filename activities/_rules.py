"""Rules: which activities go through the ledger, and how each framework declares its own.

A :class:`LedgeredActivity` says what one kind of call is (its activity type pattern,
whether it is retry-safe, what of its arguments is fingerprinted, how an operator's
answer becomes its result). The framework modules (``openai_agents``, ``strands``,
``google_adk``, ``pydantic_ai``, ``langgraph``) declare theirs with the builders here:
their model calls (:func:`models`, retry-safe), the MCP calls of every server their plugin
registers (:func:`mcp`, the server named by the pattern's ``*``), and the activities a
user hands their agents as tools (:func:`tools`), each a :class:`Rule` (a rule with what
only a framework declares). :func:`bind` makes the ``activity_rules`` of the three agent
frameworks that register those same kinds, and :func:`without` leaves what a framework
mints per run out of a fingerprint.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from typing import Any

from ..workflows._seam import AsReturned, ResultShape
from ._failures import no_effect_errors_of
from ._probe import Probe

#: Turns the activity's arguments (JSON) into the payload that is fingerprinted.
Normalizer = Callable[[str, list[Any]], dict[str, Any]]
#: Reads something about the call from the activity's arguments (JSON).
ArgsReader = Callable[[list[Any]], Any]


@dataclasses.dataclass(frozen=True)
class LedgeredActivity:
    """How activities whose type matches ``pattern`` go through the ledger.

    Attributes:
        pattern: A glob pattern of activity types (e.g. pydantic-ai's ``agent__*``).
        retry_safe: An unknown outcome may be tried again under the same key. True for
            calls without an effect on the world (a model request: the worst case of
            asking twice is paying twice); False for tools, whose unknown effect parks
            the step.
        normalize: Maps ``(activity_type, args_as_json)`` to the payload that is
            fingerprinted; it drops parts of the arguments that legitimately differ
            between the original run and a reset run (wall-clock timestamps, the run
            id), so a reset replays instead of being refused as a conflict. Default:
            ``{"args": args}``.
        output: Maps an operator's ``effect_confirmed`` output (the tool's own output)
            to the activity's result, gives the operator's template, and the JSON schema
            an answer must fit (from the activity function's return annotation or the
            call's arguments); default: the activity returns the tool's output itself.
        tool_name: For activities that call tools of a server (MCP): reads the called
            tool's name from the arguments (for the policy's ``[tools]`` and the
            operator's view).
        hints: Reads the tool's annotations from the arguments where the caller sends
            them along (pydantic-ai does). Where it does not, the workflow remembers
            what the server's tool list said.
        server: Names the server whose tool list gives the hints; ``"*"``: the part of
            the activity type that the pattern's ``*`` matches (one rule for every
            server a framework's plugin registers).
        lists_tools: Marks the activity whose result is that list.
        probe: ``async def probe(key, args)`` (``args``: the activity's arguments as
            JSON) that looks the key up on the far side without acting, as a
            ``@tool``'s probe does; it runs before an unknown effect parks, and its
            ``ProbeAnswer.present(output)`` is the tool's own output.
        probe_absence_conclusive: The probe's ``absent`` frees the key to act again.
        calls_inside: The activity's code makes calls of its own through the ledger,
            each under a key of its own (``activities.langgraph.ledger_call`` and
            ``ledger_tool_calls``, in a node listed with ``per_call=True``): the
            activity's own key is retry-safe, and once the retry policy is spent on an
            attempt that timed out, the code runs once more with each call inside only
            asking the ledger.
        no_effect_errors: Exception types the activity raises only before it acts (e.g.
            :class:`NonRetryableApplicationError`, for the ``ApplicationError`` s raised
            with ``non_retryable=True``). Such an exception is recorded as
            ``NoEffect(retryable=True)`` (the key may act again) and reaches Temporal as it
            was raised; any other exception, after the activity may have acted, parks the
            call as an unknown effect.
    """

    pattern: str
    retry_safe: bool = False
    normalize: Normalizer | None = None
    output: ResultShape = dataclasses.field(default_factory=AsReturned)
    tool_name: ArgsReader | None = None
    hints: ArgsReader | None = None
    server: str | None = None
    lists_tools: bool = False
    probe: Probe | None = None
    probe_absence_conclusive: bool = False
    calls_inside: bool = dataclasses.field(default=False, kw_only=True)
    no_effect_errors: Sequence[type[BaseException]] = dataclasses.field(default=(), kw_only=True)

    def __post_init__(self) -> None:
        object.__setattr__(self, "no_effect_errors", no_effect_errors_of(self.no_effect_errors))


@dataclasses.dataclass(frozen=True)
class Rule(LedgeredActivity):
    """A framework's rule, with what only a framework declares.

    ``fn``: on the activity side it matches the activity whose function is ``fn``
    (``ExecuteActivityInput.fn``), whatever name ``@activity.defn(name=...)`` gave it;
    ``pattern`` (the function's own name) is what the workflow side, which sees only
    names, matches. ``accepts`` narrows the rule to the calls whose arguments (the objects
    the workflow passes and the activity function receives) it accepts: two libraries may
    give their activities one name (Google ADK's and Strands' model activity are both
    ``invoke_model``), and only the arguments' types tell them apart; both sides ask it.
    ``lost_reply`` reads a return value (as JSON) that is the framework's report of a call
    whose outcome it does not know (Google ADK hands a failed MCP call back as a result):
    it gives the reason, and the ledger records the attempt as failed after it may have
    acted. ``scope`` gives, for the call's ledger key, a context the activity runs inside
    (Google ADK's MCP calls: the key as OpenTelemetry baggage).
    """

    fn: Callable[..., Any] | None = None
    accepts: Callable[[Sequence[Any]], bool] | None = None
    lost_reply: Callable[[Any], str | None] | None = None
    scope: Callable[[str], contextlib.AbstractContextManager[Any]] | None = None


def models(*patterns: str, **fields: Any) -> list[LedgeredActivity]:
    """A framework's model calls: retry-safe (asking again changes nothing in the world)."""
    return [Rule(pattern, retry_safe=True, **fields) for pattern in patterns]


def mcp(
    *, listing: Iterable[str] = (), calling: Iterable[str] = (), **fields: Any
) -> list[LedgeredActivity]:
    """The MCP activities of every server a framework's plugin registers: patterns with one
    ``*`` where the server's name goes. Tool lists are recorded as retry-safe reads (their
    hints are remembered); tool calls park on an unknown effect, with ``fields``."""
    return [
        *(Rule(p, retry_safe=True, server="*", lists_tools=True) for p in listing),
        *(Rule(p, server="*", **fields) for p in calling),
    ]


def tools(
    tools: Iterable[Callable[..., Any] | str],
    *,
    probes: Mapping[str, Probe] | None = None,
    no_effect_errors: Iterable[type[BaseException]] = (),
    normalize: Callable[[Callable[..., Any] | None], Normalizer | None] | None = None,
) -> list[LedgeredActivity]:
    """The activities a user hands an agent as tools (``activity_as_tool``): each parks on
    an unknown effect. A function is matched by itself where the activity runs (whatever
    name ``@activity.defn`` gave it) and by its own name on the workflow side.

    Args:
        tools: The activity functions, or their activity type names.
        probes: Per tool name, a probe; its ``absent`` is taken as conclusive.
        no_effect_errors: Exception types the tools raise only before they act.
        normalize: The fingerprint of a tool's call, per function (``None``: a name).

    Returns:
        One rule per tool.

    Raises:
        TypeError: A tool that is not a named activity, a probe for a tool not listed, or
            ``no_effect_errors`` that are not exception classes.
    """
    left = dict(probes or {})
    declared = no_effect_errors_of(no_effect_errors)
    rules: list[LedgeredActivity] = []
    for tool in tools:
        fn = None if isinstance(tool, str) else tool
        name = _activity_name(tool)
        probe = left.pop(name, None)
        rules.append(
            Rule(
                name,
                fn=fn,
                normalize=normalize(fn) if normalize is not None else None,
                probe=probe,
                probe_absence_conclusive=probe is not None,
                no_effect_errors=declared,
            )
        )
    if left:
        raise TypeError(f"probes for tools that are not listed in tools=: {sorted(left)}")
    return rules


def _activity_name(fn: Callable[..., Any] | str) -> str:
    if isinstance(fn, str):
        if not fn:
            raise TypeError("an activity is named by a non-empty string")
        return fn
    name = getattr(fn, "__name__", None)
    if not callable(fn) or not isinstance(name, str):
        raise TypeError(f"{fn!r} is not an @activity.defn function: cannot ledger it")
    # The function's own name, as @activity.defn names it by default. One given with
    # name=... is matched by the function itself where the activity runs (covers).
    return name


# -- ``activity_rules`` of the agent frameworks whose plugins register the same three kinds
# of activity (model calls, MCP calls, ``activity_as_tool`` tools): ``openai_agents``,
# ``strands`` and ``google_adk``. Its signature and docstring are told once, here; each
# module binds it to its framework's rules with :func:`bind`, and exports it under the
# name type checkers and the API reference read (an import of :func:`activity_rules`).


def activity_rules(
    *,
    tools: Iterable[Callable[..., Any] | str] = (),
    models: bool = True,
    probes: Mapping[str, Probe] | None = None,
    no_effect_errors: Iterable[type[BaseException]] = (),
) -> list[LedgeredActivity]:
    """The ledgered activities of an agent framework's app on Temporal: every MCP (and
    sandbox) call the integration's plugin registers, the model calls, and the
    ``activity_as_tool`` tools. Each framework's module has its own (its docstring says
    which activities its plugin registers).

    Put the plugin on ``Client.connect(plugins=[...])`` beside the framework's plugin
    (workers inherit it); a worker that runs only workflows needs it too, because it
    numbers the calls the keys are built from and lets a parked call wait in its run.

    Args:
        tools: The activities the agents call through ``activity_as_tool``: the
            functions (matched by the function itself where the activity runs, under
            whatever name ``@activity.defn`` gave it), or their activity type names.
            The workflow side sees only names: for a function renamed with
            ``@activity.defn(name=...)``, pass the name too (``tools=[fn, "name"]``) to
            let its unknown effects park the run, and key its probe by that name.
        models: Record the model calls too (retry-safe).
        probes: Per tool (activity) name, a read-only ``async def probe(key, args)`` that
            looks the call's key up on the far side before an unknown effect parks
            (``args``: the activity's arguments as JSON); ``present(output)`` gives the
            tool's return value. Its ``absent`` is taken as conclusive.
        no_effect_errors: Exception types that the ``tools`` raise only before they act,
            e.g. ``(NonRetryableApplicationError,)`` for a tool's ``raise
            ApplicationError("No weather", non_retryable=True)``: recorded as no effect,
            and failing the call as the integration reports a tool's failure, instead of
            parking it as an unknown effect (what every other exception does).

    Returns:
        One rule per activity type pattern, for ``LedgerPlugin(ledger_activities=...)``.

    Raises:
        TypeError: A tool that is not a named activity, a probe for a tool not listed, or
            ``no_effect_errors`` that are not exception classes.
    """
    raise NotImplementedError("each framework's module binds its own: see bind()")


def bind(
    model_rules: Sequence[LedgeredActivity],
    call_rules: Sequence[LedgeredActivity],
    tool_normalizer: Callable[[Callable[..., Any] | None], Normalizer] | None = None,
) -> Callable[..., list[LedgeredActivity]]:
    """:func:`activity_rules` (its signature and docstring, for ``help()``) for one
    framework: its model rules, its plugin's other rules, and its tools' fingerprint."""

    @functools.wraps(activity_rules)
    def bound(**options: Any) -> list[LedgeredActivity]:
        return [
            *(model_rules if options.pop("models", True) else ()),
            *tools(options.pop("tools", ()), normalize=tool_normalizer, **options),
            *call_rules,
        ]

    return bound


def without(
    value: Any,
    dropped: Callable[[str | None, dict[str, Any]], Container[str]],
    name: str | None = None,
) -> Any:
    """``value`` (JSON) without the entries that ``dropped(name, obj)`` names of each of
    its objects (``name``: the object's own name in the object that holds it, ``None`` in
    a list), at any depth: what differs between runs of one call is not its identity."""
    if isinstance(value, list):
        return [without(item, dropped) for item in value]
    if not isinstance(value, dict):
        return value
    names = dropped(name, value)
    return {key: without(item, dropped, key) for key, item in value.items() if key not in names}
