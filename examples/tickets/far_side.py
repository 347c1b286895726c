"""The tickets example's far side: a ticket service that dedupes by Idempotency-Key.

    python -m examples.tickets.far_side [--port 8080] [--lose-replies 1]

``POST /tickets`` files a ticket under the request's ``Idempotency-Key`` exactly as the
header carries it, never decoded (the ledger sends each key in one spelling,
``Ledger.wire_key``): a new key answers 201 with the new ticket, the same key again answers 200
with the ticket it filed the first time, and files nothing. The first ``--lose-replies``
POSTs file the ticket and then drop the connection without answering, as a crash or a
network fault would: ``create_ticket`` (``retry_safe``) then tries again under the same
key and gets the ticket that exists. ``GET /tickets`` lists every ticket with its key.
"""

from __future__ import annotations

import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class TicketService(ThreadingHTTPServer):
    def __init__(self, port: int, *, lose_replies: int = 0, log: bool = False) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        #: Tickets by Idempotency-Key, as received.
        self.tickets: dict[str, dict[str, Any]] = {}
        self.lose_replies = lose_replies
        self.log = log
        self.lock = threading.Lock()


class _Handler(BaseHTTPRequestHandler):
    server: TicketService

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.log:
            super().log_message(format, *args)

    def do_POST(self) -> None:
        if self.path != "/tickets":
            self._reply(404, {"error": "no such route"})
            return
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        key = self.headers.get("Idempotency-Key")
        if not key:
            self._reply(400, {"error": "an Idempotency-Key header is required"})
            return
        with self.server.lock:
            tickets = self.server.tickets
            filed = key in tickets
            if not filed:
                tickets[key] = {"ticket_id": f"T-{len(tickets) + 1}", **body}
            ticket = tickets[key]
            lose = self.server.lose_replies > 0 and not filed
            self.server.lose_replies -= lose
        if lose:
            self.close_connection = True  # filed, and the reply is lost
            return
        self._reply(200 if filed else 201, {**ticket, "idempotency_key": key})

    def do_GET(self) -> None:
        if self.path != "/tickets":
            self._reply(404, {"error": "no such route"})
            return
        with self.server.lock:
            listed = [{**t, "idempotency_key": k} for k, t in self.server.tickets.items()]
        self._reply(200, listed)

    def _reply(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def main() -> None:
    parser = argparse.ArgumentParser(description="Run the tickets example's ticket service.")
    parser.add_argument("--port", type=int, default=8080, help="0: any free port")
    parser.add_argument("--lose-replies", type=int, default=0)
    args = parser.parse_args()
    service = TicketService(args.port, lose_replies=args.lose_replies, log=True)
    print(f"ticket service on http://127.0.0.1:{service.server_address[1]}", flush=True)
    service.serve_forever()


if __name__ == "__main__":
    main()
