"""The probe example's far side: an order service that files orders by Idempotency-Key.

    python -m examples.probe.far_side [--port 8080] [--lose-replies 1]

``POST /orders`` files an order under the request's ``Idempotency-Key`` exactly as sent
(the same key again returns the same order); the first ``--lose-replies`` POSTs file the
order and then drop the connection without answering, as a crash or a network fault would.
``GET /orders?idempotency_key=KEY`` answers the order (200) or 404; both name the key it
looked up in the ``idempotency_key`` field of their JSON body, so a 404 says "no such
order", not "no such route". Nothing is decoded: the ledger sends a key in one spelling
(``Ledger.wire_key``), the same in the header and in the query.
"""

from __future__ import annotations

import argparse
import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class OrderService(ThreadingHTTPServer):
    def __init__(self, port: int, *, lose_replies: int = 0, log: bool = False) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.orders: dict[str, dict[str, Any]] = {}
        self.lose_replies = lose_replies
        self.log = log
        self.lock = threading.Lock()


class _Handler(BaseHTTPRequestHandler):
    server: OrderService

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.log:
            super().log_message(format, *args)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        key = self.headers.get("Idempotency-Key", "")
        with self.server.lock:
            orders = self.server.orders
            order = orders.setdefault(key, {"order_id": f"O-{len(orders) + 1}", **body})
            lose = self.server.lose_replies > 0
            self.server.lose_replies -= lose
        if lose:
            self.close_connection = True  # filed, and the reply is lost
            return
        self._reply(201, {**order, "idempotency_key": key})

    def do_GET(self) -> None:
        path, _, query = self.path.partition("?")
        keys = urllib.parse.parse_qs(query).get("idempotency_key")
        if path != "/orders" or not keys:
            self._reply(404, {"error": "no such route"})
            return
        key = keys[0]
        with self.server.lock:
            order = self.server.orders.get(key)
        if order is None:
            self._reply(404, {"error": "no such order", "idempotency_key": key})
        else:
            self._reply(200, {**order, "idempotency_key": key})

    def _reply(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def main() -> None:
    parser = argparse.ArgumentParser(description="Run the probe example's order service.")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--lose-replies", type=int, default=0)
    args = parser.parse_args()
    service = OrderService(args.port, lose_replies=args.lose_replies, log=True)
    print(f"order service on http://127.0.0.1:{service.server_address[1]}", flush=True)
    service.serve_forever()


if __name__ == "__main__":
    main()
