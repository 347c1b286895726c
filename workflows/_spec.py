"""What a tool is to the workflow side: enough to call it with ``run_tool``, with no I/O."""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from ..ledger._seam import check_json, model_json
from ._protocol import ToolCall, ToolOutcome

ArgT = TypeVar("ArgT", bound=BaseModel)
OutT = TypeVar("OutT")


@dataclasses.dataclass(eq=False)
class Tool(Generic[ArgT, OutT]):
    """A ledgered tool: what ``run_tool`` calls and, made by ``@tool``, the activity a
    worker registers.

    ``@tool`` makes one of an async function. Build one yourself to call, with
    ``run_tool``, a tool whose implementation only the worker has (e.g. one bound to a
    client at start-up): register a ``@tool`` of the same name and capability there. One
    built so only describes the tool: it is not an activity, and calling it raises.

    Attributes:
        name: The activity's name.
        capability: The dotted capability the policy grants performers.
        retry_safe: The far side deduplicates by the key: an unknown effect may be tried
            again under it instead of parking.
        arg_type: The pydantic model of the tool's argument.
        output_type: The pydantic model of its output, or ``None`` if it returns nothing.
        requires_approval: Every call waits for a person's approval of its exact request.
        has_probe: The tool has a probe (kept on the activity, see ``tool(probe=...)``).
        probe_absence_conclusive: The probe's ``absent`` frees the key to act again.
    """

    name: str
    capability: str
    retry_safe: bool
    arg_type: type[ArgT]
    output_type: type[BaseModel] | None
    requires_approval: bool = False
    has_probe: bool = False
    probe_absence_conclusive: bool = False
    #: The tool's probe (the activity side's ``Probe``), which its worker runs.
    __ledger_probe__: Callable[[str, Any], Awaitable[Any]] | None = dataclasses.field(
        default=None, init=False, repr=False
    )

    @functools.cached_property
    def output_schema(self) -> dict[str, Any] | None:
        """The output model's JSON schema, recorded with every execution so that an
        operator's ``effect_confirmed`` output can be checked without the tool's code."""
        return None if self.output_type is None else self.output_type.model_json_schema()

    @property
    def __ledger_tool__(self) -> Tool[ArgT, OutT]:
        # How the worker's plugin tells a ledgered tool among the activities it is given.
        return self

    async def __call__(self, call: ToolCall) -> ToolOutcome:
        """Run one attempt: ``@tool``'s activity does; a tool built to be called by name,
        whose implementation the worker has, cannot.

        Args:
            call: The call, as ``run_tool`` sends it.

        Returns:
            The call's outcome, from the activity ``@tool`` makes.

        Raises:
            TypeError: This tool only describes one that the worker registers.
        """
        raise TypeError(
            f"{self.name!r} describes a tool for run_tool; the worker registers the @tool "
            "of that name, which runs it"
        )


def argument_json(arg: BaseModel) -> dict[str, Any]:
    """A tool's argument as its call carries it and the ledger fingerprints it: the same
    JSON in every process (sets in canonical order, see ``model_json``).

    Raises:
        InvalidRequest: A value has no exact JSON form (a NaN, an infinity, an integer
            beyond ±2**53, ...): the message names its field, e.g. ``Reading.limit``.
    """
    value = model_json(arg)
    check_json(value, where=type(arg).__name__)
    return typing.cast("dict[str, Any]", value)
