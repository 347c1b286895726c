"""Regenerate the screenshots of the Temporal UI (docs/ui/*.png, shown by docs/operating.md).

    .venv/bin/python scripts/ui_screenshots.py

Runs the UI tests (tests/test_ui.py: a dev server with its Web UI, headless Chromium from
the system's packages) keeping a screenshot of each step they take, so the pictures show
exactly the path the tests prove. Exits with the tests' status.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHOTS = ROOT / "docs" / "ui"


def main() -> int:
    """Run the UI tests with screenshots going to docs/ui; their exit status."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ui-") as scratch:
        # A short scratch folder keeps the paths the pictures show short.
        return subprocess.call(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
             f"--basetemp={scratch}", "tests/test_ui.py"],
            cwd=ROOT,
            # CI=1: without Chromium the tests fail instead of skipping.
            env=dict(os.environ, LEDGER_UI_SHOTS=str(SHOTS), CI="1"),
        )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
