"""Checks a JSON value against the JSON schema a tool's output model publishes.

Only what pydantic's ``model_json_schema()`` emits for output models is understood
(``type``, ``properties``, ``required``, ``items``, ``additionalProperties``,
``anyOf``/``oneOf``/``allOf``, ``enum``, ``const``, ``$ref`` into ``$defs``), so the
ledger can check an operator's ``effect_confirmed`` output without the tool's code.
Anything else in a schema is accepted rather than guessed at.
"""

from __future__ import annotations

from typing import Any

_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


def output_problems(schema: dict[str, Any], value: Any) -> list[str]:
    """Each way ``value`` does not fit ``schema``, naming the field and its expected type."""
    return _problems(schema, value, path="", root=schema)


def output_misfit(schema: dict[str, Any], output: Any, *, producer: str = "the tool") -> str | None:
    """Why ``output`` cannot stand as an ``effect_confirmed`` output, or ``None`` if it fits."""
    problems = output_problems(schema, output)
    if not problems:
        return None
    return (
        f"effect_confirmed needs the output the effect produced, as {producer} returns it "
        f"({describe_schema(schema)}): {'; '.join(problems)}"
    )


def describe_schema(schema: dict[str, Any], root: dict[str, Any] | None = None) -> str:
    """A short name for the type a schema asks for: ``integer``, ``string or null``, ``Item``."""
    root = schema if root is None else root
    schema = _resolve(schema, root)
    for combinator in ("anyOf", "oneOf"):
        if combinator in schema:
            return " or ".join(describe_schema(option, root) for option in schema[combinator])
    if "enum" in schema:
        return "one of " + ", ".join(repr(v) for v in schema["enum"])
    if "const" in schema:
        return repr(schema["const"])
    kind = schema.get("type")
    if kind == "array" and isinstance(schema.get("items"), dict):
        return f"list of {describe_schema(schema['items'], root)}"
    if kind == "object" and "title" in schema:
        return f"object {schema['title']}"
    if kind == "object" and schema.get("required"):
        return "object with " + ", ".join(str(name) for name in schema["required"])
    if isinstance(kind, list):
        return " or ".join(kind)
    return str(kind) if kind else "any value"


def output_template(schema: dict[str, Any], root: dict[str, Any] | None = None) -> Any:
    """A value of the schema's shape for the commands shown to an operator, with a
    placeholder (``"<integer>"``, ``"<string>"``, ``"<one of 'a', 'b'>"``) for every value
    to fill in: sent back unchanged, it is refused (see :func:`output_problems`)."""
    root = schema if root is None else root
    schema = _resolve(schema, root)
    for combinator in ("anyOf", "oneOf"):
        options = [o for o in schema.get(combinator, []) if _resolve(o, root).get("type") != "null"]
        if options:
            return output_template(options[0], root)
    if "const" in schema:
        return schema["const"]
    kind = schema.get("type")
    if kind == "object" or "properties" in schema:
        return {
            name: output_template(sub, root) for name, sub in schema.get("properties", {}).items()
        }
    if kind == "array":
        items = schema.get("items")
        return [output_template(items, root)] if isinstance(items, dict) and items else []
    return None if kind == "null" else _placeholder(schema, root)


def _placeholder(schema: dict[str, Any], root: dict[str, Any]) -> str:
    return f"<{describe_schema(schema, root)}>"


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    seen = 0
    while isinstance(schema, dict) and "$ref" in schema and seen < 32:
        ref = str(schema["$ref"])
        if not ref.startswith("#/"):
            return {}
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part, {}) if isinstance(target, dict) else {}
        schema, seen = target, seen + 1
    return schema if isinstance(schema, dict) else {}


def _matches(kind: str, value: Any) -> bool:
    if kind in ("integer", "number") and isinstance(value, bool):
        return False
    if kind == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _TYPES.get(kind, (object,)))


def _problems(schema: dict[str, Any], value: Any, *, path: str, root: dict[str, Any]) -> list[str]:
    schema = _resolve(schema, root)
    where = path or "output"
    wrong = f"{where}: expected {describe_schema(schema, root)}, got {_shown(value)}"
    for combinator in ("anyOf", "oneOf"):
        if combinator in schema:
            options = schema[combinator]
            if any(not _problems(o, value, path=path, root=root) for o in options):
                return []
            # Where one option is plainly the one meant (its type, its tag): name the field.
            meant = _meant(options, value, root)
            return [wrong] if meant is None else _problems(meant, value, path=path, root=root)
    problems = [
        p for sub in schema.get("allOf", []) for p in _problems(sub, value, path=path, root=root)
    ]
    if "enum" in schema and value not in schema["enum"]:
        return [*problems, wrong]
    if "const" in schema and value != schema["const"]:
        return [*problems, f"{where}: expected {schema['const']!r}, got {_shown(value)}"]
    if isinstance(value, str) and value == _placeholder(schema, root) and "const" not in schema:
        return [*problems, f"{where}: still the template's placeholder {value!r}: fill it in"]
    kinds = _kinds(schema)
    if value is None and kinds == ["object"] and schema.get("required"):
        value = {}  # no output at all: name every field it needs
    if kinds and not any(_matches(k, value) for k in kinds):
        return [*problems, wrong]  # (not for the {} above: an object matches)
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in value:
                expected = describe_schema(properties.get(name, {}), root)
                problems.append(f"{_join(path, name)}: missing ({expected})")
        for name, item in value.items():
            if name in properties:
                problems += _problems(properties[name], item, path=_join(path, name), root=root)
            elif schema.get("additionalProperties") is False:
                problems.append(
                    f"{_join(path, name)}: not a field of {describe_schema(schema, root)}"
                )
    least = schema.get("minItems")
    if isinstance(value, list) and isinstance(least, int) and len(value) < least:
        problems.append(f"{where}: needs at least {least} item(s), got {len(value)}")
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            problems += _problems(schema["items"], item, path=f"{where}[{index}]", root=root)
    return problems


def _meant(options: list[Any], value: Any, root: dict[str, Any]) -> dict[str, Any] | None:
    """The one option of a union that ``value`` plainly means to be, or ``None``: the only
    one of its JSON type; among objects, the only one whose tags (``const`` and ``enum``
    fields) the value's fields match, else the only one whose required fields it has."""
    resolved = [_resolve(option, root) for option in options]
    candidates = [option for option in resolved if _of_type(option, value)]
    if isinstance(value, dict) and len(candidates) > 1:
        tagged = [option for option in candidates if _tags_match(option, value, root)]
        candidates = tagged or candidates
        if len(candidates) > 1:
            complete = [
                option
                for option in candidates
                if set(option.get("required", [])) <= value.keys() and option.get("required")
            ]
            candidates = complete or candidates
    return candidates[0] if len(candidates) == 1 else None


def _kinds(schema: dict[str, Any]) -> list[str]:
    kind = schema.get("type")
    return kind if isinstance(kind, list) else [kind] if isinstance(kind, str) else []


def _of_type(schema: dict[str, Any], value: Any) -> bool:
    kinds = _kinds(schema)
    if not kinds and "properties" in schema:
        kinds = ["object"]
    return not kinds or any(_matches(k, value) for k in kinds)


def _tags_match(schema: dict[str, Any], value: dict[str, Any], root: dict[str, Any]) -> bool:
    """Whether every field of ``value`` that the schema fixes (``const``, ``enum``) has a
    value it allows; a schema that fixes none of them matches no tag."""
    tagged = False
    for name, field in schema.get("properties", {}).items():
        field = _resolve(field, root) if isinstance(field, dict) else {}
        if name not in value or not ("const" in field or "enum" in field):
            continue
        tagged = True
        allowed = [field["const"]] if "const" in field else field["enum"]
        if value[name] not in allowed:
            return False
    return tagged


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
