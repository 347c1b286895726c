"""The library's public face, as griffe reads it from the sources: every name each public
module exports in ``__all__``, with its kind and signature (and a class's public members).

``tests/public_api.json`` records it; ``tests/test_public_api.py`` compares the sources
with the record, so a name cannot appear, vanish or change its signature by accident.
After an intended change, record the face again and commit the difference::

    .venv/bin/python -m tests.public_api --write
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import griffe

ROOT = Path(__file__).resolve().parent.parent
RECORD = Path(__file__).with_name("public_api.json")
#: The installed namespace's subpackages, by their folders in this repository.
SUBPACKAGES = ("ledger", "activities", "workflows")
#: The public modules whose ``__all__`` is the face.
MODULES = (
    "temporal_ledger.ledger",
    "temporal_ledger.ledger.storage",
    "temporal_ledger.ledger.testing",
    "temporal_ledger.activities",
    "temporal_ledger.workflows",
    "temporal_ledger.activities.http",
    "temporal_ledger.activities.mcp",
    "temporal_ledger.activities.openai_agents",
    "temporal_ledger.activities.pydantic_ai",
    "temporal_ledger.activities.google_adk",
    "temporal_ledger.activities.strands",
    "temporal_ledger.activities.langgraph",
)
_CORE_LEAVES = ("ledger", "storage", "testing", "activities", "workflows", "http", "mcp")
#: The framework integrations: each exports exactly one name, ``activity_rules``.
INTEGRATIONS = tuple(m for m in MODULES if m.rsplit(".", 1)[1] not in _CORE_LEAVES)
#: The most names the rest of the face may have, across its modules (temporalio's OpenAI
#: Agents integration has about 16, pydantic-ai's Temporal package 7): the 33 it has, so
#: that a new public name is a decision the change says, not a drift.
MOST_CORE_NAMES = 33
#: Special members that are part of a class's face.
_SPECIAL = ("__init__", "__call__")


@contextmanager
def loaded() -> Iterator[griffe.Module]:
    """The ``temporal_ledger`` namespace, loaded statically by griffe from the sources.

    The repository keeps the subpackages as top-level folders; a temporary folder links
    them under ``temporal_ledger/``, as they are installed.
    """
    with tempfile.TemporaryDirectory() as tmp:
        namespace = Path(tmp) / "temporal_ledger"
        namespace.mkdir()
        for folder in SUBPACKAGES:
            (namespace / folder).symlink_to(ROOT / folder, target_is_directory=True)
        yield griffe.load(
            "temporal_ledger",
            search_paths=[tmp],
            resolve_aliases=True,
            resolve_external=False,
        )


def face() -> dict[str, dict[str, Any]]:
    """Each public module's exported names, with what griffe says of each."""
    with loaded() as package:
        found: dict[str, dict[str, Any]] = {}
        for path in MODULES:
            module = package[path.removeprefix("temporal_ledger.")]
            names = module.exports or []
            found[path] = {str(name): _describe(module[name], top=True) for name in sorted(names)}
        return found


def _describe(obj: griffe.Object | griffe.Alias, *, top: bool = False) -> Any:
    target = obj.final_target if obj.is_alias else obj
    if target.is_class:
        return {
            "kind": "class",
            "bases": [str(base) for base in target.bases],
            "members": {
                name: _describe(member)
                for name, member in sorted(target.all_members.items())
                if _public_member(name)
            },
        }
    if target.is_function:
        labels = sorted(target.labels & {"property", "classmethod", "staticmethod"})
        prefix = f"{' '.join(labels)} " if labels else ""
        return f"{prefix}function {_signature(target)}"
    if target.is_module:
        return "module"
    annotation = f": {target.annotation}" if target.annotation is not None else ""
    # A module's constants may change value (a version); a class's (an enum's) may not.
    value = f" = {target.value}" if target.value is not None and not top else ""
    return f"attribute{annotation}{value}"


def _public_member(name: str) -> bool:
    """A class's member is in the face unless it is private, or a test of the contract
    suite (its tests are what it checks, not what a backend calls)."""
    return (not name.startswith("_") or name in _SPECIAL) and not name.startswith("test_")


def _signature(function: griffe.Function) -> str:
    parts: list[str] = []
    kinds = griffe.ParameterKind
    star_done = False
    for index, parameter in enumerate(function.parameters):
        previous = function.parameters[index - 1].kind if index else None
        if previous is kinds.positional_only and parameter.kind is not kinds.positional_only:
            parts.append("/")
        if parameter.kind is kinds.keyword_only and not star_done:
            parts.append("*")
            star_done = True
        if parameter.kind is kinds.var_positional:
            star_done = True
        prefix = {kinds.var_positional: "*", kinds.var_keyword: "**"}.get(parameter.kind, "")
        text = prefix + parameter.name
        if parameter.annotation is not None:
            text += f": {parameter.annotation}"
        if parameter.default is not None:
            text += f" = {parameter.default}"
        parts.append(text)
    returns = f" -> {function.returns}" if function.returns is not None else ""
    return f"({', '.join(parts)}){returns}"


def differences(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """What changed from the record: names gone, names new, signatures changed."""
    problems = []
    for module in sorted(recorded.keys() | current.keys()):
        was, now = recorded.get(module, {}), current.get(module, {})
        problems += [f"{module}.{name}: vanished" for name in sorted(was.keys() - now.keys())]
        problems += [f"{module}.{name}: appeared" for name in sorted(now.keys() - was.keys())]
        problems += [
            f"{module}.{name}: changed\n"
            f"  was: {json.dumps(was[name])}\n  now: {json.dumps(now[name])}"
            for name in sorted(was.keys() & now.keys())
            if was[name] != now[name]
        ]
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"record the face in {RECORD}")
    args = parser.parse_args()
    current = face()
    if args.write:
        RECORD.write_text(json.dumps(current, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        print(f"recorded {sum(map(len, current.values()))} names in {RECORD}")
        return 0
    recorded = json.loads(RECORD.read_text(encoding="utf-8"))
    for problem in differences(recorded, current):
        print(problem)
    return 1 if differences(recorded, current) else 0


if __name__ == "__main__":
    raise SystemExit(main())


def undocumented() -> list[str]:
    """Every public entry point whose docstring (Google style) does not name exactly its
    arguments in ``Args:``, or says nothing of what it returns in ``Returns:``.

    A class's constructor is documented in the class's docstring (``Args:``, or
    ``Attributes:`` for a dataclass's fields), but for its ``*args`` and ``**kwargs`` (a
    pydantic model's fields); a pydantic model needs a docstring only.
    """
    problems: list[str] = []
    with loaded() as package:
        for path in MODULES:
            module = package[path.removeprefix("temporal_ledger.")]
            for name in sorted(module.exports or []):
                target = module[name].final_target if module[name].is_alias else module[name]
                where = f"{path}.{name}"
                if target.is_function:
                    problems += _function_problems(where, target)
                elif target.is_class:
                    problems += _class_problems(where, target)
    return sorted(set(problems))


def _sections(obj: griffe.Object) -> dict[str, list[Any]]:
    found: dict[str, list[Any]] = {}
    if obj.docstring is not None:
        for section in obj.docstring.parse("google", warnings=False):
            found.setdefault(section.kind.value, []).extend(
                section.value if isinstance(section.value, list) else [section.value]
            )
    return found


def _named(items: list[Any]) -> set[str]:
    return {str(getattr(item, "name", "")).lstrip("*") for item in items}


def _parameters(function: griffe.Function, *, variadic: bool = True) -> set[str]:
    kinds = (griffe.ParameterKind.var_positional, griffe.ParameterKind.var_keyword)
    return {
        p.name
        for p in function.parameters
        if p.name not in ("self", "cls") and (variadic or p.kind not in kinds)
    }


def _function_problems(where: str, function: griffe.Function) -> list[str]:
    if function.docstring is None:
        return [f"{where}: no docstring"]
    if "property" in function.labels:
        return []
    sections = _sections(function)
    problems = []
    documented = _named(sections.get("parameters", []))
    if documented != _parameters(function):
        problems.append(
            f"{where}: Args: names {sorted(documented)}, takes {sorted(_parameters(function))}"
        )
    returns = str(function.returns) if function.returns is not None else "None"
    if returns not in ("None", "NoReturn") and not (
        sections.get("returns") or sections.get("yields")
    ):
        problems.append(f"{where}: no Returns: for {returns}")
    return problems


def _class_problems(where: str, cls: griffe.Class) -> list[str]:
    if cls.docstring is None:
        return [f"{where}: no docstring"]
    problems = []
    init = cls.members.get("__init__")
    if isinstance(init, griffe.Function) and _parameters(init, variadic=False):
        sections = _sections(cls)
        documented = _named(sections.get("parameters", []) + sections.get("attributes", []))
        missing = _parameters(init, variadic=False) - documented
        if missing:
            problems.append(f"{where}: Args:/Attributes: miss {sorted(missing)}")
    for name, member in cls.members.items():
        if isinstance(member, griffe.Function) and _public_member(name) and name not in _SPECIAL:
            problems += _function_problems(f"{where}.{name}", member)
    return problems
