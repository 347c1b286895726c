"""An operator's answer that does not fit a parked call, sent every way an operator can
send one: refused with its reason by the update, the signal and ``temporal-ledger
reconcile``, with nothing recorded and the run still parked."""

from __future__ import annotations

import json
from typing import Any

from temporal_ledger.ledger import Ledger

from tests.temporal_support import (
    ledger_cli,
    open_effects,
    query_json,
    send_signal,
    send_update,
    template_of,
    wait_for,
)


async def answer_refused_everywhere(
    address: str, workflow_id: str, ledger_url: str, output: Any, reason: str
) -> dict[str, Any]:
    """Answer the run's one parked call with ``output`` by update, signal and CLI; each
    must refuse it, saying ``reason``, and leave the call parked with nothing recorded.

    Returns:
        The parked call's ``open_effects`` entry, whose update template is still to send.
    """
    [parked] = await wait_for(lambda: open_effects(address, workflow_id), what="the call to park")
    template = template_of(parked["update_command"])
    verdict = {**template, "actor": "ops-ann", "basis": "seen on the far side", "output": output}

    status, answer = await send_update(address, workflow_id, "reconcile", verdict)
    assert status != 0 and reason in answer, answer
    # One line: the reason, not a traceback.
    assert "Traceback" not in answer
    # The template's other answer, with its output left in, says what to change.
    nothing = {**verdict, "verdict": "no_effect_confirmed"}
    status, answer = await send_update(address, workflow_id, "reconcile", nothing)
    assert status != 0 and "delete it from the template" in answer, answer

    await send_signal(address, workflow_id, "reconcile", verdict)
    rejections = await wait_for(
        lambda: query_json(address, workflow_id, "reconcile_rejections"),
        what="the signal's rejection",
    )
    rejections = rejections if isinstance(rejections, list) else [rejections]
    assert any(reason in r["reason"] and r["via"] == "signal" for r in rejections), rejections

    status, said = await ledger_cli(
        ledger_url, "reconcile", parked["key"], "--verdict", "effect_confirmed",
        "--actor", "ops-ann", "--basis", "seen on the far side", "--output", json.dumps(output),
    )  # fmt: skip
    assert status != 0 and reason in said, said

    with Ledger.open(ledger_url) as ledger:
        assert [e.key for e in ledger.open_effects()] == [parked["key"]]
        assert ledger.state(parked["key"]).reconciliations == []
    [still] = await open_effects(address, workflow_id)
    assert still["key"] == parked["key"]
    return parked


async def answer_with_the_template(
    address: str, workflow_id: str, parked: dict[str, Any], output: Any, *, basis: str
) -> None:
    """Send the parked call's printed update template with ``output`` put in, as an
    operator does; the update must take it."""
    verdict = {
        **template_of(parked["update_command"]),
        "actor": "ops-ann",
        "basis": basis,
        "output": output,
    }
    status, answer = await send_update(address, workflow_id, "reconcile", verdict)
    assert status == 0, answer
