"""The public face is the one recorded in ``tests/public_api.json``: no name appears,
vanishes or changes its signature unless the record changes with it."""

from __future__ import annotations

import importlib
import json
import re

import pytest

from tests.public_api import (
    INTEGRATIONS,
    MODULES,
    MOST_CORE_NAMES,
    RECORD,
    ROOT,
    SUBPACKAGES,
    differences,
    face,
    undocumented,
)


@pytest.fixture(scope="module")
def current() -> dict[str, dict[str, object]]:
    return face()


def test_the_face_is_the_recorded_one(current: dict[str, dict[str, object]]) -> None:
    recorded = json.loads(RECORD.read_text(encoding="utf-8"))
    problems = differences(recorded, current)
    assert problems == [], (
        "the public face changed; if that is intended, record it with "
        "`.venv/bin/python -m tests.public_api --write` and commit tests/public_api.json:\n"
        + "\n".join(problems)
    )


@pytest.mark.parametrize("module", MODULES)
def test_griffe_reads_the_same_exports_python_imports(
    module: str, current: dict[str, dict[str, object]]
) -> None:
    imported = importlib.import_module(module)
    assert sorted(current[module]) == sorted(imported.__all__)


def test_the_differences_name_what_vanished_appeared_and_changed() -> None:
    recorded = {"m": {"gone": "function () -> None", "kept": "function (a: int) -> None"}}
    now = {"m": {"new": "function () -> None", "kept": "function (a: str) -> None"}}
    problems = differences(recorded, now)
    assert problems[:2] == ["m.gone: vanished", "m.new: appeared"]
    assert problems[2].startswith("m.kept: changed")
    assert "(a: int)" in problems[2] and "(a: str)" in problems[2]


def test_every_public_entry_point_documents_its_arguments_and_returns() -> None:
    assert undocumented() == []


def test_the_readmes_table_of_public_names_is_the_face() -> None:
    """The table of public names, moved from the README to the API reference page, names
    exactly the face."""
    page = (RECORD.parent.parent / "docs" / "reference" / "index.md").read_text(encoding="utf-8")
    section = page.split("## Public names", 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]
    rows = {
        match.group(1): set(re.findall(r"`([\w.]+)`", match.group(2)))
        for match in re.finditer(r"^\| `([\w.]+)` \| (.*) \|$", section, re.M)
    }
    assert rows == {module: set(importlib.import_module(module).__all__) for module in MODULES}


def test_the_face_has_33_names_and_one_per_integration(
    current: dict[str, dict[str, object]],
) -> None:
    """33 names, and one (``activity_rules``) per framework integration; LangGraph adds
    the wrapper of a ``ToolNode``'s tool calls (its async and sync hook) and the call a
    node's own code makes through the ledger (from an async or a sync node), because a
    key per call is made inside the node activity, where only LangGraph's own extension
    point or the node's code reaches; Strands adds the wrapper of an MCP client's transport,
    because its MCP activity sends no caller's ``_meta`` and the transport is the one
    thing of that call its user hands over."""
    counts = {module: len(names) for module, names in current.items()}
    core = {module: n for module, n in counts.items() if module not in INTEGRATIONS}
    assert sum(core.values()) <= MOST_CORE_NAMES, core
    for module in INTEGRATIONS:
        assert list(current[module]) == ["activity_rules", *HOOKS.get(module, ())], (
            module,
            current[module],
        )


#: What an integration offers beside its rules: the hooks its framework asks for.
HOOKS = {
    "temporal_ledger.activities.langgraph": (
        "ledger_call",
        "ledger_tool_calls",
    ),
    "temporal_ledger.activities.strands": ("ledger_transport",),
}


def test_every_public_module_is_in_the_face() -> None:
    """A module without a leading underscore is public: its ``__all__`` is recorded."""
    public = {
        f"temporal_ledger.{folder}" + ("" if path.stem == "__init__" else f".{path.stem}")
        for folder in SUBPACKAGES
        for path in (ROOT / folder).glob("*.py")
        if not path.stem.startswith("_") or path.stem == "__init__"
    }
    assert public == set(MODULES)
