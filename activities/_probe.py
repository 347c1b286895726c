"""Probes: ask the far side whether an unknown effect happened, before asking a person.

A tool declares ``probe=``: a read-only async function ``probe(key, arg)`` that looks the
idempotency key up on the far side and answers with ``ProbeAnswer.present``, ``.absent`` or
``.inconclusive``. When an effect is unknown, the workflow runs it (an activity with
its own retries) before parking the step, and records what it found as a
reconciliation by the actor ``probe:<tool>``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from enum import StrEnum
from typing import Any, TypeAlias

from pydantic import BaseModel, ConfigDict, Field

from ..ledger._seam import model_json


class Finding(StrEnum):
    """What a probe found on the far side."""

    PRESENT = "present"
    ABSENT = "absent"
    INCONCLUSIVE = "inconclusive"


class ProbeAnswer(BaseModel):
    """What a probe found; build it with :meth:`present`, :meth:`absent` or
    :meth:`inconclusive`.

    Attributes:
        finding: ``present``, ``absent`` or ``inconclusive``.
        output: The tool's output as the far side shows it (``present`` only).
        evidence: What the finding rests on (responses, ids, URLs): recorded with the
            verdict.
        basis: Why, in words: recorded with the verdict.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    finding: Finding
    output: Any = None
    evidence: list[Any] = Field(default_factory=list)
    basis: str = ""

    @classmethod
    def present(
        cls, output: Any = None, evidence: Sequence[Any] = (), *, basis: str = ""
    ) -> ProbeAnswer:
        """The far side holds the operation: the step ends with ``output``.

        Args:
            output: What the tool would have returned (its output model, or its JSON).
            evidence: What the finding rests on (responses, ids, URLs).
            basis: Why, in words; a default says the probe found the operation.

        Returns:
            The answer, recorded as an ``effect_confirmed`` verdict by ``probe:<tool>``.
        """
        if isinstance(output, BaseModel):
            output = model_json(output)
        return cls(
            finding=Finding.PRESENT,
            output=output,
            evidence=list(evidence),
            basis=basis or "the probe found the operation on the far side",
        )

    @classmethod
    def absent(cls, evidence: Sequence[Any] = (), *, basis: str = "") -> ProbeAnswer:
        """The far side has no operation under the key.

        Conclusive only where the tool says so (``probe_absence_conclusive=True``): then
        the key may act again; otherwise the step parks for a person.

        Args:
            evidence: What the finding rests on.
            basis: Why, in words.

        Returns:
            The answer, recorded as ``no_effect_confirmed`` (or ``still_unknown``).
        """
        return cls(
            finding=Finding.ABSENT,
            evidence=list(evidence),
            basis=basis or "the probe found no operation under the key on the far side",
        )

    @classmethod
    def inconclusive(cls, reason: str = "", evidence: Sequence[Any] = ()) -> ProbeAnswer:
        """The probe cannot tell: the step parks for a person, as without a probe.

        Args:
            reason: Why it cannot tell.
            evidence: What it saw.

        Returns:
            The answer, recorded as ``still_unknown``.
        """
        return cls(
            finding=Finding.INCONCLUSIVE,
            evidence=list(evidence),
            basis=reason or "the probe could not tell whether the operation happened",
        )


#: ``async def probe(key: str, arg: ArgModel) -> ProbeAnswer``; it must not act.
Probe: TypeAlias = Callable[[str, Any], Awaitable[ProbeAnswer]]
