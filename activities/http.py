"""HTTP for ledgered tools: forward the idempotency key, classify what a call may have done.

Use :func:`request_json` inside a ``@tool``. It sends the tool's idempotency key as an
``Idempotency-Key`` header, in its one wire form (``Ledger.wire_key``: the same in a header,
a body and a lookup URL, so the far side never decodes anything), and turns every outcome
into one of three things the ledger understands:

========================================  ==============================================
what happened                             what the ledger records
========================================  ==============================================
2xx                                       success: an :class:`HttpResult`
409 Conflict                              success with ``already_done=True``: the far
                                          side says it already holds this key
connection refused, connect/pool timeout  ``NoEffect(retryable=True)``: nothing was sent
429 Too Many Requests, 408                ``NoEffect(retryable=True, retry_after=...)``
other 4xx (400, 422, ...)                 ``NoEffect(retryable=False)``: fix the request
read/write timeout, reset after sending,  ``HttpEffectUnknown``: the effect may
5xx, 3xx                                  have committed; the ledger records it unknown
========================================  ==============================================
"""

from __future__ import annotations

import contextlib
import datetime as dt
import email.utils
import functools
import json as jsonlib
import math
import ssl
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
from ..ledger._seam import wire_key
from ._probe import Probe, ProbeAnswer
from ._runtime import tool_context

__all__ = ["lookup_probe", "request_json"]

_IDEMPOTENCY_HEADER = "Idempotency-Key"

_EXCERPT = 200
#: The field of a far side's JSON answer that names the key it looked up.
_KEY_FIELD = "idempotency_key"


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

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_unknown, (self.method, self.url, self.what, self.status))


# Raised by request_json but not public (any exception leaves the effect unknown); the
# class keeps its name, which the ledger records as the error's type.
_HttpEffectUnknown = HttpEffectUnknown
del HttpEffectUnknown


def _rebuild_unknown(method: str, url: str, what: str, status: int | None) -> _HttpEffectUnknown:
    return _HttpEffectUnknown(method, url, what, status=status)


def _parse_retry_after(value: str | None, *, now: dt.datetime | None = None) -> float | None:
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
    pass it when calling from a plain ledger adapter. The header carries its wire form,
    ``Ledger.wire_key(key)``: put the same form in a body or a URL that names the key. ``client``
    lets the caller share a connection pool; otherwise a client lives for this call.
    Never follows redirects and never retries by itself:
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
    sent = dict(headers or {})
    if any(name.lower() == _IDEMPOTENCY_HEADER.lower() for name in sent):
        raise NoEffect(
            f"{method} {url}: not sent: the {_IDEMPOTENCY_HEADER} header is the ledger's key; "
            "pass idempotency_key= instead",
            retryable=False,
        )
    sent[_IDEMPOTENCY_HEADER] = wire_key(key)
    content: bytes | None = None
    if json is not None:
        # Serialised here so that a body JSON cannot carry fails before anything is sent.
        try:
            content = jsonlib.dumps(json, allow_nan=False).encode()
        except (TypeError, ValueError) as exc:
            raise NoEffect(f"{method} {url}: not sent: body is not JSON: {exc}") from exc
        sent.setdefault("Content-Type", "application/json")
    try:
        # A caller's client stays open for its next call; one made here lives for this one.
        shared = contextlib.nullcontext(client) if client is not None else None
        async with shared or httpx.AsyncClient(timeout=timeout, verify=_tls()) as used:
            response = await used.request(
                method, url, content=content, headers=sent, timeout=timeout, follow_redirects=False
            )
    except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
        raise NoEffect(
            f"{method} {url}: not sent: {type(exc).__name__}: {exc}", retryable=True
        ) from exc
    except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
        raise NoEffect(f"{method} {url}: not sent: {exc}", retryable=False) from exc
    except httpx.TimeoutException as exc:
        raise _HttpEffectUnknown(
            method, url, f"no answer within the timeout after sending ({type(exc).__name__})"
        ) from exc
    except httpx.HTTPError as exc:
        # Resets, protocol errors and anything unforeseen: the bytes may have arrived.
        raise _HttpEffectUnknown(method, url, f"{type(exc).__name__}: {exc}") from exc
    return _classify(method, url, response)


@functools.cache
def _tls() -> ssl.SSLContext:
    # Loading the CA bundle costs about a quarter second; a context is safe to share.
    return httpx.create_ssl_context()


def _classify(method: str, url: str, response: httpx.Response) -> HttpResult:
    status = response.status_code
    if 200 <= status < 300:
        return HttpResult(status=status, body=_body(response))
    if status == 409:
        return HttpResult(status=status, body=_body(response), already_done=True)
    said = f"{status} {response.reason_phrase}: {_excerpt(response)}"
    if 400 <= status < 500:
        # 429 says when to try again; a 408's server never received the whole request (RFC
        # 9110 15.5.9), so it cannot act; any other 4xx refused the request as it is.
        retry_after = response.headers.get("Retry-After") if status == 429 else None
        raise NoEffect(
            f"{method} {url}: {said}",
            retryable=status in (408, 429),
            retry_after=_parse_retry_after(retry_after),
        )
    if 300 <= status < 400:
        # A redirect after a write often means "done, look there", but not always.
        location = response.headers.get("Location", "no Location")
        raise _HttpEffectUnknown(
            method, url, f"redirected ({said}; {location}), not followed", status=status
        )
    raise _HttpEffectUnknown(method, url, f"answered {said}", status=status)


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
    looked_up: Callable[[HttpResult, str], bool] | None = None,
) -> Probe:
    """A probe for ``@tool(probe=...)`` that GETs the operation by its idempotency key.

    ``url`` is a template: ``{key}`` is the key's wire form (``Ledger.wire_key``, the form
    :func:`request_json` sends in its header), and ``{field}`` any field of the tool's
    argument. Put the key in the query, e.g. ``"{base_url}/orders?idempotency_key={key}"``.
    The GET carries the key as ``Idempotency-Key`` too.

    An answer counts only as evidence that the far side looked this key up: by default its
    JSON body has an ``idempotency_key`` field that is the key's wire form; ``looked_up``
    replaces that test with the tool's own parser of the answer. Then a 2xx is ``present``,
    with ``output(result)`` as the tool's output (the :class:`HttpResult` itself without
    ``output``), and a status in ``absent_statuses`` is ``absent``. Everything else is
    ``inconclusive`` and parks the step for a person: a router's 404 for a route it does
    not have, an HTML error page, a header that middleware copies onto every response, a
    timeout. Every answer is recorded as evidence.

    Args:
        url: The template of the URL to GET.
        output: Makes the tool's output of a 2xx answer.
        absent_statuses: The statuses that say the far side has no such operation.
        headers: More request headers.
        timeout: httpx's timeout per phase of the GET.
        looked_up: ``looked_up(result, wire_key)``: whether the answer shows that the far
            side looked this key up.

    Returns:
        The probe.
    """
    # By default the far side's JSON answer names the key (its wire form) it looked up. A
    # header proves nothing: middleware may copy ``Idempotency-Key`` onto every response,
    # a router's 404 for a route it does not have included.
    shows_lookup = looked_up or (
        lambda result, key: isinstance(result.body, dict) and result.body.get(_KEY_FIELD) == key
    )

    async def probe(key: str, arg: BaseModel) -> ProbeAnswer:
        fields = arg.model_dump() if isinstance(arg, BaseModel) else {}
        wire = wire_key(key)
        where = url.format(**{**fields, "key": wire})
        send = {**(headers or {}), _IDEMPOTENCY_HEADER: wire}
        try:
            async with httpx.AsyncClient(timeout=timeout, verify=_tls()) as client:
                response = await client.get(where, headers=send, follow_redirects=False)
        except httpx.HTTPError as exc:
            return ProbeAnswer.inconclusive(f"GET {where}: {type(exc).__name__}: {exc}")
        status = response.status_code
        seen = {"GET": where, "status": status, "body": _excerpt(response)}
        result = HttpResult(status=status, body=_body(response))
        answered = 200 <= status < 300 or status in absent_statuses
        if answered and not shows_lookup(result, wire):
            return ProbeAnswer.inconclusive(
                f"GET {where} answered {status}, but the answer does not show that the far "
                f"side looked up {wire!r} (a JSON body whose {_KEY_FIELD} is the key): a "
                "route that does not exist, an error page or a proxy answers so too",
                [seen],
            )
        if 200 <= status < 300:
            found = output(result) if output is not None else result
            return ProbeAnswer.present(found, [seen], basis=f"GET {where} found the operation")
        if status in absent_statuses:
            return ProbeAnswer.absent([seen], basis=f"GET {where} answered {status} for the key")
        return ProbeAnswer.inconclusive(f"GET {where} answered {status}", [seen])

    return probe
