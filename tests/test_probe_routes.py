"""The key on the wire and the probe's evidence, against the docs' FastAPI far side.

The far side of ``docs/approvals-and-probes.md`` is written, as it is shown, into a folder
outside the repository and run under uvicorn in a process of its own, behind a common
middleware that copies ``Idempotency-Key`` onto every response. Workflow ids hold what
users type (a space, ``/``, ``#&=+?``, ``%``, non-ASCII letters, an emoji): a lost reply
is found by the probe (one order), a true absence is acted on once, and where the answer
is no evidence (a router's 404 that carries the echoed header) the run parks instead of
ordering again.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from temporal_ledger.activities._probe import Finding
from temporal_ledger.activities.http import lookup_probe
from temporal_ledger.ledger import Ledger
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from examples.probe.activities import Order, PlaceOrder, place_order
from examples.probe.workflows import OrderWorkflow
from tests.temporal_support import POLICY_TOML, ROOT, Setup, open_effects, wait_for
from tests.test_readme import APPROVALS_AND_PROBES, blocks
from worker import free_port

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

pytestmark = pytest.mark.timeout(180)

#: What users type into workflow ids: each becomes part of a key.
WORKFLOW_IDS = [
    "order ann smith",
    "shop/eu/order-7",
    "q#&=+?x",
    "100% sure",
    "Zoë Ærøskøbing",
    "launch 🚀",
]

#: The far side's faults, chosen per request by the first segment of its path (the
#: tool's ``base_url``), so that concurrent runs each meet their own.
FAULTS = '''
"""The docs' far side, behind the faults a test needs and a middleware that echoes the
Idempotency-Key header on every response (a common pattern, and no evidence of anything)."""

import json

from far_side import app, orders

_posted: set[bytes] = set()


def _echo(send, key):
    async def echoing(message):
        if message["type"] == "http.response.start" and key is not None:
            message = {**message, "headers": [*message["headers"], (b"idempotency-key", key)]}
        await send(message)

    return echoing


async def _answer(send, status, body):
    data = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


class Faults:
    """/<mode>/orders...: ``lose-after`` files the first POST of a key and answers 502 (its
    reply lost behind a proxy); ``lose-before`` answers the first POST 502 without filing
    it; ``gone`` does what ``lose-after`` does, and routes its lookups nowhere (the router
    answers 404); ``plain`` passes everything."""

    def __init__(self, inner):
        self.inner = inner

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.inner(scope, receive, send)
        mode, _, rest = scope["path"].lstrip("/").partition("/")
        path = "/" + rest
        key = dict(scope["headers"]).get(b"idempotency-key")
        send = _echo(send, key)
        if scope["method"] == "GET" and mode == "gone":
            path = "/no-such-route"
        scope = {**scope, "path": path, "raw_path": path.encode()}
        first = scope["method"] == "POST" and key not in _posted
        if first:
            _posted.add(key)
        if first and mode == "lose-before":
            return await _answer(send, 502, {"error": "bad gateway"})
        if first and mode in ("lose-after", "gone"):
            async def lost(message):
                pass

            await self.inner(scope, receive, lost)
            return await _answer(send, 502, {"error": "upstream reply lost"})
        return await self.inner(scope, receive, send)


@app.get("/test/orders")
async def every_order() -> dict:
    return orders


service = Faults(app)
'''


def docs_far_side() -> str:
    (snippet,) = [
        b
        for b in blocks("python", APPROVALS_AND_PROBES)
        if b.startswith("# a far side a probe can trust")
    ]
    return snippet


def readme_probe_template() -> str:
    (snippet,) = [
        b for b in blocks("python", APPROVALS_AND_PROBES) if "@tool(" in b and "lookup_probe(" in b
    ]
    found = re.search(r'lookup_probe\(\s*"([^"]+)"', snippet)
    assert found is not None, snippet
    return found.group(1)


class FarSide:
    def __init__(self, url: str) -> None:
        self.url = url

    def orders(self) -> dict[str, dict[str, Any]]:
        with urllib.request.urlopen(f"{self.url}/plain/test/orders", timeout=10) as answer:
            return json.loads(answer.read())


@pytest.fixture
def far_side(tmp_path: Path) -> Iterator[FarSide]:
    """The docs' FastAPI app under uvicorn, in a process and a folder of its own."""
    folder = tmp_path / "far-side"
    folder.mkdir()
    assert not folder.resolve().is_relative_to(ROOT)
    (folder / "far_side.py").write_text(docs_far_side(), encoding="utf-8")
    (folder / "faults.py").write_text(textwrap.dedent(FAULTS), encoding="utf-8")
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "faults:service", "--port", str(port),
         "--host", "127.0.0.1", "--log-level", "warning"],
        cwd=folder,
    )  # fmt: skip
    try:
        side = FarSide(f"http://127.0.0.1:{port}")
        for _ in range(200):
            try:
                side.orders()
                break
            except OSError:
                assert process.poll() is None, "the far side exited"
                time.sleep(0.05)
        yield side
    finally:
        process.terminate()
        process.wait(10)


def test_the_example_tool_is_the_docs_probe() -> None:
    template = readme_probe_template()
    assert template.index("?") < template.index("{key}")  # the key in the query
    example = (ROOT / "examples" / "probe" / "activities.py").read_text(encoding="utf-8")
    assert f'lookup_probe("{template}"' in example


@pytest.mark.parametrize(
    ("key", "wire"),
    [
        ("plain-key_1.2", "plain-key_1.2"),
        ("order ann smith/r1/order", "order~20ann~20smith~2Fr1~2Forder"),
        ("q#&=+?%~x", "q~23~26~3D~2B~3F~25~7Ex"),
        ("Zoë 🚀", "Zo~C3~AB~20~F0~9F~9A~80"),
    ],
)
def test_a_key_has_one_wire_form_that_nothing_on_the_way_decodes(key: str, wire: str) -> None:
    assert Ledger.wire_key(key) == wire
    assert urllib.parse.unquote_plus(wire) == wire  # a router's decoding leaves it as it is
    assert re.fullmatch(r"[A-Za-z0-9._~-]+", wire)


async def run_orders(
    setup: Setup, client: Client, far: FarSide, runs: dict[str, str]
) -> dict[str, WorkflowHandle[Any, Order]]:
    """Start one order per workflow id, with the far side's fault of ``runs[id]``."""
    handles = {}
    for workflow_id, mode in runs.items():
        handles[workflow_id] = await client.start_workflow(
            OrderWorkflow.run,
            PlaceOrder(base_url=f"{far.url}/{mode}", item=f"book for {workflow_id}"),
            id=workflow_id,
            task_queue=setup.task_queue,
        )
    return handles


async def test_keys_of_any_workflow_id_reach_the_far_side_in_one_spelling(
    setup: Setup, far_side: FarSide
) -> None:
    """A lost reply is found by the probe, one order each; a true absence acts once; a
    router's 404 that carries the echoed header parks the run and orders nothing again."""
    setup.policy.write_text(POLICY_TOML.replace('"tickets.*"]', '"tickets.*", "orders.*"]'))
    suffix = setup.task_queue[-6:]
    lost = {f"{wid} {suffix}": "lose-after" for wid in WORKFLOW_IDS}
    absent = {f"never sent ann/🚀#?% {suffix}": "lose-before"}
    gone = {f"gone ann/Zoë#&=+? {suffix}": "gone"}
    client = await setup.client()
    async with Worker(
        client, task_queue=setup.task_queue, workflows=[OrderWorkflow], activities=[place_order]
    ):
        handles = await run_orders(setup, client, far_side, {**lost, **absent, **gone})
        done = {wid: await handles[wid].result() for wid in [*lost, *absent]}
        (parked_id,) = gone
        [parked] = await wait_for(
            lambda: open_effects(setup.address, parked_id), what="the run to park"
        )
        await handles[parked_id].terminate("the test saw it park")
    orders = far_side.orders()
    keys = {
        wid: Ledger.step_key(wid, h.first_execution_run_id or "", "order")
        for wid, h in handles.items()
    }
    with Ledger.open(setup.ledger_url) as ledger:
        assert ledger.verify().ok
        verdicts = {
            wid: [(r.verdict, r.actor) for r in ledger.state(key).reconciliations]
            for wid, key in keys.items()
        }
    # One order per run, filed under the key's one spelling, which the lookup found.
    assert sorted(orders) == sorted(Ledger.wire_key(keys[wid]) for wid in [*lost, *absent, *gone])
    for wid in lost:
        assert done[wid].item == f"book for {wid}"
        assert verdicts[wid] == [("effect_confirmed", "probe:place_order")], wid
    (absent_id,) = absent
    assert verdicts[absent_id] == [("no_effect_confirmed", "probe:place_order")]
    assert done[absent_id].order_id == orders[Ledger.wire_key(keys[absent_id])]["order_id"]
    # The lookup met no route; the echoed header was no evidence: parked, one order.
    assert verdicts[parked_id] == [("still_unknown", "probe:place_order")]
    assert parked["key"] == keys[parked_id]


async def test_an_answer_is_evidence_only_when_its_body_names_the_key(
    far_side: FarSide,
) -> None:
    key = "orders wf/0197f2c4-run/order"
    arg = PlaceOrder(base_url=f"{far_side.url}/plain", item="pen", quantity=2)
    missing = await lookup_probe(readme_probe_template())(key, arg)
    assert missing.finding is Finding.ABSENT
    assert missing.evidence[0]["GET"].endswith(f"idempotency_key={Ledger.wire_key(key)}")
    # The same lookup where no route is: the 404 carries the echoed header, and is no
    # absence. Neither is a route that answers HTML.
    routed_nowhere = PlaceOrder(base_url=f"{far_side.url}/gone", item="pen", quantity=2)
    nowhere = await lookup_probe(readme_probe_template())(key, routed_nowhere)
    assert nowhere.evidence[0]["status"] == 404
    assert nowhere.finding is Finding.INCONCLUSIVE and "does not show" in nowhere.basis
    html = await lookup_probe("{base_url}/docs?idempotency_key={key}")(key, arg)
    assert html.evidence[0]["status"] == 200 and html.finding is Finding.INCONCLUSIVE
    # The tool's own parser decides instead, where the far side answers otherwise.
    trusting = lookup_probe(
        "{base_url}/orders?idempotency_key={key}", looked_up=lambda result, wire: True
    )
    assert (await trusting(key, routed_nowhere)).finding is Finding.ABSENT
