"""The documentation site builds with ``mkdocs build --strict``: a broken link or anchor, a
missing include or an API reference that does not resolve fails the test command.

The build writes into a temporary folder, never into the repository; nothing is fetched
from the network (the theme's fonts are off, no plugin downloads).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.temporal_support import ROOT

pytestmark = pytest.mark.timeout(180)

#: What the site is built from: its configuration, pages, the README and changelog it
#: includes, the hook that links the sources, and the sources the API reference reads.
SOURCES = ("mkdocs.yml", "docs", "README.md", "CHANGELOG.md", "scripts/docs_namespace.py")
LIBRARY = ("ledger", "activities", "workflows")


def build(root: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=root,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=150,
    )


def test_the_site_builds_strictly(copy: Path, tmp_path: Path) -> None:
    """The site builds from its sources alone (SOURCES and LIBRARY, which the broken-page
    tests copy): built from a copy of exactly those, which are the repository's files, it
    is the site the repository builds, so one build checks both."""
    had_site = (copy / "site").exists()
    done = build(copy, tmp_path / "site")
    assert done.returncode == 0, done.stderr
    site = tmp_path / "site"
    for page in (
        "getting-started",
        "agents",
        "operating",
        "approvals-and-probes",
        "backends",
        "design",
        "crash-matrix",
        "repository",
        "changelog",
        "reference/ledger",
        "reference/activities",
        "reference/workflows",
    ):
        assert (site / page / "index.html").is_file(), page
    # The API reference is rendered from the docstrings, one heading per public name.
    reference = (site / "reference" / "activities" / "index.html").read_text(encoding="utf-8")
    for name in ("tool", "LedgerPlugin", "LedgerOptions", "http.lookup_probe"):
        assert f'id="temporal_ledger.activities.{name}"' in reference, name
    ledger = (site / "reference" / "ledger" / "index.html").read_text(encoding="utf-8")
    assert 'id="temporal_ledger.ledger.Ledger"' in ledger
    assert 'id="temporal_ledger.ledger.testing.LedgerContract"' in ledger
    workflows = (site / "reference" / "workflows" / "index.html").read_text(encoding="utf-8")
    assert 'id="temporal_ledger.workflows.run_tool"' in workflows
    # The docstrings' Sphinx roles (:class:`X`) show as the code X.
    for text in (reference, ledger, workflows):
        assert ":class:" not in text and ":meth:" not in text and ":func:" not in text
    # The README's app, included from README.md, is on the Getting started page.
    started = (site / "getting-started" / "index.html").read_text(encoding="utf-8")
    assert "charge_card" in started and "--8&lt;--" not in started
    # The build wrote where it was told, not into the sources' (ignored) site/.
    assert (copy / "site").exists() == had_site


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """The site's sources copied (the library linked) into a folder of their own."""
    root = tmp_path / "repo"
    root.mkdir()
    for name in SOURCES:
        source = ROOT / name
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, root / name)
        else:
            shutil.copy2(source, root / name)
    for name in LIBRARY:
        (root / name).symlink_to(ROOT / name, target_is_directory=True)
    return root


# A broken link and a broken anchor share a build: strict mode turns each warning into a
# failure, and mkdocs warns of both before it stops, so naming both shows that either one
# alone fails the build. A missing reference or include stops the build at once: those
# get a build each.
@pytest.mark.parametrize(
    "breaks",
    [
        [
            ("docs/operating.md", "See [the missing page](missing.md).", "missing.md"),
            (
                "docs/agents.md",
                "See [Operating it](operating.md#no-such-section).",
                "no-such-section",
            ),
        ],
        [("docs/reference/workflows.md", "::: temporal_ledger.workflows.nil", "workflows.nil")],
        [("docs/backends.md", '--8<-- "README.md:no_such_section"', "no_such_section")],
    ],
    ids=["link-and-anchor", "reference", "include"],
)
def test_a_broken_page_fails_the_build(
    copy: Path, tmp_path: Path, breaks: list[tuple[str, str, str]]
) -> None:
    for page, added, _ in breaks:
        path = copy / page
        path.write_text(path.read_text(encoding="utf-8") + f"\n\n{added}\n", encoding="utf-8")
    done = build(copy, tmp_path / "site")
    assert done.returncode != 0
    for _, _, named in breaks:
        assert named in done.stderr + done.stdout, named


def test_the_error_types_table_lists_every_type_a_ledgered_activity_raises() -> None:
    from temporal_ledger.workflows._protocol import FINAL_ERROR_TYPES, ErrorType

    page = (ROOT / "docs" / "operating.md").read_text(encoding="utf-8")
    section = page.split("## Error types", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (`.*?) \| .* \| (\w+) \|$", section, re.M)
    listed = {name: retried for names, retried in rows for name in re.findall(r"`(\w+)`", names)}
    assert set(listed) == {error.value for error in ErrorType}
    assert {name for name, retried in listed.items() if retried == "no"} >= {
        error.value for error in FINAL_ERROR_TYPES
    }
