"""The one derivation of an idempotency key from where a step sits in a workflow."""

from __future__ import annotations

import hashlib
import re


def step_key(
    workflow_id: str, first_execution_run_id: str, step: str, *, continued_from: str | None = None
) -> str:
    """``{workflow id}/{first execution run id}[/{continued from}]/{step}``.

    The first execution's run id is kept by worker crashes, ``temporal workflow reset``
    and continue-as-new, so the same step of the same workflow keeps its key, and a
    reset replays its effects from the ledger instead of repeating them; a workflow id
    reused for a new execution gets new keys. A key that would be longer than 255
    characters or unprintable keeps a readable prefix and binds the rest by hash.

    Args:
        workflow_id: The workflow's id.
        first_execution_run_id: The run id of the workflow's first execution.
        step: The step's name (or an activity's number) within the workflow.
        continued_from: The run a continue-as-new, cron or retried run continued from.

    Returns:
        The idempotency key.
    """
    chain = (
        f"{first_execution_run_id}/{continued_from}" if continued_from else first_execution_run_id
    )
    key = f"{workflow_id}/{chain}/{step}"
    if len(key) <= 255 and key.isprintable():
        return key
    digest = hashlib.sha256(key.encode()).hexdigest()
    prefix = "".join(c if c.isprintable() else "?" for c in workflow_id)[:120]
    return f"{prefix}/sha256:{digest}"


#: The characters a key keeps on the wire: RFC 3986's unreserved set without ``~``,
#: which every router, proxy, client and header parser passes through unchanged.
_WIRE_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._")
#: A key's wire form: the safe characters and ``~XX`` escapes (upper-case hex).
_WIRE_FORM = re.compile(r"(?:[A-Za-z0-9._-]|~[0-9A-F]{2})+")


def wire_key(key: str) -> str:
    """The one spelling of ``key`` that a far side sees, in a header, a body and a lookup.

    Letters, digits, ``-``, ``.`` and ``_`` stay; every other character becomes ``~`` and
    two upper-case hex digits per UTF-8 byte (``order-ann smith/r1/step`` is
    ``order-ann~20smith~2Fr1~2Fstep``). Percent-encoding would not do: a router, a proxy or
    a framework decodes ``%`` in a query or a path (Starlette, FastAPI and most others do)
    but never in a header, so a far side would file an operation under one spelling and
    look it up under another. The form is made only of characters nothing decodes, and is
    one-to-one, so the far side never has to decode anything to match a key.

    Args:
        key: The ledger's idempotency key.

    Returns:
        The key's wire form.
    """
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
