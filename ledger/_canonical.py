"""Canonical JSON (RFC 8785) and the ``action-fingerprint-v1`` fingerprint."""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from typing import Any, TypeAlias

import rfc8785

from ._errors import InvalidRequest

FINGERPRINT_VERSION = "action-fingerprint-v1"

#: The dimensions of an action's identity, in the order they are hashed.
DIMENSIONS: tuple[str, ...] = ("capability", "instruction", "payload", "precondition", "performer")

_MAX_SAFE_INT = 2**53 - 1


def check_json(value: Any, *, where: str) -> None:
    """Raise :class:`InvalidRequest` unless ``value`` is exactly representable as JSON.

    Refuses NaN and infinities, integers beyond the IEEE-754 safe range, sets,
    tuples, bytes, non-string object keys, other types, and cycles: none of them
    survive a JSON round trip unchanged, and silently stringifying them would bind
    a key to something other than what the caller meant.
    """
    _check(value, where, set())


# Where a value sits, as nested (parent, step) pairs: the dotted text is only built
# for an error message, not for every value checked.
_Where: TypeAlias = "str | tuple[_Where, str | int]"


def _place(where: _Where) -> str:
    steps: list[str] = []
    while isinstance(where, tuple):
        where, step = where
        steps.append(f"[{step}]" if isinstance(step, int) else f".{step}")
    return where + "".join(reversed(steps))


def _check(value: Any, where: _Where, active: set[int]) -> None:
    kind = type(value)
    # The exact built-in types first (nearly every value), subclasses below.
    if kind is str:
        if not value.isascii():
            _check_text(value, where)
        return
    if value is None or kind is bool:
        return
    if kind is not int and kind is not float and kind is not dict and kind is not list:
        if isinstance(value, str):
            _check_text(value, where)
            return
        if isinstance(value, bool):
            return
    if isinstance(value, int):
        if abs(value) > _MAX_SAFE_INT:
            raise InvalidRequest(
                f"{_place(where)}: integer {value} is outside JSON's exact range (±2**53)"
            )
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidRequest(f"{_place(where)}: {value!r} is not representable in JSON")
        return
    if isinstance(value, (dict, list)):
        marker = id(value)
        if marker in active:
            raise InvalidRequest(f"{_place(where)}: cyclic data is not representable in JSON")
        active.add(marker)
        try:
            if isinstance(value, dict):
                for k, v in value.items():
                    if type(k) is not str:
                        if not isinstance(k, str):
                            raise InvalidRequest(
                                f"{_place(where)}: object key {k!r} is a {type(k).__name__},"
                                " not a string"
                            )
                    if not k.isascii():
                        _check_text(k, f"{_place(where)} key")
                    _check(v, (where, k), active)
            else:
                for i, v in enumerate(value):
                    _check(v, (where, i), active)
        finally:
            active.discard(marker)
        return
    raise InvalidRequest(
        f"{_place(where)}: a {type(value).__name__} is not representable in JSON exactly "
        "(use objects, arrays, strings, finite numbers, booleans or null)"
    )


def _check_text(text: str, where: _Where) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidRequest(
            f"{_place(where)}: {text!r} is not valid Unicode text (a lone surrogate)"
        ) from None


def canonical_json(value: Any) -> bytes:
    """RFC 8785 canonical bytes of a JSON value (already checked by :func:`check_json`)."""
    if type(value) is str:
        # A string alone: its canonical form is the standard encoder's (same escapes).
        return _TEXT_ENCODER.encode(value).encode()
    if value is None:
        return b"null"
    if _same_as_sorted_json(value):
        # For these values the standard encoder's sorted, compact output is byte-for-byte
        # RFC 8785 (same string escapes, same integer digits, same key order), and it
        # runs in C instead of rfc8785's per-character Python.
        return _SORTED_ENCODER.encode(value).encode()
    try:
        return rfc8785.dumps(value)
    except Exception as exc:  # rfc8785 raises its own domain errors
        raise InvalidRequest(f"not canonicalisable as JSON: {exc}") from exc


# Built once: json.dumps with options builds a new encoder on every call.
_TEXT_ENCODER = json.JSONEncoder(ensure_ascii=False)
_SORTED_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _same_as_sorted_json(value: Any) -> bool:
    """No floats (RFC 8785 formats numbers like ECMAScript) and no object key with a
    character from U+D800 up (RFC 8785 sorts keys by UTF-16 code units, Python by code
    points; the two orders agree below the surrogate range)."""
    if value is None or isinstance(value, (str, bool)):
        return True
    if isinstance(value, int):
        return abs(value) <= _MAX_SAFE_INT
    if isinstance(value, list):
        return all(_same_as_sorted_json(item) for item in value)
    if isinstance(value, dict):
        return all(
            isinstance(k, str) and (not k or max(k) < "\ud800") and _same_as_sorted_json(v)
            for k, v in value.items()
        )
    return False


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fingerprint_dimensions(fields: Mapping[str, Any]) -> dict[str, str]:
    """Per-dimension SHA-256 of the canonical JSON of each identity field."""
    return {name: sha256_hex(canonical_json(fields[name])) for name in DIMENSIONS}


# The canonical JSON of {"version": ..., "dimensions": {name: hash}}: keys in sorted order
# and every value a lowercase hex digest, which needs no escaping, so the bytes are these
# pieces joined (tests compare the result with rfc8785's).
_SORTED_DIMENSIONS = tuple(sorted(DIMENSIONS))
_HEX_DIGEST = re.compile(r"[0-9a-f]{64}")


def combine(dimensions: Mapping[str, str]) -> str:
    """The one fingerprint over the per-dimension hashes, bound to the version."""
    if all(_HEX_DIGEST.fullmatch(dimensions[name]) for name in DIMENSIONS):
        fields = ",".join(f'"{name}":"{dimensions[name]}"' for name in _SORTED_DIMENSIONS)
        text = f'{{"dimensions":{{{fields}}},"version":"{FINGERPRINT_VERSION}"}}'
        return sha256_hex(text.encode())
    return sha256_hex(
        canonical_json(
            {"version": FINGERPRINT_VERSION, "dimensions": {n: dimensions[n] for n in DIMENSIONS}}
        )
    )


def differing(a: Mapping[str, str], b: Mapping[str, str]) -> list[str]:
    """The names of the dimensions whose hashes differ, in identity order."""
    return [name for name in DIMENSIONS if a.get(name) != b.get(name)]
