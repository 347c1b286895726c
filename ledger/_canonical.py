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

#: How deep arrays and objects may nest in a value the ledger records (payload,
#: precondition, context, output, evidence). Deeper values are refused as bad input
#: before anything acts; every JSON library in the path (and the stack) holds this.
MAX_JSON_DEPTH = 100
#: How many characters of JSON text one value may take, as the ledger stores it
#: (16 MiB): a replay writes the output again, and a database row has limits of its own.
MAX_JSON_TEXT = 16 * 1024 * 1024

# An upper bound of the stored text per node: a number or a literal, a separator, and
# the brackets of a container; a character of a string takes at most 6 (\u0000).
_NODE_BOUND = 32
_CHAR_BOUND = 6


def check_json(value: Any, *, where: str) -> None:
    """Raise :class:`InvalidRequest` unless ``value`` is exactly representable as JSON and
    within the ledger's limits.

    Refuses NaN and infinities, integers beyond the IEEE-754 safe range, sets,
    tuples, bytes, non-string object keys, other types, cycles and text that is not
    valid Unicode (a lone surrogate): none of them survive a JSON round trip unchanged,
    and silently stringifying them would bind a key to something other than what the
    caller meant. Also refuses values nested deeper than :data:`MAX_JSON_DEPTH` or
    longer than :data:`MAX_JSON_TEXT` characters of JSON text, naming the limit: a value
    the ledger accepts once, it can write again in every later record of its key.
    """
    if _check(value, where, set(), 0) > MAX_JSON_TEXT:
        # Only a value that may be too long pays for measuring its text exactly.
        size = len(_STORED_ENCODER.encode(value))
        if size > MAX_JSON_TEXT:
            raise InvalidRequest(
                f"{where}: {size:,} characters of JSON text, over the ledger's limit of "
                f"{MAX_JSON_TEXT:,} (16 MiB)"
            )


def check_text(value: str, *, where: str, raw: bool = False) -> None:
    """Raise :class:`InvalidRequest` unless the string ``value`` can be recorded: valid
    Unicode, at most :data:`MAX_JSON_TEXT` characters, and for ``raw`` text (stored in a
    column of its own, not inside JSON) no NUL, which PostgreSQL text cannot hold."""
    if len(value) > MAX_JSON_TEXT // _CHAR_BOUND and len(_TEXT_ENCODER.encode(value)) > (
        MAX_JSON_TEXT
    ):
        raise InvalidRequest(
            f"{where}: {len(value):,} characters, over the ledger's limit of "
            f"{MAX_JSON_TEXT:,} characters of JSON text (16 MiB)"
        )
    if not value.isascii():
        _check_text(value, where)
    if raw and "\x00" in value:
        raise InvalidRequest(f"{where}: {value!r} contains NUL (0x00), which cannot be recorded")


# Where a value sits, as nested (parent, step) pairs: the dotted text is only built
# for an error message, not for every value checked.
_Where: TypeAlias = "str | tuple[_Where, str | int]"


def _place(where: _Where) -> str:
    steps: list[str] = []
    while isinstance(where, tuple):
        where, step = where
        steps.append(f"[{step}]" if isinstance(step, int) else f".{step}")
    steps.reverse()
    if len(steps) > 12:  # a deep path: its ends say where it is
        steps[4:-4] = [f"...({len(steps) - 8} levels)..."]
    return where + "".join(steps)


def _check(value: Any, where: _Where, active: set[int], depth: int) -> int:
    """Check ``value``; return an upper bound of the length of its stored JSON text."""
    kind = type(value)
    # The exact built-in types first (nearly every value), subclasses below.
    if kind is str:
        if not value.isascii():
            _check_text(value, where)
        return _CHAR_BOUND * len(value) + _NODE_BOUND
    if value is None or kind is bool:
        return _NODE_BOUND
    if kind is not int and kind is not float and kind is not dict and kind is not list:
        if isinstance(value, str):
            _check_text(value, where)
            return _CHAR_BOUND * len(value) + _NODE_BOUND
        if isinstance(value, bool):
            return _NODE_BOUND
    if isinstance(value, int):
        if abs(value) > _MAX_SAFE_INT:
            raise InvalidRequest(
                f"{_place(where)}: integer {value} is outside JSON's exact range (±2**53)"
            )
        return _NODE_BOUND
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidRequest(f"{_place(where)}: {value!r} is not representable in JSON")
        return _NODE_BOUND
    if isinstance(value, (dict, list)):
        if depth >= MAX_JSON_DEPTH:
            raise InvalidRequest(
                f"{_place(where)}: nested deeper than {MAX_JSON_DEPTH} arrays and objects, "
                "the ledger's limit"
            )
        marker = id(value)
        if marker in active:
            raise InvalidRequest(f"{_place(where)}: cyclic data is not representable in JSON")
        active.add(marker)
        bound = _NODE_BOUND
        depth += 1
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
                    bound += _CHAR_BOUND * len(k) + _check(v, (where, k), active, depth)
            else:
                for i, v in enumerate(value):
                    bound += _check(v, (where, i), active, depth)
        finally:
            active.discard(marker)
        return bound
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
# As the ledger stores a value in an event body (the recorder's payload text).
_STORED_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


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


def value_digest(value: Any) -> str:
    """A SHA-256 that identifies any value, including one the ledger cannot record (too
    deep, too long, not JSON): containers by their items in order, object keys and leaves
    by type and ``repr``. Walked without recursion, so no depth can break it."""
    digest = hashlib.sha256()
    stack: list[Any] = [value]
    seen: set[int] = set()
    while stack:
        item = stack.pop()
        if isinstance(item, _Close):
            digest.update(item.mark)
            continue
        if isinstance(item, (dict, list, tuple)):
            if id(item) in seen:  # a cycle: its second visit is a mark, not a walk
                digest.update(b"<cycle>")
                continue
            seen.add(id(item))
            pairs = list(item.items()) if isinstance(item, dict) else list(enumerate(item))
            digest.update(b"{" if isinstance(item, dict) else b"[")
            stack.append(_Close(b"}" if isinstance(item, dict) else b"]"))
            for k, v in reversed(pairs):
                stack.append(v)
                if isinstance(item, dict):
                    stack.append(_Leaf(k))
            continue
        if isinstance(item, _Leaf):
            item = item.value
        text = f"{type(item).__name__}:{_safe_repr(item)};"
        digest.update(text.encode("utf-8", "backslashreplace"))
    return digest.hexdigest()


class _Close:
    __slots__ = ("mark",)

    def __init__(self, mark: bytes) -> None:
        self.mark = mark


class _Leaf:
    """An object key, hashed as a leaf even when it is a container-like value."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def _safe_repr(value: Any) -> str:
    try:
        return repr(value)
    except Exception as exc:  # a value whose repr raises is still identified by its type
        return f"<unrepresentable: {type(exc).__name__}>"


def recordable_text(text: str, *, limit: int = 64 * 1024) -> str:
    """Free text from the world (an exception's message) made fit to record: a lone
    surrogate as its escape, and at most ``limit`` characters."""
    if not text.isascii():
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    if len(text) > limit:
        text = f"{text[:limit]}... ({len(text) - limit:,} more characters)"
    return text


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
