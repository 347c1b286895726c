"""A person's decision is in their own words: never a template's text, never a probe's name.

The commands and update inputs the project prints for people to fill in carry words
that stand for what only the person knows (``YOUR-NAME``, ``WHY``, ``WHAT-YOU-SAW``,
anything in angle brackets). Pasted unchanged they would approve a refund or confirm an
effect in nobody's name, so the ledger refuses them under every policy, in whatever
way the decision arrives (the CLI, a workflow update, a signal, the Python API).
"""

from __future__ import annotations

import re
from typing import Any

from ._errors import InvalidRequest
from ._signatures import PROBE_ACTOR_PREFIX

#: What each placeholder the project prints stands for: the word a person replaces.
PLACEHOLDERS = {
    "YOUR-NAME": "your name",
    "YOU": "your name",
    "WHY": "the reason for the decision",
    "WHAT-YOU-SAW": "what you saw",
    "WHAT YOU CHECKED": "what you checked",
    "YOUR-KEY.pem": "your key file",
}
#: Placeholders that never occur inside a real name or sentence, found anywhere in a text.
_EMBEDDED = tuple(word for word in PLACEHOLDERS if "-" in word)
#: ``<your name>``, ``<string>``, ``<one of 'a', 'b'>``: a template's slot.
_SLOT = re.compile(r"<[A-Za-z][^<>]*>")


def placeholder_in(value: Any) -> str | None:
    """The first placeholder that ``value`` (a string, or JSON holding strings) still
    holds, or ``None``."""
    if isinstance(value, str):
        text = value.strip()
        if text.upper() in PLACEHOLDERS:
            return text
        if (found := _SLOT.search(text)) is not None:
            return found.group(0)
        return next((word for word in _EMBEDDED if word in text.upper()), None)
    items = value.values() if isinstance(value, dict) else value
    if isinstance(value, (dict, list, tuple)):
        return next((p for p in map(placeholder_in, items) if p is not None), None)
    return None


def refuse_placeholders(**fields: Any) -> None:
    """:class:`InvalidRequest` naming the first field that still holds a placeholder, and
    what to put there instead."""
    for name, value in fields.items():
        if (found := placeholder_in(value)) is not None:
            instead = PLACEHOLDERS.get(found.upper(), f"the value {found} stands for")
            raise InvalidRequest(
                f"{name} still holds the template's placeholder {found!r}: replace it with "
                f"{instead}; a decision in nobody's name is no decision"
            )


def refuse_probe_name(actor: str) -> None:
    """:class:`InvalidRequest` when a person gives ``probe:<tool>`` as their name: that
    actor is the worker's own probe, which records its verdicts itself."""
    if actor.startswith(PROBE_ACTOR_PREFIX):
        raise InvalidRequest(
            f"actor {actor!r}: {PROBE_ACTOR_PREFIX}<tool> is the worker's own probe, which "
            "records its verdicts itself; give your own name"
        )
