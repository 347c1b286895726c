"""The fingerprint's canonical JSON is RFC 8785, whichever encoder path produced it, and a
tool's argument or output model has one JSON whatever order its sets iterate in."""

from __future__ import annotations

import json
from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict
from temporal_ledger.ledger import InvalidRequest
from temporal_ledger.ledger._canonical import (
    DIMENSIONS,
    FINGERPRINT_VERSION,
    canonical_dump,
    canonical_json,
    combine,
    fingerprint_dimensions,
    model_json,
    sha256_hex,
)
from temporal_ledger.workflows._spec import argument_json
from temporalio.contrib.pydantic import pydantic_data_converter

keys = st.text(max_size=8)  # any code point, surrogate-range and astral ones included
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=400, deadline=None)
@given(json_values)
def test_canonical_json_is_rfc8785(value: Any) -> None:
    assert canonical_json(value) == rfc8785.dumps(value)


def test_the_orders_that_differ_between_utf16_and_code_points() -> None:
    # U+FF61 sorts after U+1F600 by code point but before it by UTF-16 code unit.
    value = {"\uff61": 1, "\U0001f600": 2, "a\x07": [1.5, "\u2028", -0.0]}
    assert canonical_json(value) == rfc8785.dumps(value)


# Floats of every magnitude, the bounds where Python's repr and ECMAScript's number text
# part (1e-4, 1e-6, 2**53, 1e16, 1e21) and the integers among them, inside values the
# standard encoder writes: the float sends the value to rfc8785, which must give its bytes.
float_bounds = [
    0.0, -0.0, 1e-4, -1e-4, 9.999e-5, 1.0001e-4, 1e-6, 1e-7, 5e-324, 0.1, 123.456, 1e15 + 0.5,
    2.0**52 - 0.5, 2.0**53 - 1, 2.0**53, 2.0**53 + 2, 1e16, 1e20, 1e21, 1.7976931348623157e308,
]  # fmt: skip
floats = (
    st.sampled_from(float_bounds + [-f for f in float_bounds])
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.integers(min_value=-(2**60), max_value=2**60).map(float)
    | st.builds(lambda m, e: m * 10.0**e, st.integers(-999, 999), st.integers(-12, 25))
)
float_values = st.recursive(
    floats | st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1) | st.text(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=600, deadline=None)
@given(float_values)
def test_canonical_json_of_floats_is_rfc8785(value: Any) -> None:
    assert canonical_json(value) == rfc8785.dumps(value)


digests = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)


@settings(max_examples=200, deadline=None)
@given(st.tuples(*(digests | st.text(max_size=70) for _ in DIMENSIONS)))
def test_the_combined_fingerprint_is_the_hash_of_rfc8785(hashes: tuple[str, ...]) -> None:
    # Lowercase hex digests take the joined-pieces path; anything else the encoder's.
    dimensions = dict(zip(DIMENSIONS, hashes, strict=True))
    expected = rfc8785.dumps({"version": FINGERPRINT_VERSION, "dimensions": dimensions})
    assert combine(dimensions) == sha256_hex(expected)


# -- the JSON of a tool's argument or output model (model_json) ------------------------


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)
    name: str
    tags: frozenset[str] = frozenset()


class Argument(BaseModel):
    tags: set[str] = set()
    groups: frozenset[frozenset[str]] = frozenset()
    items: set[Frozen] = set()
    by_name: dict[str, set[int]] = {}
    anything: Any = None


def relaid(items: Any, kind: type = set) -> Any:
    """A set of the same items laid out differently: built in another order in a larger
    table, as another process's hash seed (or another history) would lay it out."""
    items = list(items)
    table = {f"\0padding {i}" for i in range(64)} | set(reversed(items))
    table -= {f"\0padding {i}" for i in range(64)}
    return table if kind is set else frozenset(table)


def test_a_relaid_set_iterates_in_another_order() -> None:
    # What the properties below rely on: the two layouts do iterate differently.
    words = [f"word {i}" for i in range(12)]
    assert list(set(words)) != list(relaid(words))


def fingerprint_of(payload: Any) -> str:
    return combine(
        fingerprint_dimensions(
            {
                "capability": "files.append",
                "instruction": "append",
                "payload": payload,
                "precondition": None,
                "performer": "agent",
            }
        )
    )


text_sets = st.sets(st.text(max_size=6), max_size=8)


@settings(max_examples=150, deadline=None)
@given(
    tags=text_sets,
    groups=st.sets(st.frozensets(st.text(max_size=3), max_size=3), max_size=4),
    names=st.sets(st.text(max_size=4), max_size=4),
    numbers=st.dictionaries(st.text(max_size=4), st.sets(st.integers(-5, 2**20)), max_size=3),
    anything=json_values,
)
def test_set_order_and_key_order_never_change_the_fingerprint(
    tags: set[str],
    groups: set[frozenset[str]],
    names: set[str],
    numbers: dict[str, set[int]],
    anything: Any,
) -> None:
    one = Argument(
        tags=tags,
        groups=frozenset(groups),
        items={Frozen(name=n, tags=frozenset(n)) for n in names},
        by_name=numbers,
        anything={"deep": [{"set": set(tags)}], "json": anything},
    )
    other = Argument(
        tags=relaid(tags),
        groups=relaid((relaid(g, frozenset) for g in groups), frozenset),
        items=relaid(Frozen(name=n, tags=relaid(n, frozenset)) for n in reversed(list(names))),
        by_name={k: relaid(numbers[k]) for k in reversed(list(numbers))},
        anything={"json": anything, "deep": [{"set": relaid(tags)}]},
    )
    first, second = model_json(one), model_json(other)
    assert canonical_json(first) == canonical_json(second)
    assert fingerprint_of(first) == fingerprint_of(second)
    # The canonical order: each set's items sorted by their RFC 8785 bytes.
    assert first["tags"] == sorted(tags, key=lambda t: rfc8785.dumps(t))
    for group in first["groups"]:
        assert group == sorted(group, key=lambda t: rfc8785.dumps(t))
    assert first["groups"] == sorted(first["groups"], key=rfc8785.dumps)
    assert [item["name"] for item in first["items"]] == [
        item["name"] for item in sorted(first["items"], key=rfc8785.dumps)
    ]


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_a_value_without_sets_is_dumped_as_pydantic_dumps_it(value: Any) -> None:
    # No record made before the canonical form existed changes its fingerprint.
    model = Argument(anything=value)
    assert canonical_json(model_json(model)) == canonical_json(model.model_dump(mode="json"))


class Reading(BaseModel):
    label: str = "r"
    limit: float = 1.0
    points: list[dict[str, float]] = []
    extra: Any = None


@pytest.mark.parametrize(
    ("reading", "path", "what"),
    [
        (Reading(limit=float("nan")), "Reading.limit", "NaN"),
        (Reading(points=[{"x": 1.0}, {"y": float("inf")}]), "Reading.points[1].y", "infinity"),
        # Any: pydantic's JSON writes these null; the field is still named.
        (Reading(extra={"t": [float("-inf")]}), "Reading.extra.t[0]", "-infinity"),
        (Reading(extra={float("nan")} | {1.5}), "Reading.extra[1]", "NaN"),
    ],
)
def test_nan_and_infinities_are_refused_naming_the_field(
    reading: Reading, path: str, what: str
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        argument_json(reading)
    assert str(refused.value) == (
        f"{path}: {what} has no exact JSON form: NaN and infinities cannot be "
        "fingerprinted or recorded (use a finite number, or null)"
    )


def test_the_converter_json_of_another_librarys_argument_is_made_canonical() -> None:
    # Activities of other libraries: their arguments are JSON from the payload converter
    # (pydantic's), paired with the objects it encoded.
    converter = pydantic_data_converter.payload_converter
    words = [f"w{i}" for i in range(10)]
    args = [Argument(tags=set(words)), {"plain": relaid(words)}, relaid(words, frozenset)]
    dumped = [json.loads(p.data) for p in converter.to_payloads(args)]
    assert dumped[0]["tags"] != sorted(words) or dumped[1]["plain"] != sorted(words)
    canonical = [canonical_dump(a, d) for a, d in zip(args, dumped, strict=True)]
    assert canonical[0]["tags"] == sorted(words)
    assert canonical[1:] == [{"plain": sorted(words)}, sorted(words)]
