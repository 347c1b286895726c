"""The HTTP tool helper against a real local far side, with and without Temporal (issue 5)."""

from __future__ import annotations

import contextlib
import datetime as dt
import email.utils
import json
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporal_ledger.activities.http import HttpResult, request_json
from temporal_ledger.activities.http import _HttpEffectUnknown as HttpEffectUnknown
from temporal_ledger.activities.http import _parse_retry_after as parse_retry_after
from temporal_ledger.ledger import Authority, Ledger, NoEffect
from temporal_ledger.ledger._models import EffectState
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from examples.tickets.activities import HTTP_TOOLS
from tests.http_workflows import PlainPostWorkflow, TicketCall, TicketWorkflow, plain_post
from tests.temporal_support import (
    Setup,
    key_on_the_wire,
    make_setup,
    open_effects,
    temporal_cli,
    wait_for,
)

pytestmark = pytest.mark.timeout(60)

POLICY = """
[performers]
"agent" = ["tickets.*"]

[reconcile]
actors = ["ops-*"]
"""

AUTHORITY = Authority("agent", ["tickets.*"])


# -- the far side ---------------------------------------------------------------------


@dataclass
class Reply:
    """One scripted answer. ``status=0`` drops the connection without answering."""

    status: int = 201
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    #: This request creates a ticket (the effect) before the answer is sent.
    commit: bool = True
    delay: float = 0.0


@dataclass
class Seen:
    at: float
    key: str | None
    path: str
    payload: Any


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        far = self.server.far
        length = int(self.headers.get("Content-Length", 0))
        payload = json.loads(self.rfile.read(length) or b"{}")
        key = self.headers.get("Idempotency-Key")
        with far.lock:
            far.requests.append(Seen(time.monotonic(), key, self.path, payload))
            if far.dedupe and key in far.tickets:
                reply, body = Reply(200, commit=False), far.tickets[key]
            else:
                reply = far.script.pop(0) if far.script else Reply()
                body = reply.body
                if reply.commit:
                    far.effects += 1
                    ticket = {"ticket_id": f"T-{far.effects}", "title": payload.get("title")}
                    far.tickets[key] = ticket
                    body = ticket if body is None else body
        if reply.delay:
            far.stopping.wait(reply.delay)
        if reply.status == 0:
            self.close_connection = True
            return
        data = json.dumps(body).encode() if body is not None else b""
        self.send_response(reply.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)


class _Server(ThreadingHTTPServer):
    far: FarSide

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that timed out and left is part of the tests, not noise


class FarSide:
    """A ticket service on 127.0.0.1 that counts effects (tickets created).

    Answers follow ``script``, then 201 with a new ticket. With ``dedupe`` a key it has
    seen gets its stored ticket back (200) and creates nothing.
    """

    def __init__(self, *script: Reply, dedupe: bool = False) -> None:
        self.script = list(script)
        self.dedupe = dedupe
        self.effects = 0
        self.tickets: dict[str | None, dict[str, Any]] = {}
        self.requests: list[Seen] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.far = self
        # A short poll interval: shutdown() waits for it, once per test.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> FarSide:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    @property
    def keys(self) -> list[str | None]:
        return [r.key for r in self.requests]


# -- without Temporal: the helper as a plain ledger adapter ---------------------------


def _request(key: str) -> dict[str, Any]:
    return {
        "key": key,
        "capability": "tickets.create",
        "instruction": "create_ticket",
        "payload": {"title": "t"},
        "performer": "agent",
    }


async def _execute(url: str, ledger_url: str, *, http_timeout: float = 5.0):
    key = f"k-{uuid.uuid4().hex[:8]}"

    async def adapter(request, ctx) -> HttpResult:
        return await request_json(
            "POST", url, json={"title": "t"}, timeout=http_timeout, idempotency_key=ctx.key
        )

    async with Ledger.open(ledger_url) as ledger:
        result = await ledger.execute(_request(key), authority=AUTHORITY, adapter=adapter)
        return key, result, ledger.state(key)


async def test_2xx_is_success_with_the_json_body_and_the_key_forwarded(sqlite_url: str) -> None:
    with FarSide() as far:
        key, result, _ = await _execute(far.url + "/tickets", sqlite_url)
    assert (result.status, result.effect) == ("succeeded", EffectState.OBSERVED)
    assert result.output == {
        "status": 201,
        "body": {"ticket_id": "T-1", "title": "t"},
        "already_done": False,
    }
    assert far.keys == [key]
    assert far.requests[0].payload == {"title": "t"}


async def test_connection_refused_is_no_effect_and_retryable(sqlite_url: str) -> None:
    # Bound and never listening: nobody can take this port while the test runs.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        _, result, state = await _execute(f"http://127.0.0.1:{port}/tickets", sqlite_url)
    assert (result.status, result.effect) == ("failed", EffectState.NONE)
    assert result.retryable and result.retry_after is None
    assert "ConnectError" in (result.error or "")
    assert state.next_operation.value == "start_action"


@pytest.mark.parametrize(
    ("reply", "http_timeout", "said"),
    [
        pytest.param(Reply(201, delay=3.0), 0.3, "no answer within the timeout", id="timeout"),
        pytest.param(Reply(503, {"error": "upstream"}), 5.0, "503 Service Unavailable", id="503"),
        pytest.param(Reply(502, commit=False), 5.0, "502 Bad Gateway", id="502"),
        pytest.param(Reply(0), 5.0, "RemoteProtocolError", id="dropped-after-commit"),
    ],
)
async def test_after_sending_the_effect_is_unknown(
    sqlite_url: str, reply: Reply, http_timeout: float, said: str
) -> None:
    with FarSide(reply) as far:
        key, result, state = await _execute(
            far.url + "/tickets", sqlite_url, http_timeout=http_timeout
        )
    assert (result.status, result.effect) == ("failed", EffectState.UNKNOWN)
    assert not result.retryable
    assert result.error is not None and result.error.startswith("HttpEffectUnknown: POST")
    assert said in result.error
    assert state.next_operation.value == "reconcile_effect"
    assert far.keys == [key]


async def test_retry_after_as_http_date(sqlite_url: str) -> None:
    when = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=5)
    date = email.utils.format_datetime(when, usegmt=True)
    with FarSide(Reply(429, {"error": "slow down"}, {"Retry-After": date}, commit=False)) as far:
        _, result, _ = await _execute(far.url + "/tickets", sqlite_url)
    assert (result.status, result.effect) == ("failed", EffectState.NONE)
    assert result.retryable
    # HTTP-dates have whole seconds, and a little time passed since the header was made.
    assert result.retry_after is not None and 3.0 <= result.retry_after <= 5.0
    assert far.effects == 0


def test_parse_retry_after_forms() -> None:
    now = dt.datetime(2025, 1, 1, 12, 0, 0, tzinfo=dt.UTC)
    assert parse_retry_after("7", now=now) == 7.0
    assert parse_retry_after("Wed, 01 Jan 2025 12:00:30 GMT", now=now) == 30.0
    assert parse_retry_after("Wed, 01 Jan 2025 11:00:00 GMT", now=now) == 0.0
    assert parse_retry_after("soon", now=now) is None
    assert parse_retry_after("-3", now=now) is None
    assert parse_retry_after(None) is None


@pytest.mark.parametrize(
    ("status", "retryable"), [(400, False), (422, False), (404, False), (408, True)]
)
async def test_4xx_is_no_effect_with_status_and_excerpt(status: int, retryable: bool) -> None:
    with FarSide(Reply(status, {"error": "title " + "x" * 500}, commit=False)) as far:
        with pytest.raises(NoEffect) as raised:
            await request_json("POST", far.url, json={}, idempotency_key="k")
    assert raised.value.retryable is retryable
    message = str(raised.value)
    assert f"POST {far.url}: {status} " in message
    assert '{"error": "title xxx' in message and len(message) < 300


async def test_409_is_already_done() -> None:
    with FarSide(Reply(409, {"ticket_id": "T-9"}, commit=False)) as far:
        result = await request_json("POST", far.url, json={}, idempotency_key="k")
    assert result == HttpResult(status=409, body={"ticket_id": "T-9"}, already_done=True)


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (httpx.ConnectTimeout("connect timed out"), NoEffect),
        (httpx.PoolTimeout("no free connection"), NoEffect),
        (httpx.ReadTimeout("read timed out"), HttpEffectUnknown),
        (httpx.WriteTimeout("write timed out"), HttpEffectUnknown),
        (httpx.ReadError("connection reset by peer"), HttpEffectUnknown),
        (httpx.RemoteProtocolError("server disconnected"), HttpEffectUnknown),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, Exception) else v.__name__,
)
async def test_transport_errors_are_classified(error: Exception, expected: type) -> None:
    def fail(request: httpx.Request) -> httpx.Response:
        raise error

    async with httpx.AsyncClient(transport=httpx.MockTransport(fail)) as client:
        with pytest.raises(expected) as raised:
            await request_json("POST", "http://far/x", idempotency_key="k", client=client)
    if expected is NoEffect:
        assert raised.value.retryable
    else:
        assert (raised.value.method, raised.value.url) == ("POST", "http://far/x")


async def test_the_header_carries_the_keys_one_wire_form_one_to_one() -> None:
    seen: list[str] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["Idempotency-Key"])
        return httpx.Response(200)

    keys = ["wf-1.step_2", "wf/run/step-1", "café 1", "caf~C3~A9~201", "caf%C3%A9%201"]
    async with httpx.AsyncClient(transport=httpx.MockTransport(record)) as client:
        for key in keys:
            await request_json("POST", "http://far/x", idempotency_key=key, client=client)
    assert seen == [
        "wf-1.step_2",
        "wf~2Frun~2Fstep-1",
        "caf~C3~A9~201",
        "caf~7EC3~7EA9~7E201",
        "caf~25C3~25A9~25201",
    ]
    assert seen == [Ledger.wire_key(key) for key in keys] and len(set(seen)) == len(keys)


async def test_a_body_json_cannot_carry_is_not_sent() -> None:
    with pytest.raises(NoEffect) as raised:
        await request_json("POST", "http://far/x", json={"x": float("nan")}, idempotency_key="k")
    assert not raised.value.retryable and "not sent" in str(raised.value)


# -- with Temporal: the seed harness and the decision table ---------------------------


@pytest.fixture
def setup(temporal_address: str, tmp_path: Path) -> Setup:
    setup = make_setup(temporal_address, tmp_path)
    setup.policy.write_text(POLICY)
    return setup


@contextlib.asynccontextmanager
async def running(setup: Setup) -> AsyncIterator[Client]:
    client = await setup.client()
    async with Worker(
        client,
        task_queue=setup.task_queue,
        workflows=[TicketWorkflow, PlainPostWorkflow],
        activities=[*HTTP_TOOLS.values(), plain_post],
    ):
        yield client


def ticket_call(tool: str, far: FarSide, title: str = "disk full") -> TicketCall:
    return TicketCall(tool=tool, arg={"base_url": far.url, "title": title})


def commit_then_503() -> Reply:
    return Reply(503, {"error": "upstream"}, commit=True)


# 5 (a) -------------------------------------------------------------------------------
async def test_plain_activity_retry_duplicates_the_effect(setup: Setup) -> None:
    with FarSide(commit_then_503()) as far:
        async with running(setup) as client:
            result = await client.execute_workflow(
                PlainPostWorkflow.run,
                far.url + "/tickets",
                id=f"plain-{uuid.uuid4().hex[:8]}",
                task_queue=setup.task_queue,
            )
    assert result["ticket_id"] == "T-2"
    assert far.effects == 2 and len(far.requests) == 2


# 5 (b) -------------------------------------------------------------------------------
async def test_retry_safe_tool_against_a_deduping_far_side_acts_once(setup: Setup) -> None:
    with FarSide(commit_then_503(), dedupe=True) as far:
        async with running(setup) as client:
            result = await client.execute_workflow(
                TicketWorkflow.run,
                ticket_call("create_ticket", far),
                id=f"dedupe-{uuid.uuid4().hex[:8]}",
                task_queue=setup.task_queue,
            )
    assert result == {"ticket_id": "T-1", "status": 200, "already_done": False}
    assert far.effects == 1
    wire = far.keys[0]
    assert wire is not None and far.keys == [wire, wire]
    with Ledger.open(setup.ledger_url) as ledger:
        key = key_on_the_wire(ledger, wire)
        state = ledger.state(key)
        assert (state.status, state.effect) == ("succeeded", EffectState.OBSERVED)
        # Retry-safe: each attempt acted first and recorded its outcome with its request
        # (no claim, no started marker): the unknown effect, then the success.
        events = ledger.events(key)
        assert "action.execution_started" not in {e.type for e in events}
        outcomes = [
            (e.payload["status"], e.payload["effect"])
            for e in events
            if e.type == "action.completed" and not e.payload.get("replayed")
        ]
        assert outcomes == [("failed", "unknown"), ("succeeded", "observed")]
        assert ledger.verify().ok


# 5 (c) -------------------------------------------------------------------------------
async def test_unguarded_tool_parks_and_the_operator_confirms_the_effect(setup: Setup) -> None:
    workflow_id = f"park-{uuid.uuid4().hex[:8]}"
    with FarSide(commit_then_503()) as far:
        async with running(setup) as client:
            handle = await client.start_workflow(
                TicketWorkflow.run,
                ticket_call("create_ticket_unguarded", far),
                id=workflow_id,
                task_queue=setup.task_queue,
            )
            parked = await wait_for(
                lambda: open_effects(setup.address, workflow_id), what="the parked step"
            )
            effect = parked[0]
            assert effect["tool"] == "create_ticket_unguarded"
            assert "HttpEffectUnknown" in effect["why"] and "503" in effect["why"]
            assert far.keys == [Ledger.wire_key(effect["key"])] and far.effects == 1
            ticket = far.tickets[Ledger.wire_key(effect["key"])]["ticket_id"]
            await temporal_cli(
                setup.address,
                "workflow",
                "signal",
                "--workflow-id",
                workflow_id,
                "--name",
                "reconcile",
                "--input",
                json.dumps(
                    {
                        "key": effect["key"],
                        "verdict": "effect_confirmed",
                        "actor": "ops-alice",
                        "basis": "found the ticket in the tracker",
                        "evidence": [ticket],
                        "output": {"ticket_id": ticket, "status": 201},
                    }
                ),
            )
            result = await handle.result()
    assert result == {"ticket_id": "T-1", "status": 201, "already_done": False}
    assert far.effects == 1 and len(far.requests) == 1
    with Ledger.open(setup.ledger_url) as ledger:
        state = ledger.state(effect["key"])
        assert state.effect is EffectState.OBSERVED
        assert state.reconciliations[0].actor == "ops-alice"


# 6: 429 ------------------------------------------------------------------------------
async def test_429_is_retried_after_retry_after_under_the_same_key(setup: Setup) -> None:
    slow_down = Reply(429, {"error": "slow down"}, {"Retry-After": "2"}, commit=False)
    with FarSide(slow_down) as far:
        async with running(setup) as client:
            result = await client.execute_workflow(
                TicketWorkflow.run,
                ticket_call("create_ticket", far),
                id=f"429-{uuid.uuid4().hex[:8]}",
                task_queue=setup.task_queue,
            )
    assert result == {"ticket_id": "T-1", "status": 201, "already_done": False}
    first, second = far.requests
    assert first.key is not None and first.key == second.key
    assert second.at - first.at >= 2.0
    assert far.effects == 1


# 6: 400 ------------------------------------------------------------------------------
async def test_400_fails_the_step_once_with_a_typed_error(setup: Setup) -> None:
    # Were the 400 retried, the next answer would be a 201 and the workflow would succeed.
    rejected = Reply(400, {"error": "title must not be empty"}, commit=False)
    with FarSide(rejected) as far:
        async with running(setup) as client:
            with pytest.raises(WorkflowFailureError) as failed:
                await client.execute_workflow(
                    TicketWorkflow.run,
                    ticket_call("create_ticket", far, title=""),
                    id=f"400-{uuid.uuid4().hex[:8]}",
                    task_queue=setup.task_queue,
                )
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "ToolFailed"
    assert cause.non_retryable
    assert "400 Bad Request" in cause.message and "title must not be empty" in cause.message
    assert len(far.requests) == 1 and far.effects == 0


# 6: 409 ------------------------------------------------------------------------------
async def test_409_is_recorded_as_done(setup: Setup) -> None:
    held = Reply(409, {"ticket_id": "T-77", "detail": "key already used"}, commit=False)
    with FarSide(held) as far:
        async with running(setup) as client:
            result = await client.execute_workflow(
                TicketWorkflow.run,
                ticket_call("create_ticket_unguarded", far),
                id=f"409-{uuid.uuid4().hex[:8]}",
                task_queue=setup.task_queue,
            )
    assert result == {"ticket_id": "T-77", "status": 409, "already_done": True}
    assert len(far.requests) == 1
    with Ledger.open(setup.ledger_url) as ledger:
        state = ledger.state(key_on_the_wire(ledger, far.keys[0]))
        assert (state.status, state.effect) == ("succeeded", EffectState.OBSERVED)
        assert state.output == {"ticket_id": "T-77", "status": 409, "already_done": True}
