"""Client-server round trips, counted on the wire.

A TCP proxy on 127.0.0.1 in front of a PostgreSQL server counts *turns*: each time a
client sends after the server has spoken (or sends first on a new connection). A
pipeline of statements sent together is one turn, however many statements it holds;
a statement whose answer the client waits for before sending the next costs one each.
That is a structural count, the same on a fast and a slow machine, unlike a timing.

Run it to see what one call costs::

    .venv/bin/python -m tests.pg_turns postgresql://postgres@127.0.0.1:5432/postgres
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit


class TurnCounter:
    """A proxy to the server at ``url``; connect to :attr:`url` to be counted."""

    def __init__(self, url: str) -> None:
        target = urlsplit(url)
        self._target = (target.hostname or "127.0.0.1", target.port or 5432)
        self.turns = 0
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pg-turns", daemon=True)
        self._thread.start()
        self._ready.wait(10)
        # Plain text and no GSS probe: connection setup stays short and the same
        # everywhere (the count that matters is taken on warm connections anyway).
        userinfo = f"{target.username}@" if target.username else ""
        if target.password:
            userinfo = f"{target.username}:{target.password}@"
        query = "&".join(q for q in (target.query, "sslmode=disable&gssencmode=disable") if q)
        self.url = urlunsplit(
            target._replace(netloc=f"{userinfo}127.0.0.1:{self._port}", query=query)
        )

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._relays: set[asyncio.Task[None]] = set()
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._accept, "127.0.0.1", 0)
        )
        self._port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        relay = self._loop.create_task(self._relay(client_r, client_w))
        self._relays.add(relay)
        relay.add_done_callback(self._relays.discard)

    async def _relay(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection(*self._target)
        except OSError:
            client_w.close()
            return
        # Who spoke last on this connection; a client send after the server is a turn.
        server_spoke = True

        async def pump(
            reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, up: bool
        ) -> None:
            nonlocal server_spoke
            try:
                while data := await reader.read(65536):
                    if up and server_spoke:
                        with self._lock:
                            self.turns += 1
                    server_spoke = not up
                    writer.write(data)
                    await writer.drain()
            except OSError:
                pass
            finally:
                writer.close()

        try:
            await asyncio.gather(
                pump(client_r, server_w, up=True), pump(server_r, client_w, up=False)
            )
        finally:
            client_w.close()
            server_w.close()

    @contextlib.contextmanager
    def counting(self) -> Iterator[list[int]]:
        """Yields a one-item list that holds, after the block, the turns taken in it."""
        with self._lock:
            start = self.turns
        taken = [0]
        try:
            yield taken
        finally:
            with self._lock:
                taken[0] = self.turns - start

    def close(self) -> None:
        async def stop() -> None:
            self._server.close()
            for relay in list(self._relays):
                relay.cancel()
            await asyncio.gather(*self._relays, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


async def measure(url: str, calls: int = 5) -> dict[str, float]:
    """Turns per fresh execute and per replay, on a warm pool, averaged over ``calls``."""
    from temporal_ledger.ledger import Ledger
    from temporal_ledger.ledger._postgres import PostgresRecorder
    from temporal_ledger.ledger._testing_child import AUTHORITY, request

    counter = TurnCounter(url)
    try:
        async with Ledger(PostgresRecorder(counter.url), url=counter.url) as ledger:

            def adapter(req: object, ctx: object) -> dict[str, bool]:
                return {"ok": True}

            async def execute(key: str) -> None:
                await ledger.execute(request(key), authority=AUTHORITY, adapter=adapter)

            await execute("warm-up")  # the schema, the pool and prepared statements
            await execute("warm-up")
            with counter.counting() as fresh:
                for i in range(calls):
                    await execute(f"turns-{i}")
            with counter.counting() as replay:
                for i in range(calls):
                    await execute(f"turns-{i}")
    finally:
        counter.close()
    return {"fresh": fresh[0] / calls, "replay": replay[0] / calls}


def main() -> None:
    import argparse
    import uuid

    import psycopg

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", help="an admin URL; a scratch database is created and dropped")
    parser.add_argument("--calls", type=int, default=5)
    args = parser.parse_args()
    name = f"ledger_turns_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(args.url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        url = urlunsplit(urlsplit(args.url)._replace(path="/" + name))
        result = asyncio.run(measure(url, args.calls))
    finally:
        with psycopg.connect(args.url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    print(f"turns per fresh execute: {result['fresh']:g}, per replay: {result['replay']:g}")


if __name__ == "__main__":
    main()
