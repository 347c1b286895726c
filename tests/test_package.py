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
#: workflow side imports it; it alone reaches into the ledger's private modules.
PROTOCOL_FILE = "activities/_protocol.py"
PROTOCOL_MODULE = "..activities._protocol"


#: The plugin's one edge back to the workflow side (see tests/test_imports.py).
BACK_EDGE = ("activities/_plugin.py", "..workflows._interceptor")


def test_no_subpackage_reaches_into_another_ones_private_modules() -> None:
    private = re.compile(r"^\s*from\s+(\.\.(ledger|activities|workflows)\._\w+)", re.M)
    offenders = [
        f"{name}: {match.group(1)}"
        for name, text in library_sources()
        for match in private.finditer(text)
        if name != PROTOCOL_FILE
        and match.group(1) != PROTOCOL_MODULE
        and (name, match.group(1)) != BACK_EDGE
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
