"""The probe of the docs (``docs/approvals-and-probes.md``, moved there from the README)
against a real Starlette far side under uvicorn: a key that holds ``/`` reaches the
handler in the query, a lost reply is found by the probe and never placed again, and a
router's 404 never passes for an absence."""

from __future__ import annotations

import re
import threading
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest
from temporal_ledger.activities._probe import Finding
from temporal_ledger.activities.http import lookup_probe
from temporal_ledger.ledger import Ledger
from temporalio.worker import Worker

from examples.probe.activities import PlaceOrder, place_order
from examples.probe.workflows import OrderWorkflow
from tests.temporal_support import POLICY_TOML, ROOT, Setup
from tests.test_readme import APPROVALS_AND_PROBES, blocks
from worker import free_port

starlette = pytest.importorskip("starlette")
uvicorn = pytest.importorskip("uvicorn")
from starlette.applications import Starlette  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import JSONResponse  # noqa: E402
from starlette.routing import Route  # noqa: E402

pytestmark = pytest.mark.timeout(120)


def readme_probe_template() -> str:
    (snippet,) = [
        b for b in blocks("python", APPROVALS_AND_PROBES) if "@tool(" in b and "lookup_probe(" in b
    ]
    found = re.search(r'lookup_probe\(\s*"([^"]+)"', snippet)
    assert found is not None, snippet
    return found.group(1)


def readme_far_side(orders: dict[str, Any]) -> Any:
    """The docs' Starlette handler, run as it is shown."""
    (snippet,) = [
        b
        for b in blocks("python", APPROVALS_AND_PROBES)
        if b.startswith("# a far side a probe can trust")
    ]
    namespace: dict[str, Any] = {
        "Request": Request,
        "JSONResponse": JSONResponse,
        "quote": urllib.parse.quote,
        "orders": orders,
    }
    exec(snippet, namespace)
    return namespace["order_by_key"]


class OrderService:
    """Orders filed by ``Idempotency-Key``; the first ``lose`` POSTs file the order and
    answer 502, as a proxy whose upstream's reply was lost would."""

    def __init__(self, *, lose: int) -> None:
        self.orders: dict[str, dict[str, Any]] = {}
        self.posts = 0
        self.lose = lose

        async def place(request: Request) -> JSONResponse:
            key = urllib.parse.unquote(request.headers["Idempotency-Key"])
            body = await request.json()
            self.posts += 1
            order = self.orders.setdefault(key, {"order_id": f"O-{len(self.orders) + 1}", **body})
            if self.lose > 0:
                self.lose -= 1
                return JSONResponse({"error": "upstream reply lost"}, status_code=502)
            return JSONResponse(order, status_code=201)

        async def by_key_in_path(request: Request) -> JSONResponse:
            key = request.path_params["key"]
            if key not in self.orders:
                return JSONResponse({"error": "no such order"}, status_code=404)
            return JSONResponse(self.orders[key])

        self.app = Starlette(
            routes=[
                Route("/orders", place, methods=["POST"]),
                Route("/orders", readme_far_side(self.orders), methods=["GET"]),
                # How a path-style lookup is usually routed: one segment per key.
                Route("/orders/by-key/{key}", by_key_in_path, methods=["GET"]),
            ]
        )


@pytest.fixture
def service() -> Iterator[tuple[OrderService, str]]:
    orders = OrderService(lose=1)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(orders.app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        for _ in range(200):
            if server.started:
                break
            threading.Event().wait(0.05)
        assert server.started, "uvicorn did not start"
        yield orders, f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def test_the_example_tool_is_the_readmes_probe() -> None:
    template = readme_probe_template()
    assert template.index("?") < template.index("{key}")  # the key in the query
    example = (ROOT / "examples" / "probe" / "activities.py").read_text(encoding="utf-8")
    assert f'lookup_probe("{template}"' in example


async def test_a_lost_reply_is_found_by_the_readmes_probe_one_order_in_all(
    setup: Setup, service: tuple[OrderService, str]
) -> None:
    orders, url = service
    setup.policy.write_text(POLICY_TOML.replace('"tickets.*"]', '"tickets.*", "orders.*"]'))
    client = await setup.client()
    async with Worker(
        client,
        task_queue=setup.task_queue,
        workflows=[OrderWorkflow],
        activities=[place_order],
    ):
        order = await client.execute_workflow(
            OrderWorkflow.run,
            PlaceOrder(base_url=url, item="book"),
            id=f"probe-routes/{setup.task_queue}",  # slashes in the workflow id, in the key
            task_queue=setup.task_queue,
        )
    assert order.model_dump() == {"order_id": "O-1", "item": "book", "quantity": 1}
    assert orders.posts == 1 and len(orders.orders) == 1
    (key,) = orders.orders
    assert "/" in key
    with Ledger.open(setup.ledger_url) as ledger:
        state = ledger.state(key)
        assert [(r.verdict.value, r.actor) for r in state.reconciliations] == [
            ("effect_confirmed", "probe:place_order")
        ]
        assert ledger.verify().ok


async def test_a_routers_404_is_never_an_absence(service: tuple[OrderService, str]) -> None:
    orders, url = service
    key = "orders-wf/0197f2c4-run/order"
    orders.orders[key] = {"order_id": "O-9", "item": "pen", "quantity": 2}
    arg = PlaceOrder(base_url=url, item="pen", quantity=2)
    found = await lookup_probe(readme_probe_template())(key, arg)
    assert found.finding is Finding.PRESENT and found.output["body"]["order_id"] == "O-9"
    # The same order looked up by path: Starlette decodes %2F before routing, so no route
    # matches and the router answers 404. Without the key named, that is no absence.
    by_path = await lookup_probe("{base_url}/orders/by-key/{key}")(key, arg)
    assert by_path.evidence[0]["status"] == 404
    assert by_path.finding is Finding.INCONCLUSIVE and "without naming the key" in by_path.basis
    # An absent order, answered by the handler that names the key it looked up.
    missing = await lookup_probe(readme_probe_template())("orders-wf/other/order", arg)
    assert missing.finding is Finding.ABSENT
