"""Bad input to the ledger: refused before anything is recorded, whatever the storage.

The ledger checks a request, its values and its text, and a person's decision or
verdict (no placeholder of a printed template, no empty field), before it writes, so
these run on one backend (SQLite), beside the shared contract suite
(:mod:`temporal_ledger.ledger.testing`) that every backend runs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from temporal_ledger.ledger import Authority, InvalidRequest, Ledger
from temporal_ledger.ledger._models import FailureType, NextOperation
from temporal_ledger.ledger._testing_child import _CountingAdapter, _execute, request


@pytest.fixture
async def ledger(sqlite_url: str) -> AsyncIterator[Ledger]:
    async with Ledger.open(sqlite_url, lease=2.0) as opened:
        yield opened
    with Ledger.open(sqlite_url) as reopened:
        report = reopened.verify()
        assert report.ok, report.problems


@pytest.mark.parametrize(
    "bad",
    [
        float("nan"),
        float("inf"),
        float("-inf"),
        {1, 2},
        b"bytes",
        (1, 2),
        2**60,
        object(),
        "lone \ud800 surrogate",
    ],
    ids=["nan", "inf", "-inf", "set", "bytes", "tuple", "bigint", "object", "surrogate"],
)
async def test_values_json_cannot_represent_are_refused(ledger: Ledger, bad: Any) -> None:
    with pytest.raises(InvalidRequest):
        await _execute(
            ledger,
            {
                "key": "k",
                "capability": "files.append",
                "instruction": "i",
                "payload": {"value": bad},
                "performer": "p",
            },
        )
    with pytest.raises(InvalidRequest):
        request("k", precondition=[bad])
    assert ledger.events() == []


async def test_a_payload_changed_after_construction_is_checked_again(ledger: Ledger) -> None:
    req = request("k", payload={"line": "x"})
    req.payload["line"] = float("nan")  # frozen model, mutable dict inside
    with pytest.raises(InvalidRequest, match=r"payload\.line: NaN"):
        await _execute(ledger, req)
    assert ledger.events() == []


async def test_cyclic_payload_is_refused(ledger: Ledger) -> None:
    cyclic: dict[str, Any] = {}
    cyclic["self"] = cyclic
    with pytest.raises(InvalidRequest, match="cyclic"):
        request("k", payload=cyclic)
    listed: list[Any] = []
    listed.append(listed)
    with pytest.raises(InvalidRequest, match="cyclic"):
        await _execute(
            ledger,
            {
                "key": "k",
                "capability": "a.b",
                "instruction": "i",
                "performer": "p",
                "payload": {"l": listed},
            },
        )
    assert ledger.events() == []


@pytest.mark.parametrize(
    "change",
    [
        {"key": ""},
        {"key": "x" * 256},
        {"key": "tab\there"},
        {"capability": "no spaces"},
        {"performer": ""},
        {"payload": [1]},
    ],
    ids=["empty-key", "long-key", "unprintable-key", "capability", "performer", "payload"],
)
def test_malformed_fields_are_named(change: dict[str, Any]) -> None:
    with pytest.raises(InvalidRequest) as caught:
        request("k", **change)
    assert next(iter(change)) in str(caught.value)


async def test_precondition_without_a_resolver_is_refused(ledger: Ledger) -> None:
    with pytest.raises(InvalidRequest, match="precondition"):
        await _execute(ledger, request("k", precondition={"size": 3}))
    assert ledger.events() == []


async def test_nesting_past_the_limit_is_bad_input_naming_it(ledger: Ledger) -> None:
    deep: Any = "bottom"
    for _ in range(5000):
        deep = {"a": deep}
    with pytest.raises(InvalidRequest, match=r"nested deeper than 100 arrays and objects"):
        await _execute(ledger, request("k", payload={"deep": deep}))
    with pytest.raises(InvalidRequest, match="payload"):
        request("k", payload={"deep": deep})
    assert ledger.events() == []


@pytest.mark.parametrize("field", ["instruction", "performer", "action_id"])
async def test_text_that_cannot_be_recorded_is_refused_before_acting(
    ledger: Ledger, field: str
) -> None:
    for bad in ("lone \ud800 surrogate", "nul \u0000 inside"):
        if bad.startswith("nul") and field != "action_id":
            continue  # inside JSON a NUL is an escape like any other
        with pytest.raises(InvalidRequest, match=field):
            await _execute(ledger, request("k", **{field: bad}))
    with pytest.raises(InvalidRequest, match="principal"):
        Authority("lone \ud800", ["files.*"])
    with pytest.raises(InvalidRequest, match="actor"):
        await ledger.reconcile("k", "still_unknown", "ops \ud800", "seen")
    assert ledger.events() == []


@pytest.mark.parametrize(
    ("actor", "basis", "evidence", "named"),
    [
        ("YOUR-NAME", "the file has the line", [], "actor"),
        ("you", "the file has the line", [], "actor"),
        ("ops-ann", "WHY", [], "basis"),
        ("ops-ann", "WHAT-YOU-SAW", [], "basis"),
        ("ops-ann", "saw <what you saw>", [], "basis"),
        ("ops-ann", "the file has the line", ["<a link to it>"], "evidence"),
        ("probe:append", "the far side said so", [], "evidence"),
    ],
)
async def test_a_verdict_in_nobodys_name_is_refused_and_records_nothing(
    ledger: Ledger, actor: str, basis: str, evidence: list[Any], named: str
) -> None:
    await _execute(ledger, "k", _CountingAdapter(raise_after=ConnectionResetError("reset")))
    before = ledger.events("k")
    with pytest.raises(InvalidRequest, match=named):
        await ledger.reconcile("k", "no_effect_confirmed", actor, basis, evidence=evidence)
    assert ledger.events("k") == before
    assert ledger.state("k").next_operation is NextOperation.RECONCILE_EFFECT


async def test_an_approval_in_nobodys_name_is_refused_and_records_nothing(ledger: Ledger) -> None:
    gated = await _execute(ledger, "k", requires_approval=True)
    assert gated.error_type == FailureType.APPROVAL_REQUIRED
    pending = ledger.state("k").approval
    assert pending is not None
    before = ledger.events("k")
    for actor, basis in (("YOUR-NAME", "the refund is right"), ("lead-ann", "WHY")):
        with pytest.raises(InvalidRequest, match="placeholder"):
            await ledger.approve("k", fingerprint=pending.fingerprint, actor=actor, basis=basis)
    assert ledger.events("k") == before
    assert ledger.state("k").approval == pending


async def test_bad_approval_input_records_nothing(ledger: Ledger) -> None:
    await _execute(ledger, "k", requires_approval=True)
    before = ledger.events("k")
    fingerprint = request("k").fingerprint()
    bad_inputs: tuple[dict[str, Any], ...] = (
        dict(fingerprint=fingerprint, actor="", basis="b"),
        dict(fingerprint=fingerprint, actor="a", basis=" "),
        dict(fingerprint="", actor="a", basis="b"),
        dict(fingerprint=fingerprint, actor="a", basis="b", decision="maybe"),
    )
    for bad in bad_inputs:
        with pytest.raises(InvalidRequest):
            await ledger.approve("k", **bad)
    assert ledger.events("k") == before
