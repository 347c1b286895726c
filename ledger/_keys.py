"""The one derivation of an idempotency key from where a step sits in a workflow.

The ledger owns it, beside the keys and their wire form (``_wire``): the Temporal side
derives every default key with it, and an operator's script, which holds a ``Ledger``,
finds a step's record by it. Strings only: nothing here knows Temporal.
"""

from __future__ import annotations

import hashlib

from ._wire import wire_key


class KeySpellings:
    """The part of :class:`~temporal_ledger.ledger.Ledger` that spells keys: a workflow
    step's, and any key's on the wire."""

    @staticmethod
    def step_key(
        workflow_id: str,
        first_execution_run_id: str,
        step: str,
        *,
        continued_from: str | None = None,
    ) -> str:
        """The key ``run_tool`` gives a workflow's step when it is given none, for a
        starter or a script that shows the step's record (``ledger.state(key)``,
        ``temporal-ledger show KEY``).

        ``{workflow id}/{first execution run id}[/{continued from}]/{step}``: the first
        execution's run id is kept by worker crashes, ``temporal workflow reset`` and
        continue-as-new, so the same step keeps its key and a reset replays its effects
        instead of repeating them; a workflow id reused for a new execution gets new
        keys. A key that would be longer than 255 characters or unprintable keeps a
        readable prefix and binds the rest by hash.

        Args:
            workflow_id: The workflow's id.
            first_execution_run_id: The run id of the workflow's first execution
                (``WorkflowHandle.first_execution_run_id``).
            step: The step's name (or an activity's number) within the workflow.
            continued_from: The run a continue-as-new, cron or retried run continued from.

        Returns:
            The idempotency key.
        """
        continued = f"/{continued_from}" if continued_from else ""
        key = f"{workflow_id}/{first_execution_run_id}{continued}/{step}"
        if len(key) <= 255 and key.isprintable():
            return key
        digest = hashlib.sha256(key.encode()).hexdigest()
        prefix = "".join(c if c.isprintable() else "?" for c in workflow_id)[:120]
        return f"{prefix}/sha256:{digest}"

    @staticmethod
    def wire_key(key: str) -> str:
        """The one spelling of ``key`` that a far side sees, in a header, a body and a lookup:
        what ``request_json`` sends as ``Idempotency-Key``, ``{key}`` in a ``lookup_probe``
        template, an MCP call's ``_meta``. Use it where a tool or a probe names the key
        itself (``Ledger.wire_key(tool_context().key)`` in a body, a probe's lookup).

        Letters, digits, ``-``, ``.`` and ``_`` stay; every other character becomes ``~``
        and two upper-case hex digits per UTF-8 byte (``order-ann smith/r1/step`` is
        ``order-ann~20smith~2Fr1~2Fstep``). Percent-encoding would not do: a router, a
        proxy or a framework decodes ``%`` in a query or a path but never in a header, so a
        far side would file an operation under one spelling and look it up under another.
        Nothing decodes this form, and it is one-to-one, so the far side never has to
        decode anything to match a key; ``temporal-ledger show`` takes it as well as the
        key.

        Args:
            key: The ledger's idempotency key.

        Returns:
            The key's wire form.
        """
        return wire_key(key)


#: ``{workflow id}/{first execution run id}[/{continued from}]/{step}``: public as
#: :meth:`KeySpellings.step_key`, which says why.
step_key = KeySpellings.step_key
