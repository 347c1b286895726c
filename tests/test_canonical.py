"""The fingerprint's canonical JSON is RFC 8785, whichever encoder path produced it."""

from __future__ import annotations

from typing import Any

import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st
from temporal_ledger.ledger._canonical import (
    DIMENSIONS,
    FINGERPRINT_VERSION,
    canonical_json,
    combine,
    sha256_hex,
)

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


digests = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)


@settings(max_examples=200, deadline=None)
@given(st.tuples(*(digests | st.text(max_size=70) for _ in DIMENSIONS)))
def test_the_combined_fingerprint_is_the_hash_of_rfc8785(hashes: tuple[str, ...]) -> None:
    # Lowercase hex digests take the joined-pieces path; anything else the encoder's.
    dimensions = dict(zip(DIMENSIONS, hashes, strict=True))
    expected = rfc8785.dumps({"version": FINGERPRINT_VERSION, "dimensions": dimensions})
    assert combine(dimensions) == sha256_hex(expected)
