"""What an operator answers for a parked activity of another library, and how that answer
becomes the activity's result.

An operator confirms an effect with the tool's own output: what the tool function
returned (a string, a model), or an MCP tool's result content. The calling framework
expects its activity's result type instead (pydantic-ai wraps a tool's return value in
its own record, an MCP activity returns a ``CallToolResult``). A :class:`ResultShape`
maps the one to the other, and gives the template shown in the operator's command.
Pure functions of JSON values: the workflow side uses them, inside the sandbox.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from pydantic import TypeAdapter

from ..ledger._seam import output_template
from ._protocol import PLACEHOLDER


class ResultShape(Protocol):
    """How an operator's ``effect_confirmed`` output becomes an activity's result."""

    def template(self, result_type: Any) -> Any:
        """A value of the output's shape, with placeholders, for the operator's command."""

    def result(self, output: Any) -> Any:
        """The activity's result (as JSON) for the operator's output; ``ValueError`` if
        the output cannot be one."""

    def output_schema(self, result_type: Any, args: list[Any]) -> dict[str, Any] | None:
        """The JSON schema an operator's output must fit, or ``None`` where any JSON value
        can be one. The activity side asks it, where the activity's function is known:
        ``result_type`` is its return annotation (``None`` if it has none), ``args`` its
        arguments as JSON. The workflow checks an answer against it before recording,
        and the ledger again (so ``temporal-ledger reconcile`` cannot record a misfit)."""


@dataclasses.dataclass(frozen=True)
class Answer:
    """What an operator's answer for one call needs, read from the call's own arguments.

    Attributes:
        template: The answer's template, with what the call fixes filled in (e.g. the ids
            of the tool calls it answers).
        tool_calls: The tool calls the answer is for, each ``{"name", "arguments",
            "tool_call_id"}``, shown to the operator.
        misfit: Why an operator's output cannot be this call's answer (one line), or
            ``None`` if it can.
        unusable: Why the activity's result (as JSON), whoever produced it, would fail
            in the workflow, or ``None`` if it would not.
    """

    template: Any
    tool_calls: list[dict[str, Any]]
    misfit: Callable[[Any], str | None]
    unusable: Callable[[Any], str | None]


@runtime_checkable
class AnswerForCall(Protocol):
    """A :class:`ResultShape` whose answer depends on what the call was asked: a LangGraph
    tool node's answer is a ``ToolMessage`` per pending tool call of its input."""

    def answer_for(self, args: list[Any]) -> Answer | None:
        """What an answer for the call with these arguments (as JSON) needs; ``None``
        when the arguments say nothing more than :meth:`ResultShape.template`. Never
        raises: it runs in the workflow."""


@dataclasses.dataclass(frozen=True)
class AsReturned:
    """The activity's result is the tool's output itself (e.g. an ``activity_as_tool``
    function): the operator answers with what the function returns."""

    def template(self, result_type: Any) -> Any:
        return template_of(result_schema(result_type))

    def result(self, output: Any) -> Any:
        return output

    def output_schema(self, result_type: Any, args: list[Any]) -> dict[str, Any] | None:
        return result_schema(result_type)


def template_of(schema: dict[str, Any] | None) -> Any:
    """A value of ``schema``'s shape, with placeholders, for the operator's command; the
    placeholder itself where the schema says nothing of it."""
    template = None if schema is None else output_template(schema)
    return PLACEHOLDER if template is None else template


def result_schema(result_type: Any) -> dict[str, Any] | None:
    """The JSON schema of values of ``result_type`` as they cross to the workflow, or
    ``None`` for no type, ``Any``, or a type pydantic cannot describe.

    Built once per type: pydantic takes 0.1-0.2 ms to build one, a third of what the
    ledger spends on a call, and every call that may park asks. Callers never change it.
    """
    if result_type is None or result_type is Any:
        return None
    try:
        return _schema(result_type)
    except TypeError:  # an annotation that cannot be a cache key
        return _schema.__wrapped__(result_type)


@functools.lru_cache(maxsize=256)
def _schema(result_type: Any) -> dict[str, Any] | None:
    try:
        schema: dict[str, Any] = TypeAdapter(result_type).json_schema()
    except Exception:  # a type pydantic cannot describe: any JSON value
        return None
    return schema or None
