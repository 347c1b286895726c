"""mkdocs hooks: the ``temporal_ledger`` namespace for mkdocstrings, read from the sources,
and the docstrings' Sphinx roles shown as code.

The repository keeps the subpackages as top-level folders (``ledger/``, ``activities/``,
``workflows/``) that an install maps to ``temporal_ledger.*``. griffe finds modules by
folder name, so this hook links the folders under a temporary ``temporal_ledger/`` and
puts it first on ``sys.path``, where mkdocstrings' Python handler looks (as
``tests/public_api.py`` does for the recorded face). Nothing is written into the
repository.
"""

from __future__ import annotations

import atexit
import re
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUBPACKAGES = ("ledger", "activities", "workflows")
#: A Sphinx cross-reference role left in a rendered docstring (``:class:`~a.B```), which
#: Markdown renders as the role's name followed by the code.
_ROLE = re.compile(r":(?:class|func|meth|attr|data|exc|mod|obj):<code>(~?)([^<]*)</code>")


def _link_namespace() -> str:
    folder = tempfile.mkdtemp(prefix="temporal-ledger-docs-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    namespace = Path(folder) / "temporal_ledger"
    namespace.mkdir()
    for name in SUBPACKAGES:
        (namespace / name).symlink_to(ROOT / name, target_is_directory=True)
    return folder


def on_startup(**_: object) -> None:
    """Runs once per ``mkdocs build`` (or ``serve``), before the plugins load."""
    if not any(Path(p, "temporal_ledger", "ledger").is_symlink() for p in sys.path if p):
        sys.path.insert(0, _link_namespace())


def _as_code(match: re.Match[str]) -> str:
    tilde, target = match.groups()
    return f"<code>{target.rsplit('.', 1)[-1] if tilde else target}</code>"


def on_page_content(html: str, **_: object) -> str:
    """Show ``:class:`X``` (and the other roles) in a docstring as the code ``X``."""
    return _ROLE.sub(_as_code, html)
