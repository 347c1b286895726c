"""HTTP for ledgered tools: forward the idempotency key, classify what a call may have done.

Use :func:`request_json` inside a ``@tool``. It sends the tool's idempotency key as an
``Idempotency-Key`` header and turns every outcome into one of three things the ledger
understands:

========================================  ==============================================
what happened                             what the ledger records
========================================  ==============================================
2xx                                       success: an :class:`HttpResult`
409 Conflict                              success with ``already_done=True``: the far
                                          side says it already holds this key
connection refused, connect/pool timeout  ``NoEffect(retryable=True)``: nothing was sent
429 Too Many Requests, 408                ``NoEffect(retryable=True, retry_after=...)``
other 4xx (400, 422, ...)                 ``NoEffect(retryable=False)``: fix the request
read/write timeout, reset after sending,  :class:`HttpEffectUnknown`: the effect may
5xx, 3xx                                  have committed; the ledger records it unknown
========================================  ==============================================
"""

from __future__ import annotations

import datetime as dt
import email.utils
import functools
import json as jsonlib
import math
import ssl
import string
import urllib.parse
from collections.abc import Callable, Collection
from typing import Any

from pydantic import BaseModel

try:
    import httpx
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        "temporal_ledger.activities.http needs the 'http' extra (httpx is missing): "
        "pip install 'temporal-ledger[http]'"
    ) from exc

from ..ledger import NoEffect
from ._probe import Probe, ProbeAnswer, absent, inconclusive, present
from ._runtime import tool_context

__all__ = [
    "IDEMPOTENCY_HEADER",
    "HttpEffectUnknown",
    "HttpResult",
    "lookup_probe",
    "parse_retry_after",
    "request_json",
]

IDEMPOTENCY_HEADER = "Idempotency-Key"

_EXCERPT = 200
# Everything a header value carries unchanged; '%' is escaped so the encoding stays one-to-one.
_HEADER_SAFE = "".join(c for c in string.printable if "!" <= c <= "~" and c != "%")


class HttpResult(BaseModel):
    """What the far side answered to a call that is done (2xx, or 409 already done).

    Attributes:
        status: The HTTP status.
        body: The response body: parsed JSON, the text when it is not JSON, ``None`` when
            empty.
        already_done: 409: the far side already holds this key, so the effect exists
            from an earlier attempt.
    """

    status: int
    body: Any = None
    already_done: bool = False


class HttpEffectUnknown(Exception):
    """The request may have reached the far side and acted; nobody knows whether it did.

    The ledger records any exception that is not ``NoEffect`` as an unknown effect, so
    a step that raises this parks for an operator (or, for a ``retry_safe`` tool, is
    tried again under the same key).

    Args:
        method: The request's method.
        url: The request's URL.
        what: What happened (a timeout after sending, a reset, a 5xx...).
        status: The HTTP status, if an answer came.
    """

    def __init__(self, method: str, url: str, what: str, *, status: int | None = None) -> None:
        self.method = method
        self.url = url
        self.what = what
        self.status = status
        super().__init__(f"{method} {url}: {what}; the effect may have happened")

    def __reduce__(self):
        return (_rebuild_unknown, (self.method, self.url, self.what, self.status))


def _rebuild_unknown(method: str, url: str, what: str, status: int | None) -> HttpEffectUnknown:
    return HttpEffectUnknown(method, url, what, status=status)


def parse_retry_after(value: str | None, *, now: dt.datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` value (delay-seconds or an HTTP-date).

    Args:
        value: The header's value, if any.
        now: The current time (default: the clock's), for an HTTP-date.

    Returns:
        The seconds; 0 for a date in the past; ``None`` for no value, or one that is
        neither form (no hint).
    """
    if value is None:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # RFC 9110 dates are GMT; "-0000" parses as naive
        when = when.replace(tzinfo=dt.UTC)
    now = now or dt.datetime.now(dt.UTC)
    seconds = (when - now).total_seconds()
    return max(0.0, seconds) if math.isfinite(seconds) else None


async def request_json(
    method: str,
    url: str,
    *,
    json: Any = None,
    headers: dict[str, str] | None = None,
    # httpx's per-phase timeout, not a cancellation: a connect timeout means nothing was
    # sent, a read timeout means it may have acted, and asyncio.timeout cannot tell them apart.
    timeout: float | httpx.Timeout = 30.0,  # noqa: ASYNC109
    idempotency_key: str | None = None,
    client: httpx.AsyncClient | None = None,
) -> HttpResult:
    """Send one HTTP request for a ledgered tool and classify its outcome.

    ``idempotency_key`` defaults to the running tool's key (``tool_context().key``);
    pass it when calling from a plain ledger adapter. Keys outside printable ASCII
    (and ``%``, and spaces) are percent-encoded so that every ledger key has exactly
    one header form. ``client`` lets the caller share a connection pool; otherwise a
    client lives for this call. Never follows redirects and never retries by itself:
    whether to try again is the ledger's decision.

    Args:
        method: The HTTP method.
        url: The URL.
        json: The body, sent as JSON (``Content-Type: application/json``).
        headers: More request headers (not ``Idempotency-Key``: that is the key).
        timeout: httpx's per-phase timeout: a connect timeout means nothing was sent, a
            read timeout that the request may have acted.
        idempotency_key: The key to send; default: the running tool's.
        client: An ``httpx.AsyncClient`` to share its connection pool.

    Returns:
        The answer, for 2xx and for 409 (``already_done=True``).

    Raises:
        NoEffect: Nothing can have happened: not sent (refused connection, bad URL or
            body), 429 (retryable, after its ``Retry-After``) or another 4xx (final).
        HttpEffectUnknown: The effect may have happened (a timeout after sending, a
            reset, a 5xx).
    """
    method = method.upper()
    key = idempotency_key if idempotency_key is not None else tool_context().key
    send_headers = dict(headers or {})
    if any(name.lower() == IDEMPOTENCY_HEADER.lower() for name in send_headers):
        raise NoEffect(
            f"{method} {url}: not sent: the {IDEMPOTENCY_HEADER} header is the ledger's key; "
            "pass idempotency_key= instead",
            retryable=False,
        )
    send_headers[IDEMPOTENCY_HEADER] = _header_form(key)
    content: bytes | None = None
    if json is not None:
        # Serialised here so that a body JSON cannot carry fails before anything is sent.
        try:
            content = jsonlib.dumps(json, allow_nan=False).encode()
        except (TypeError, ValueError) as exc:
            raise NoEffect(f"{method} {url}: not sent: body is not JSON: {exc}") from exc
        send_headers.setdefault("Content-Type", "application/json")
    try:
        if client is None:
            async with httpx.AsyncClient(timeout=timeout, verify=_tls()) as own:
                response = await _send(own, method, url, content, send_headers, timeout)
        else:
            response = await _send(client, method, url, content, send_headers, timeout)
    except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
        raise NoEffect(
            f"{method} {url}: not sent: {type(exc).__name__}: {exc}", retryable=True
        ) from exc
    except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
        raise NoEffect(f"{method} {url}: not sent: {exc}", retryable=False) from exc
    except httpx.TimeoutException as exc:
        raise HttpEffectUnknown(
            method, url, f"no answer within the timeout after sending ({type(exc).__name__})"
        ) from exc
    except httpx.HTTPError as exc:
        # Resets, protocol errors and anything unforeseen: the bytes may have arrived.
        raise HttpEffectUnknown(method, url, f"{type(exc).__name__}: {exc}") from exc
    return _classify(method, url, response)


def _header_form(key: str) -> str:
    """The key as an ``Idempotency-Key`` header value: one form for every key."""
    return urllib.parse.quote(key, safe=_HEADER_SAFE)


def _echoes(response: httpx.Response, key: str) -> bool:
    """Whether a far side's answer names ``key`` as the key it looked up."""
    echoed = response.headers.get(IDEMPOTENCY_HEADER)
    if echoed is not None and key in (echoed, urllib.parse.unquote(echoed)):
        return True
    body = _body(response)
    return isinstance(body, dict) and body.get("idempotency_key") == key


@functools.cache
def _tls() -> ssl.SSLContext:
    # Loading the CA bundle costs about a quarter second; a context is safe to share.
    return httpx.create_ssl_context()


async def _send(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    content: bytes | None,
    headers: dict[str, str],
    http_timeout: float | httpx.Timeout,
) -> httpx.Response:
    return await client.request(
        method, url, content=content, headers=headers, timeout=http_timeout, follow_redirects=False
    )


def _classify(method: str, url: str, response: httpx.Response) -> HttpResult:
    status = response.status_code
    if 200 <= status < 300:
        return HttpResult(status=status, body=_body(response))
    if status == 409:
        return HttpResult(status=status, body=_body(response), already_done=True)
    said = f"{status} {response.reason_phrase}: {_excerpt(response)}"
    if status == 429:
        raise NoEffect(
            f"{method} {url}: {said}",
            retryable=True,
            retry_after=parse_retry_after(response.headers.get("Retry-After")),
        )
    if status == 408:
        # The server never received the whole request (RFC 9110 15.5.9), so it cannot act.
        raise NoEffect(f"{method} {url}: {said}", retryable=True)
    if 400 <= status < 500:
        raise NoEffect(f"{method} {url}: {said}", retryable=False)
    if 300 <= status < 400:
        # A redirect after a write often means "done, look there", but not always.
        location = response.headers.get("Location", "no Location")
        raise HttpEffectUnknown(
            method, url, f"redirected ({said}; {location}), not followed", status=status
        )
    raise HttpEffectUnknown(method, url, f"answered {said}", status=status)


def _body(response: httpx.Response) -> Any:
    if not response.content:
        return None
    try:
        return response.json()
    except ValueError:
        return response.text


def _excerpt(response: httpx.Response) -> str:
    text = " ".join(response.text.split())
    if not text:
        return "(empty body)"
    return text if len(text) <= _EXCERPT else text[: _EXCERPT - 1] + "…"


def lookup_probe(
    url: str,
    *,
    output: Callable[[HttpResult], Any] | None = None,
    absent_statuses: Collection[int] = (404,),
    headers: dict[str, str] | None = None,
    timeout: float = 10.0,
    require_echo: bool = True,
) -> Probe:
    """A probe for ``@tool(probe=...)`` that GETs the operation by its idempotency key.

    ``url`` is a template: ``{key}`` is the key, percent-encoded (a ``/`` in the key too),
    and ``{field}`` any field of the tool's argument. Put the key in the query, e.g.
    ``"{base_url}/orders?idempotency_key={key}"``: every router passes a query through
    as it was sent, while many (Starlette, FastAPI: every ASGI app) decode ``%2F`` in a
    path before routing, so a key in a path segment can meet no route at all. The GET
    carries the key as ``Idempotency-Key`` too, in :func:`request_json`'s form.

    A 2xx answer is ``present``, with ``output(result)`` as the tool's output (the
    :class:`HttpResult` itself without ``output``). A status in ``absent_statuses`` is
    ``absent`` only when the answer shows the far side looked this key up: its
    ``Idempotency-Key`` response header (percent-encoded or not), or an
    ``idempotency_key`` field of its JSON body, is the key (any router answers 404 for a
    route it does not have, and that says nothing about the operation);
    ``require_echo=False`` takes the status alone. Anything
    else, or no answer, is ``inconclusive``. Every answer is recorded as evidence.

    Args:
        url: The template of the URL to GET.
        output: Makes the tool's output of a 2xx answer.
        absent_statuses: The statuses that say the far side has no such operation.
        headers: More request headers.
        timeout: httpx's timeout per phase of the GET.
        require_echo: An absent status counts only if the answer names the key.

    Returns:
        The probe.
    """

    async def probe(key: str, arg: BaseModel) -> ProbeAnswer:
        fields = arg.model_dump() if isinstance(arg, BaseModel) else {}
        where = url.format(**{**fields, "key": urllib.parse.quote(key, safe="")})
        send = {**(headers or {}), IDEMPOTENCY_HEADER: _header_form(key)}
        try:
            async with httpx.AsyncClient(timeout=timeout, verify=_tls()) as client:
                response = await client.get(where, headers=send, follow_redirects=False)
        except httpx.HTTPError as exc:
            return inconclusive(f"GET {where}: {type(exc).__name__}: {exc}")
        seen = {"GET": where, "status": response.status_code, "body": _excerpt(response)}
        if 200 <= response.status_code < 300:
            result = HttpResult(status=response.status_code, body=_body(response))
            found = output(result) if output is not None else result
            return present(found, [seen], basis=f"GET {where} found the operation")
        if response.status_code in absent_statuses:
            if not require_echo or _echoes(response, key):
                return absent([seen], basis=f"GET {where} answered {response.status_code}")
            return inconclusive(
                f"GET {where} answered {response.status_code} without naming the key it "
                f"looked up (its {IDEMPOTENCY_HEADER} header or an idempotency_key field): "
                "a route that does not exist answers so too",
                [seen],
            )
        return inconclusive(f"GET {where} answered {response.status_code}", [seen])

    return probe
