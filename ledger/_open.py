"""Where a ledger is: its URL checked before anything is opened, and shown without its
password."""

from __future__ import annotations

import functools
import urllib.parse
from collections.abc import Callable

from ._errors import InvalidRequest
from ._recorder import Recorder


def shown_url(url: str) -> str:
    """A ledger URL as messages and logs show it: without its password."""
    try:
        parts = urllib.parse.urlsplit(url)
        password = parts.password
    except ValueError:  # not even a URL: show it as it is, it holds no parsable secret
        return url
    if password is None and "password=" not in parts.query:
        return url  # as written: urlunsplit would spell sqlite:///x as sqlite:/x
    if password is not None:
        netloc = parts.netloc.replace(f":{password}@", ":***@", 1)
        parts = parts._replace(netloc=netloc)
    if "password=" in parts.query:
        query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
        parts = parts._replace(
            query=urllib.parse.urlencode(
                [(k, "***" if k == "password" else v) for k, v in query], safe="*"
            )
        )
    return urllib.parse.urlunsplit(parts)


_URL_FORMS = (
    "use sqlite:///path/to/ledger.db (a file on this machine; sqlite:////abs/path.db for "
    "an absolute path) or postgresql://user@host:5432/db (a server; the 'postgres' extra)"
)


def opener(url: str) -> Callable[[], Recorder]:
    """What opens the ledger at ``url``, once everything that can be checked without
    opening it has been: the scheme, a SQLite file's folder, the PostgreSQL extra and the
    URL's syntax. ``Ledger.open`` runs it; ``LedgerPlugin`` calls this when a worker is
    made, so that a wrong URL stops the worker at start instead of failing every call.

    Raises:
        InvalidRequest: The URL is not one the ledger opens; the message names it (its
            password hidden) and the fix.
        ImportError: A PostgreSQL URL without the ``[postgres]`` extra installed.
    """
    if not isinstance(url, str):
        raise InvalidRequest(f"ledger URL must be a string, not {type(url).__name__}")
    shown = shown_url(url)
    scheme = url.partition(":")[0].lower() if ":" in url else ""
    if url.startswith("sqlite:///"):
        from ._sqlite import SQLiteRecorder, path_from_url

        try:
            path = path_from_url(url)
        except InvalidRequest as exc:
            raise InvalidRequest(f"ledger {shown}: {exc}") from None
        folder = path.parent.absolute()
        if not folder.is_dir():
            problem = (
                "is not a folder: pass another path"
                if folder.exists()
                else "does not exist: create it or pass another path"
            )
            hint = ""
            if not path.is_absolute():
                hint = (
                    " (the path after sqlite:/// is relative to the working directory; "
                    f"for /{path.as_posix()} write sqlite:////{path.as_posix()})"
                )
            raise InvalidRequest(f"ledger {shown}: folder {folder} {problem}{hint}")
        return functools.partial(SQLiteRecorder, path)
    if scheme == "sqlite":
        raise InvalidRequest(
            f"ledger {shown}: a SQLite ledger URL has three slashes before the file's path: "
            "sqlite:///relative/path.db, or sqlite:////absolute/path.db"
        )
    if scheme in ("postgresql", "postgres"):
        if not url.startswith(f"{scheme}://"):
            raise InvalidRequest(
                f"ledger {shown}: a PostgreSQL ledger URL starts with postgresql://: "
                "postgresql://user@host:5432/database"
            )
        try:
            from ._postgres import PostgresRecorder, check_url
        except ImportError as exc:  # its message names the extra and how to install it
            raise ImportError(f"ledger {shown}: {exc}", name=exc.name) from exc
        try:
            check_url(url)
        except InvalidRequest as exc:
            raise InvalidRequest(
                f"ledger {shown}: {exc}: use postgresql://user:password@host:5432/database"
            ) from None
        return functools.partial(PostgresRecorder.from_url, url)
    if not scheme:
        raise InvalidRequest(f"ledger {shown!r} is not a URL: {_URL_FORMS}")
    raise InvalidRequest(f"ledger {shown}: unsupported scheme {scheme!r}: {_URL_FORMS}")
