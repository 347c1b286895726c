"""Canonical JSON (RFC 8785) and the ``action-fingerprint-v1`` fingerprint."""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import math
import operator
from collections.abc import Iterable, Iterator, Mapping
from json.encoder import encode_basestring
from types import NoneType
from typing import Any, TypeAlias

import rfc8785
from pydantic import BaseModel, RootModel

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


def check_text(value: Any, *, where: str, raw: bool = False, required: bool = False) -> None:
    """Raise :class:`InvalidRequest` unless the string ``value`` can be recorded: valid
    Unicode, at most :data:`MAX_JSON_TEXT` characters, and for ``raw`` text (stored in a
    column of its own, not inside JSON) no NUL, which PostgreSQL text cannot hold; a
    ``required`` one must be a string with more than whitespace."""
    if required and (not isinstance(value, str) or not value.strip()):
        raise InvalidRequest(f"{where} must be a non-empty string")
    if not value.isascii() or len(value) > MAX_JSON_TEXT // _CHAR_BOUND:
        check_json(value, where=where)  # a short ASCII text needs no walk
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


#: The types of JSON, each a subclass's stand-in (a ``bool`` before an ``int``).
_JSON_TYPES: tuple[type, ...] = (str, bool, int, float, dict, list)
_EXACT = frozenset({*_JSON_TYPES, NoneType})


def _check(value: Any, where: _Where, active: set[int], depth: int) -> int:
    """Check ``value``; return an upper bound of the length of its stored JSON text."""
    kind = type(value)  # the exact built-in types need no isinstance (nearly every value)
    if kind not in _EXACT:  # a subclass (an enum member) is checked as the type it extends
        kind = next((t for t in _JSON_TYPES if isinstance(value, t)), object)
    if kind is str:
        if not value.isascii():
            _check_text(value, where)
        return _CHAR_BOUND * len(value) + _NODE_BOUND
    if kind is int and not -_MAX_SAFE_INT <= value <= _MAX_SAFE_INT:
        problem = f"integer {value} is outside JSON's exact range (±2**53)"
    elif kind is float and not math.isfinite(value):
        problem = (
            f"{_NON_FINITE.get(repr(value), repr(value))} has no exact JSON form: NaN and "
            "infinities cannot be fingerprinted or recorded (use a finite number, or null)"
        )
    elif kind is object:
        problem = (
            f"a {type(value).__name__} is not representable in JSON exactly (use objects, "
            "arrays, strings, finite numbers, booleans or null)"
        )
    elif kind is not dict and kind is not list:
        return _NODE_BOUND
    elif depth >= MAX_JSON_DEPTH:
        problem = f"nested deeper than {MAX_JSON_DEPTH} arrays and objects, the ledger's limit"
    elif (marker := id(value)) in active:
        problem = "cyclic data is not representable in JSON"
    else:
        problem = None
    if problem is not None:
        raise InvalidRequest(f"{_place(where)}: {problem}")
    active.add(marker)  # no need to take it out on a refusal: the walk ends there
    bound = _NODE_BOUND
    if kind is dict:
        for k, v in value.items():
            if type(k) is not str and not isinstance(k, str):
                raise InvalidRequest(
                    f"{_place(where)}: object key {k!r} is a {type(k).__name__}, not a string"
                )
            if not k.isascii():
                _check_text(k, f"{_place(where)} key")
            bound += _CHAR_BOUND * len(k) + _check(v, (where, k), active, depth + 1)
    else:
        for i, v in enumerate(value):
            bound += _check(v, (where, i), active, depth + 1)
    active.remove(marker)
    return bound


_NON_FINITE = {"nan": "NaN", "inf": "infinity", "-inf": "-infinity"}


def _check_text(text: str, where: _Where) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidRequest(
            f"{_place(where)}: {text!r} is not valid Unicode text (a lone surrogate)"
        ) from None


def canonical_json(value: Any) -> bytes:
    """RFC 8785 canonical bytes of a JSON value (already checked by :func:`check_json`)."""
    if _sorts_as_rfc8785(value):
        # The standard encoder's sorted, compact output of these values is byte-for-byte
        # RFC 8785 (same string escapes, same integer digits, same key order), in C.
        return _STORED_ENCODER.encode(value).encode()
    try:
        return rfc8785.dumps(value)
    except Exception as exc:  # rfc8785 raises its own domain errors
        raise InvalidRequest(f"not canonicalisable as JSON: {exc}") from exc


# Built once (json.dumps with options builds a new encoder on every call): as the ledger
# stores a value in an event body (payload_text), and as the fast path of canonical_json.
_STORED_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def payload_text(payload: dict[str, Any]) -> str:
    """The stored JSON text of a payload: sorted keys, so it re-serialises identically."""
    return _STORED_ENCODER.encode(payload)


def _sorts_as_rfc8785(value: Any) -> bool:
    """Whether the standard encoder writes ``value`` as RFC 8785 does: built-in types
    only, no float (the two write numbers differently), no integer beyond 2**53, and no
    object key with a character from U+D800 up (RFC 8785 sorts keys by UTF-16 code units,
    Python by code points; the two orders agree below the surrogate range). The rest goes
    to rfc8785. (A path that sent most floats through the standard encoder too paid
    nothing a user sees: bench/README.md, issue 42.)"""
    kind = type(value)
    if kind is dict:
        for k, v in value.items():
            if type(k) is not str or (k and max(k) >= "\ud800") or not _sorts_as_rfc8785(v):
                return False
        return True
    if kind is list:
        return all(map(_sorts_as_rfc8785, value))
    if kind is int:
        return bool(-_MAX_SAFE_INT <= value <= _MAX_SAFE_INT)
    return kind is str or kind is bool or value is None


def model_json(model: BaseModel) -> Any:
    """A pydantic model as the JSON the ledger fingerprints and records:
    ``model.model_dump(mode="json")`` made canonical by :func:`canonical_dump`.

    The same model gives the same JSON in every process, whatever its ``PYTHONHASHSEED``
    (a ``set[str]`` iterates in a different order in each). A NaN or an infinity stays a
    float, so :func:`check_json` names its field instead of the value reaching the ledger
    as ``null`` (pydantic's JSON for it) or failing later as another type.
    """
    return canonical_dump(model, model.model_dump(mode="json"))


def canonical_dump(instance: Any, dumped: Any) -> Any:
    """``dumped``, the JSON form of ``instance`` (as pydantic or Temporal's pydantic
    converter writes it), with what no process setting may change settled:

    * every array that a ``set`` or ``frozenset`` of ``instance`` became is sorted by the
      RFC 8785 canonical JSON of its items (a set has no order of its own: its iteration
      order follows the string hashes, which ``PYTHONHASHSEED`` changes);
    * every NaN or infinity of ``instance`` that the dump wrote as ``null`` (or kept) is
      the float again, for :func:`check_json` to refuse with its field's path.

    The two are walked side by side: a set's array is paired with the set item by item,
    which is exact for a fresh dump of ``instance`` (the dump iterated that very set
    object). ``dumped`` may also be the JSON that ``instance`` was decoded from (the
    payloads Temporal delivered to an activity, whose values must not be encoded again):
    then a set's array is in the sender's order, not the set's, which changes nothing for
    a set of strings, numbers or booleans (sorted all the same); only items that hold sets
    or non-finite numbers themselves may be paired with the wrong item and keep their
    sender's form, so that such a request may be refused as a conflict in another
    process. Where the two differ in shape (a custom serializer), ``dumped`` is kept as it
    is. A value without sets and non-finite numbers comes back unchanged (the same object).
    """
    kind = type(instance)
    if kind is str or kind is int or kind is bool or instance is None:
        return dumped
    if isinstance(instance, float):
        if math.isfinite(instance) or not (dumped is None or isinstance(dumped, float)):
            return dumped  # a finite number, or one the dump spelled out ('NaN' strings)
        return float(instance)
    if isinstance(instance, RootModel):
        return canonical_dump(instance.root, dumped)
    if type(dumped) is dict:
        if isinstance(instance, BaseModel):
            return _rebuilt(dumped, _model_values(instance, dumped))
        if isinstance(instance, dict):
            if len(instance) == len(dumped):
                # Keys may be written differently (1 becomes "1"), never reordered.
                paired = zip(instance.values(), dumped.items(), strict=True)
                return _rebuilt(dumped, ((name, v, j) for v, (name, j) in paired))
            return _rebuilt(dumped, ((n, instance.get(n, _MISSING), j) for n, j in dumped.items()))
        if dataclasses.is_dataclass(instance) and not isinstance(instance, type):
            fields = ((n, getattr(instance, n, _MISSING), j) for n, j in dumped.items())
            return _rebuilt(dumped, fields)
        return dumped
    if (
        type(dumped) is not list
        or not isinstance(instance, (list, tuple, collections.deque, set, frozenset))
        or len(dumped) != len(instance)
    ):
        return dumped
    pairs = enumerate(zip(instance, dumped, strict=True))
    items = _rebuilt(dumped, ((i, item, json_item) for i, (item, json_item) in pairs))
    return sorted(items, key=_set_order) if isinstance(instance, (set, frozenset)) else items


_MISSING: Any = object()


def _rebuilt(dumped: Any, places: Iterable[tuple[Any, Any, Any]]) -> Any:
    """``dumped`` (a list or a dict) with the JSON at each ``(place, value, its JSON)`` made
    :func:`canonical_dump`'s: itself while none changes, else a copy (never edited)."""
    changed = None
    for place, value, json_value in places:
        if value is _MISSING:
            continue
        new = canonical_dump(value, json_value)
        if new is not json_value:
            if changed is None:
                changed = type(dumped)(dumped)
            changed[place] = new
    return dumped if changed is None else changed


def _model_values(model: BaseModel, dumped: dict[str, Any]) -> Iterator[tuple[str, Any, Any]]:
    """Each ``(key, value, its JSON)`` of a model's dump: a field's, a computed field's or
    an extra's, or (dumped by alias) the field whose serialization alias the key is."""
    fields: dict[str, Any] = {**type(model).model_fields, **type(model).model_computed_fields}
    extra = model.__pydantic_extra__ or {}
    aliases: dict[str, str] | None = None
    for name, json_value in dumped.items():
        if name in fields:
            yield name, getattr(model, name, _MISSING), json_value
        elif name in extra:
            yield name, extra[name], json_value
        else:
            if aliases is None:
                aliases = {}
                for attribute, info in fields.items():
                    alias = getattr(info, "serialization_alias", None) or info.alias
                    if alias:
                        aliases[alias] = attribute
            value = getattr(model, aliases[name], _MISSING) if name in aliases else _MISSING
            yield name, value, json_value


def _set_order(item: Any) -> bytes:
    """A set's item's place: its RFC 8785 bytes. An item that has none (a NaN, refused
    later by check_json) sorts after every other, by a digest of what it is."""
    try:
        return canonical_json(item)
    except (InvalidRequest, TypeError, ValueError, RecursionError):
        return b"\xff" + value_digest(item).encode()


def value_digest(value: Any) -> str:
    """A SHA-256 that identifies any value, including one the ledger cannot record (too
    deep, too long, not JSON): containers by their items in order, object keys and leaves
    by type and ``repr``. Walked without recursion, so no depth can break it."""
    digest = hashlib.sha256()
    # ("value", a value), ("key", an object key: a leaf even if container-like), or
    # ("close", the bracket that ends a container).
    stack: list[tuple[str, Any]] = [("value", value)]
    seen: set[int] = set()
    while stack:
        kind, item = stack.pop()
        if kind == "close":
            digest.update(item)
        elif kind == "value" and isinstance(item, (dict, list, tuple)):
            if id(item) in seen:  # a cycle: its second visit is a mark, not a walk
                digest.update(b"<cycle>")
                continue
            seen.add(id(item))
            is_dict = isinstance(item, dict)
            digest.update(b"{" if is_dict else b"[")
            stack.append(("close", b"}" if is_dict else b"]"))
            for k, v in reversed(list(item.items() if isinstance(item, dict) else enumerate(item))):
                stack.append(("value", v))
                if is_dict:
                    stack.append(("key", k))
        else:
            text = f"{type(item).__name__}:{_safe_repr(item)};"
            digest.update(text.encode("utf-8", "backslashreplace"))
    return digest.hexdigest()


def _safe_repr(value: Any) -> str:
    try:
        return repr(value)
    except Exception as exc:  # a value whose repr raises is still identified by its type
        return f"<unrepresentable: {type(exc).__name__}>"


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fingerprint_dimensions(fields: Mapping[str, Any]) -> dict[str, str]:
    """Per-dimension SHA-256 of the canonical JSON of each identity field."""
    return {name: _dimension(fields[name]) for name in DIMENSIONS}


def _dimension(value: Any) -> str:
    """The SHA-256 of the canonical JSON of one dimension. A string (a capability, an
    instruction, a performer: they repeat from call to call) or ``None`` is immutable, so
    its digest is kept; a container is hashed each time, as its contents may change."""
    if value is None or (type(value) is str and len(value) <= _TEXT_KEPT_UP_TO):
        digest = _TEXT_DIGESTS.get(value)
        if digest is None:
            digest = sha256_hex(canonical_json(value))
            if len(_TEXT_DIGESTS) >= _TEXT_DIGESTS_KEPT:
                _TEXT_DIGESTS.clear()  # a cache: another thread's entry may go too
            _TEXT_DIGESTS[value] = digest
        return digest
    return sha256_hex(canonical_json(value))


# Measured (valgrind, bench/README.md, issue 30): the five dimensions and their combination
# cost ~140 k instructions per call, most of it the encoder and SHA-256 of the three texts
# that every call of a tool repeats. Issue 42 measured the caches off: no figure a user
# sees moved beyond its noise, but the instruction count the project holds did (a
# PostgreSQL replay 875 k -> 999 k, over its 926 k; bench/README.md), so they stay.
_TEXT_DIGESTS: dict[str | None, str] = {}
_TEXT_DIGESTS_KEPT = 4096
#: Longer texts (an instruction may be a whole prompt) are hashed each time: the cache
#: holds at most 4096 x 1 KiB of them.
_TEXT_KEPT_UP_TO = 1024


def combine(dimensions: Mapping[str, str]) -> str:
    """The one fingerprint over the per-dimension hashes, bound to the version."""
    digests = _DIGESTS(dimensions)
    combined = _COMBINED.get(digests)
    if combined is None:  # else the same request again (a replay): same digests, same result
        # RFC 8785 of {"version": ..., "dimensions": {name: hash}}: the keys sorted, each
        # value a JSON string with the standard escapes, so these pieces joined (tests
        # compare the result with rfc8785's).
        fields = ",".join(f'"{name}":{encode_basestring(dimensions[name])}' for name in _SORTED)
        text = f'{{"dimensions":{{{fields}}},"version":"{FINGERPRINT_VERSION}"}}'
        combined = sha256_hex(text.encode())
        if len(_COMBINED) >= _TEXT_DIGESTS_KEPT:
            _COMBINED.clear()
        _COMBINED[digests] = combined
    return combined


_DIGESTS = operator.itemgetter(*DIMENSIONS)
_SORTED = sorted(DIMENSIONS)
_COMBINED: dict[tuple[str, ...], str] = {}
