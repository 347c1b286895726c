"""Example apps in the Temporal samples layout; not part of the installed package."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

#: The folder, in the system's temporary directory, where the examples' tools write what
#: they change unless told otherwise.
DEFAULT_FOLDER = "temporal-ledger-examples"


def work_dir() -> Path:
    """Where the examples' tools write their effects (``notes.txt``, ``refunds.jsonl``,
    ``refunds.log``): ``$SUPPORT_DIR`` when set, else ``temporal-ledger-examples`` in the
    system's temporary directory (``$TMPDIR``), never the folder they run from (the
    examples run from the repository's root). Created when a tool first writes to it."""
    chosen = os.environ.get("SUPPORT_DIR")
    return Path(chosen or Path(tempfile.gettempdir()) / DEFAULT_FOLDER).resolve()
