"""The shipped packages type-check: ``mypy --strict`` (``[tool.mypy]`` in pyproject.toml,
run by ``scripts/typecheck``) reports no error in ``ledger/``, ``activities/`` and
``workflows/``, nor in what users copy (``examples/`` but the Strands ones, ``demo.py``,
``worker.py``), and every ``type: ignore`` in the packages names what it silences and why.

``py.typed`` is shipped: a user's own type checker reads these annotations, so they must
be ones we checked. The first run fills ``.mypy_cache`` (a minute or so); later runs
take about a second.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import tokenize
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: The folders that ship, as the repository keeps them.
PACKAGES = ("ledger", "activities", "workflows")

#: A ``type: ignore`` comment, however spelled.
_IGNORE = re.compile(r"#\s*type:\s*ignore\b")
#: One that is accepted: its error codes in brackets, then a comment that says why.
_EXPLAINED = re.compile(r"#\s*type:\s*ignore\[[a-z-]+(?:\s*,\s*[a-z-]+)*\]\s*#\s*\S")


def test_mypy_strict_reports_no_errors() -> None:
    checked = subprocess.run(
        ["bash", str(ROOT / "scripts" / "typecheck")],
        cwd=ROOT,
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = checked.stdout + checked.stderr
    assert checked.returncode == 0, f"mypy --strict found errors:\n{output}"
    # Two runs, both clean: the three packages, then the examples and the root scripts.
    successes = re.findall(r"^Success: no issues found in \d+ source files$", checked.stdout, re.M)
    assert len(successes) == 2, output


def test_the_check_is_strict_on_the_three_packages() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    assert config["strict"] is True
    assert "pydantic.mypy" in config["plugins"]
    assert sorted(config["packages"]) == sorted(f"temporal_ledger.{p}" for p in PACKAGES)


def unexplained_ignores(source: str) -> list[tuple[int, str]]:
    """The ``type: ignore`` comments of ``source`` that lack a code or a reason."""
    found = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type != tokenize.COMMENT:
            continue
        match = _IGNORE.search(token.string)
        if match and not _EXPLAINED.match(token.string, match.start()):
            found.append((token.start[0], token.string))
    return found


def test_every_type_ignore_names_its_code_and_its_reason() -> None:
    files = sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py"))
    assert len(files) > 40
    problems = [
        f"{path.relative_to(ROOT)}:{line}: {comment}"
        for path in files
        for line, comment in unexplained_ignores(path.read_text(encoding="utf-8"))
    ]
    assert not problems, "write each as `# type: ignore[code]  # why`:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    ("line", "explained"),
    [
        ("x = f()  # type: ignore[attr-defined]  # set by __init__", True),
        ("x = f()  # type: ignore[method-assign,assignment]  # likewise", True),
        ("x = f()  # type: ignore", False),
        ("x = f()  # type: ignore  # no code", False),
        ("x = f()  # type:ignore[arg-type]", False),
        ("x = f()  # type: ignore[arg-type]", False),
        ("x = f()  # type: ignore[arg-type] #", False),
        ("x = 1  # not an ignore", True),
        ("x = '# type: ignore'", True),
    ],
)
def test_the_ignore_check_tells_explained_from_bare(line: str, explained: bool) -> None:
    assert (unexplained_ignores(line + "\n") == []) is explained
