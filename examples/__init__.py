"""Example apps in the Temporal samples layout; not part of the installed package."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
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


#: A file in :func:`work_dir`: while it is there, the next refund loses its reply.
LOSE_NEXT_REPLY = "lose-next-reply"


def lose_the_reply_if_asked() -> None:
    """Once, when ``lose-next-reply`` is in :func:`work_dir`: the worker process dies right
    after the effect, before it answers, as a crash would. The run then parks until an
    operator answers (docs/agents.md, "A lost reply"); without a ledger the retry would
    refund twice. The file is removed first, so the next worker's tries go through."""
    marker = work_dir() / LOSE_NEXT_REPLY
    try:
        marker.unlink()
    except FileNotFoundError:
        return
    os._exit(1)


def once_per_key(key: str | None, act: Callable[[], str]) -> str:
    """``act()``'s answer, or the answer it gave the first time ``key`` came (no act): how
    the notes servers dedupe by the ledger key a call carries (``notes-by-key.jsonl`` in
    :func:`work_dir`). A call without a key (not through the ledger) always acts."""
    path = work_dir() / "notes-by-key.jsonl"
    if key is not None and path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            entry = json.loads(line)
            if entry["key"] == key:
                return str(entry["answer"])
    answer = act()
    if key is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps({"key": key, "answer": answer}) + "\n")
    return answer
