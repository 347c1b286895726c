"""An MCP client transport whose ``tools/call`` requests carry the ledger's ``_meta``.

For frameworks whose MCP call takes no caller's ``_meta`` but whose user hands them the
transport: temporalio-strands-agents' ``{server}-call-tool`` activity calls the session's
``call_tool(name, arguments)`` itself, past Strands' ``MCPClient.call_tool_async`` (where
Strands merges ``meta``), so the one place left to add the key is the stream the session
writes its requests to. The MCP SDK's transports (``stdio_client``,
``streamablehttp_client``, ...) are async context managers giving
``(read_stream, write_stream, ...)``; the session sends each request with
``write_stream.send`` in the task that made the call, which is the ledgered activity's,
so the call's fields (``_mcp.current``) are in its context there. Needs the MCP SDK
1.x (``SessionMessage`` holding a ``JSONRPCMessage``), which temporalio-strands-agents
requires; imported only by the integration that uses it.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from anyio.abc import ObjectSendStream

from ._mcp import current, merged

#: The MCP method of a tool call.
_CALL_TOOL = "tools/call"

Transport = Callable[[], AbstractAsyncContextManager[Any]]


def keyed_transport(transport: Transport) -> Transport:
    """``transport`` with each ``tools/call`` request sent inside a ledgered call given
    the call's ``_meta`` fields (the caller's own fields kept, the ledger's winning)."""

    @contextlib.asynccontextmanager
    async def opened() -> AsyncIterator[Any]:
        async with transport() as streams:
            read_stream, write_stream, *rest = streams
            yield (read_stream, _KeyedSendStream(write_stream), *rest)

    return opened


class _KeyedSendStream(ObjectSendStream[Any]):
    """A session's write stream that stamps the ledgered call's ``_meta`` on its tool
    calls; everything else passes as it is."""

    def __init__(self, inner: ObjectSendStream[Any]) -> None:
        self._inner = inner

    async def send(self, item: Any) -> None:
        ours = current.get()
        await self._inner.send(_stamped(item, ours) if ours is not None else item)

    async def aclose(self) -> None:
        await self._inner.aclose()

    @property
    def extra_attributes(self) -> Any:
        return self._inner.extra_attributes


def _stamped(item: Any, ours: dict[str, str]) -> Any:
    """A ``SessionMessage`` holding a ``tools/call`` request with the ledger's fields in
    its ``params._meta``; any other message unchanged."""
    if not dataclasses.is_dataclass(item) or isinstance(item, type):
        return item
    message: Any = getattr(item, "message", None)
    request: Any = getattr(message, "root", None)
    if getattr(request, "method", None) != _CALL_TOOL:
        return item
    params = dict(request.params or {})
    params["_meta"] = merged(params.get("_meta"), ours)
    stamped = message.model_copy(update={"root": request.model_copy(update={"params": params})})
    return dataclasses.replace(item, message=stamped)
