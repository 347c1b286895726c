"""Which rule covers a call: the one matching of activities against the plugin's
``ledger_activities`` rules, asked by both sides (the workflow interceptor, on the names
and arguments the workflow schedules; the activity side, on what it runs)."""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, TypeVar

from ._results import ResultShape


class WorkflowRule(Protocol):
    """What the workflow side reads of a ``LedgeredActivity`` rule (the activity side's
    dataclass, which the plugin passes in)."""

    @property
    def pattern(self) -> str: ...
    @property
    def tool_name(self) -> Callable[[list[Any]], Any] | None: ...
    @property
    def server(self) -> str | None: ...
    @property
    def lists_tools(self) -> bool: ...
    @property
    def output(self) -> ResultShape: ...
    @property
    def calls_inside(self) -> bool: ...


R = TypeVar("R", bound=WorkflowRule)


def ordered(rules: Iterable[R]) -> tuple[R, ...]:
    """Rules in the order a call is matched against them: as given, except that a rule for
    every activity of a framework (pattern ``"*"``, told by its arguments) comes after
    every rule that names an activity, from whichever list it came."""
    return tuple(sorted(rules, key=lambda rule: rule.pattern == "*"))


def covers(
    rule: WorkflowRule,
    activity_type: str,
    args: Sequence[Any] | None = None,
    fn: Callable[..., Any] | None = None,
) -> bool:
    """Whether ``rule`` covers a call of ``activity_type`` (run by ``fn`` where the activity
    runs): its pattern matches the type, or its function is ``fn`` (a rule made from an
    activity function matches it under whatever name ``@activity.defn`` gave it); and a
    rule that also reads the arguments' types (an ``accepts`` predicate: two libraries may
    name their activities alike) takes these arguments (the objects the workflow passes
    and the activity function receives). Both sides ask it."""
    own = getattr(rule, "fn", None)
    if not (own is not None and own == fn) and not fnmatch.fnmatchcase(activity_type, rule.pattern):
        return False
    accepts = getattr(rule, "accepts", None)
    if accepts is None or args is None:
        return True
    try:
        return bool(accepts(args))
    except Exception:
        return False  # arguments of a shape it cannot read are not the ones it covers


def served_by(rule: WorkflowRule, activity_type: str) -> str | None:
    """The server whose tool a call of ``activity_type`` is: the rule's ``server``, or for
    ``"*"`` (one rule for every server of a framework) what the pattern's ``*`` matched."""
    if rule.server != "*":
        return rule.server
    head, _, tail = rule.pattern.partition("*")
    name = activity_type[len(head) : len(activity_type) - len(tail)]
    matched = activity_type.startswith(head) and activity_type.endswith(tail)
    return name if matched and name else None


def read_args(reader: Callable[[list[Any]], Any] | None, args: list[Any]) -> Any:
    """What ``reader`` reads from a call's arguments (as JSON); ``None`` where it cannot
    (arguments of another shape, from another version: no name, no hints)."""
    if reader is None:
        return None
    try:
        return reader(args)
    except (LookupError, TypeError, ValueError):
        return None
