"""A key's wire form: the one spelling a far side sees, and the key it stands for.

The ledger owns it, beside the keys themselves: the Temporal side spells every key it
sends this way (HTTP's ``Idempotency-Key``, MCP's ``_meta``, OpenTelemetry baggage), and
the operator's CLI reads a key a far side shows back in the same spelling.
"""

from __future__ import annotations

import re

from ._errors import InvalidRequest
from ._models import validate_key

#: The characters a key keeps on the wire: RFC 3986's unreserved set without ``~``,
#: which every router, proxy, client and header parser passes through unchanged.
_WIRE_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._")
#: A key's wire form: the safe characters and ``~XX`` escapes (upper-case hex).
_WIRE_FORM = re.compile(r"(?:[A-Za-z0-9._-]|~[0-9A-F]{2})+")
#: One escaped byte of a wire form.
_ESCAPE = re.compile(rb"~([0-9A-F]{2})")


def wire_key(key: str) -> str:
    """The one spelling of ``key`` that a far side sees: public as ``Ledger.wire_key``,
    which says why."""
    if all(c in _WIRE_SAFE for c in key):
        return key
    return "".join(
        c if c in _WIRE_SAFE else "".join(f"~{b:02X}" for b in c.encode("utf-8", "surrogatepass"))
        for c in key
    )


def is_wire_key(text: str) -> bool:
    """Whether ``text`` is spelled as :func:`wire_key` spells a key (what a far side may
    check before it files an effect under it).

    Args:
        text: What a request carries as a key.

    Returns:
        ``True`` for a non-empty run of letters, digits, ``-``, ``.``, ``_`` and ``~XX``
        escapes.
    """
    return _WIRE_FORM.fullmatch(text) is not None


def key_from_wire(text: str) -> str | None:
    """The key whose wire form is ``text``, for a key an operator copied from a far side.

    Args:
        text: A key as a far side shows it (``order-ann~20smith~2Fr1~2Fstep``).

    Returns:
        The key :func:`wire_key` spells as ``text``, or ``None`` when no key is spelled
        so: ``text`` has characters or escapes outside the wire form, its escapes are not
        UTF-8, it escapes a character the form keeps (``~41`` for ``A``), or what it
        decodes to is not a key (unprintable, too long).
    """
    if not is_wire_key(text):
        return None
    raw = _ESCAPE.sub(lambda escape: bytes([int(escape[1], 16)]), text.encode("ascii"))
    try:
        key = validate_key(raw.decode("utf-8"))
    except (UnicodeDecodeError, InvalidRequest):
        return None
    # The form is one-to-one: a spelling wire_key would not give names no key.
    return key if wire_key(key) == text else None
