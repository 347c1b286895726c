"""``activity_rules`` of the agent frameworks whose plugins register the same three kinds
of activity (model calls, MCP calls, ``activity_as_tool`` tools): ``openai_agents``,
``strands`` and ``google_adk``. Its signature and docstring are told once, here; each
module binds it to its framework's rules with :func:`bind`, and exports it under the
name type checkers and the API reference read (an import of :func:`activity_rules`)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from . import _rules
from ._probe import Probe
from ._rules import LedgeredActivity, Normalizer


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
            *_rules.tools(options.pop("tools", ()), normalize=tool_normalizer, **options),
            *call_rules,
        ]

    return bound
