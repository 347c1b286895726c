"""The operator's path in the Temporal Web UI, in headless Chromium against the dev
server's own UI: find the waiting runs by query, read in a run's current details what
waits and the input that answers it, answer with the UI's update dialog.

``python scripts/ui_screenshots.py`` runs these tests keeping a screenshot of each step
in docs/ui/ (the Operating it page, docs/operating.md, shows them).
"""

from __future__ import annotations

import html
import json
import os
import re
import shlex
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from markdown_it import MarkdownIt
from temporal_ledger.ledger import Ledger
from temporal_ledger.ledger._models import Decision
from temporal_ledger.workflows._render import (
    COMMAND_WIDTH,
    OpenEffect,
    PendingApproval,
    Where,
    approve_command,
    details,
    reconcile_command,
)
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.worker import Worker

from examples.approval.activities import Refund, refund
from examples.approval.workflows import RefundWorkflow
from examples.plan.activities import post_message
from tests.temporal_support import (
    Setup,
    lines,
    make_setup,
    open_effects,
    query_json,
    start_dev_server,
    wait_for,
)
from tests.temporal_tools import NotifyWorkflow
from tests.ui_support import (
    SHOTS,
    OperatorUI,
    chromium,
    require_chromium,
    wait_until_served,
)
from worker import free_port

pytestmark = pytest.mark.timeout(180)

POLICY = """
[performers]
"agent" = ["messages.*"]
"support-agent" = ["payments.*"]

[reconcile]
actors = ["ops-*"]

[approve]
actors = ["lead-*"]
"""


@pytest.fixture(scope="module")
async def ui_server() -> AsyncIterator[tuple[str, str]]:
    """A dev server of its own with its Web UI: its gRPC address and the UI's URL."""
    require_chromium()
    port = free_port()
    env = await start_dev_server(ui_port=port)
    try:
        url = f"http://127.0.0.1:{port}"
        await wait_until_served(url)
        yield env.client.service_client.config.target_host, url
    finally:
        await env.shutdown()


@pytest.fixture(scope="module")
async def browser(
    ui_server: tuple[str, str], tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Any]:
    async with chromium(tmp_path_factory.mktemp("chromium-profile")) as context:
        yield context


@dataclass
class World:
    setup: Setup
    client: Client
    ui: OperatorUI
    started: list[WorkflowHandle[Any, Any]] = field(default_factory=list)

    async def start(self, run: Any, arg: Any, prefix: str) -> WorkflowHandle[Any, Any]:
        handle = await self.client.start_workflow(
            run, arg, id=f"{prefix}-{uuid.uuid4().hex[:6]}", task_queue=self.setup.task_queue
        )
        self.started.append(handle)
        return handle


@pytest.fixture
async def world(ui_server: tuple[str, str], browser: Any, tmp_path: Path) -> AsyncIterator[World]:
    """This test's task queue, ledger and policy, a worker in this process, a new page."""
    address, url = ui_server
    setup = make_setup(address, tmp_path)
    setup.policy.write_text(POLICY)
    client = await setup.client()
    shots = Path(os.environ[SHOTS]) if os.environ.get(SHOTS) else None
    page = await browser.new_page()
    world = World(setup, client, OperatorUI(page, url, shots))
    try:
        async with Worker(
            client,
            task_queue=setup.task_queue,
            workflows=[NotifyWorkflow, RefundWorkflow],
            activities=[post_message, refund],
        ):
            yield world
            # A run left waiting would be listed in the next test's screenshots.
            for handle in world.started:
                if (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
                    await handle.terminate("the test is over")
    finally:
        await page.close()


def shell_words(command: str) -> list[Any]:
    """A command's words as a shell splits them, its JSON ``--input`` parsed."""
    words: list[Any] = shlex.split(command.replace("\\\n", " "))
    if "--input" in words:
        at = words.index("--input") + 1
        words[at] = json.loads(words[at])
    return words


async def test_a_parked_run_is_found_and_reconciled_in_the_ui_and_completes_with_one_effect(
    world: World,
) -> None:
    setup, ui = world.setup, world.ui
    outbox = setup.folder / "outbox"
    handle = await world.start(NotifyWorkflow.run, str(outbox), "notify")
    parked = (await wait_for(lambda: open_effects(setup.address, handle.id), what="park"))[0]

    await ui.list_runs("LedgerOpenEffects > 0", until_listed=handle.id)
    assert handle.id in await ui.listed()
    await ui.shot("list")

    # The current details name the key and hold the update's input and the command.
    await ui.open_run(handle.id)
    details = await ui.current_details()
    assert "1 step parked" in details.text and parked["key"] in details.text
    (template,) = [block for block in details.json_blocks if "verdict" in block]
    assert template == {
        "key": parked["key"],
        "action_id": parked["action_id"],
        "verdict": "effect_confirmed",
        "actor": "YOUR-NAME",
        "basis": "WHAT-YOU-SAW",
        "evidence": [],
        "output": {"message_id": "<string>"},
    }
    (command,) = details.shell_blocks
    assert shell_words(command) == shell_words(parked["update_command"])
    assert shell_words(command)[-1] == template
    await ui.show_in_details('"verdict"')
    await ui.shot("parked")

    # The operator looks at the world: the message is in the outbox.
    (posted,) = lines(outbox / "ops.log")
    message_id = posted.split("\t")[0]
    verdict = template | {
        "actor": "ops-ann",
        "basis": "the message is in the ops outbox",
        "output": {"message_id": message_id},
    }
    await ui.fill_update("reconcile", verdict)
    await ui.shot("reconcile")
    assert await ui.submit_update() is None

    await ui.wait_for_status("COMPLETED")
    assert message_id in await ui.result()
    await ui.shot("reconciled")
    assert await handle.result() == message_id
    assert lines(outbox / "ops.log") == [posted]  # one effect
    with Ledger.open(setup.ledger_url) as ledger:
        (recorded,) = ledger.state(parked["key"]).reconciliations
        assert (recorded.verdict, recorded.actor) == ("effect_confirmed", "ops-ann")


async def test_a_call_is_approved_in_the_ui_and_acts_once(world: World) -> None:
    setup, ui = world.setup, world.ui
    book = setup.folder / "refunds.log"
    request = Refund(order="A-1", amount_cents=2000, book=str(book))
    handle = await world.start(RefundWorkflow.run, request, "refund")

    async def pending_approval() -> Any:
        return await query_json(setup.address, handle.id, "pending_approvals")

    (pending,) = await wait_for(pending_approval, what="the approval")
    await ui.list_runs("LedgerAwaitingApproval > 0", until_listed=handle.id)
    await ui.shot("approvals")

    await ui.open_run(handle.id)
    details = await ui.current_details()
    assert "1 call awaiting approval" in details.text
    assert pending["key"] in details.text and pending["fingerprint"] in details.text
    assert request.model_dump() in details.json_blocks  # the arguments, as the tool gets them
    (template,) = [block for block in details.json_blocks if "decision" in block]
    assert template == {
        "key": pending["key"],
        "fingerprint": pending["fingerprint"],
        "decision": "approve",
        "actor": "YOUR-NAME",
        "basis": "WHY",
    }
    (command,) = details.shell_blocks
    assert shell_words(command) == shell_words(pending["approve_command"])
    await ui.show_in_details('"decision"')
    await ui.shot("approval")
    assert not book.exists()

    decision = template | {"actor": "lead-ann", "basis": "order A-1 came back; 20.00 is right"}
    await ui.fill_update("approve", decision)
    await ui.shot("approve")
    assert await ui.submit_update() is None

    await ui.wait_for_status("COMPLETED")
    result = await handle.result()
    assert result.refund_id in await ui.result()
    await ui.shot("approved")
    assert len(lines(book)) == 1  # one effect
    with Ledger.open(setup.ledger_url) as ledger:
        approval = ledger.state(pending["key"]).approval
        assert approval is not None and approval.actor == "lead-ann"


async def test_an_incomplete_verdict_is_refused_in_the_dialog_and_the_run_keeps_waiting(
    world: World,
) -> None:
    setup, ui = world.setup, world.ui
    handle = await world.start(NotifyWorkflow.run, str(setup.folder / "outbox"), "notify")
    parked = (await wait_for(lambda: open_effects(setup.address, handle.id), what="park"))[0]
    key = parked["key"]
    with Ledger.open(setup.ledger_url) as ledger:
        before = ledger.events(key)

    await ui.open_run_page(handle.id)
    (template,) = [b for b in (await ui.current_details()).json_blocks if "verdict" in b]
    signed = {"actor": "ops-ann", "basis": "looked in the outbox"}
    without_output = {name: value for name, value in template.items() if name != "output"}
    for verdict, reason, shot in (
        (without_output | signed, "message_id: missing (string)", "refused"),
        (template | signed, "message_id: still the template's placeholder '<string>'", None),
        # Pasted unchanged: the template's placeholders are nobody's decision.
        (template, "actor still holds the template's placeholder 'YOUR-NAME'", None),
        (
            template | {"actor": "guest-bo", "basis": "looked", "output": {"message_id": "m"}},
            "actor 'guest-bo' may not reconcile",
            None,
        ),
    ):
        await ui.fill_update("reconcile", verdict)
        refusal = await ui.submit_update()
        assert refusal is not None and reason in refusal, refusal
        if shot:
            # The picture shows the reason, and not the stack trace under it (the
            # worker's traceback, with the paths of its files).
            clip = await ui.shot(shot)
            traces = await ui.stack_traces()
            assert all(box["y"] >= clip["height"] for box in traces), traces
            reason_box = await ui.page.locator("dialog[open] [role=alert] p").first.bounding_box()
            assert reason_box is not None
            assert reason_box["y"] + reason_box["height"] <= clip["height"], (reason_box, clip)
        await ui.close_update()

    # Nothing changed: the run waits, listed, for the same key; the ledger is as it was.
    assert [effect["key"] for effect in await open_effects(setup.address, handle.id)] == [key]
    await ui.wait_for_status("RUNNING")
    with Ledger.open(setup.ledger_url) as ledger:
        assert ledger.events(key) == before


def rendered(markdown: str) -> tuple[str, list[str], dict[str, list[str]]]:
    """CommonMark's HTML of ``markdown``, its code spans' texts, its code blocks' texts by
    language."""
    page = MarkdownIt("commonmark").render(markdown)
    spans = [html.unescape(t) for t in re.findall(r"(?<!>)<code>(.*?)</code>", page, re.S)]
    blocks: dict[str, list[str]] = {}
    for language, text in re.findall(
        r'<pre><code class="language-(\w+)">(.*?)\n?</code></pre>', page, re.S
    ):
        blocks.setdefault(language, []).append(html.unescape(text))
    return page, spans, blocks


def test_the_details_quote_names_and_reasons_as_they_are_and_send_the_querys_commands() -> None:
    where = Where("127.0.0.1:7233", "default", "a-rather-long-workflow-id-for-one-line-0123456789")
    step, tool = "notify `ops`", "post_message"
    key = f"{where.workflow_id}/01a23d3f-881b-7089-838d-da95de202b3f/{step}"
    command = reconcile_command("update execute", where, key, "0" * 32, {"message_id": "<s>"})
    parked = OpenEffect(
        key=key, step=step, tool=tool, capability="messages.post", action_id="0" * 32,
        since="2026-01-02T03:04:05.678+00:00", why="lost <b>*the*</b> [reply](x) & `more`",
        signal_command=reconcile_command("signal", where, key, "0" * 32, None),
        update_command=command,
    )  # fmt: skip
    arguments = {"amount": 20, "note": "```"}
    approve = approve_command(where, key, "f" * 64, Decision.APPROVE)
    waiting = PendingApproval(
        key=key, step=step, tool="refund", capability="payments.refund", performer="agent",
        arguments=arguments, fingerprint="f" * 64, since="2026-01-02T03:04:05+00:00",
        approve_command=approve,
        reject_command=approve_command(where, key, "f" * 64, Decision.REJECT),
    )  # fmt: skip

    page, spans, blocks = rendered(details([waiting], [parked]))
    assert step in spans and key in spans and "f" * 64 in spans  # whole, backticks and all
    assert "lost &lt;b&gt;*the*&lt;/b&gt; [reply](x) &amp; `more`" in page  # as written
    assert "<b>" not in page and "<a " not in page and "<em>" not in page
    assert "since 2026-01-02 03:04:05 UTC" in page
    assert arguments in [json.loads(block) for block in blocks["json"]]
    inputs = [json.loads(block) for block in blocks["json"] if "actor" in block]
    assert inputs == [shell_words(approve)[-1], shell_words(command)[-1]]
    assert [shell_words(block) for block in blocks["sh"]] == [
        shell_words(approve),
        shell_words(command),
    ]
    for block in blocks["sh"]:  # short lines, but for one option with a long value each
        for line in block.split("'{")[0].splitlines():
            alone = len(shlex.split(line.removesuffix(" \\"))) <= 2
            assert len(line) <= COMMAND_WIDTH or alone, line


def test_where_a_signature_is_required_the_details_show_the_command_that_signs() -> None:
    where = Where("127.0.0.1:7233", "default", "refund-1")
    key, fingerprint = "refund-1/run/refund", "f" * 64
    command = approve_command(where, key, fingerprint, Decision.APPROVE, signed=True)
    waiting = PendingApproval(
        key=key, step="refund", tool="refund", capability="payments.refund",
        performer="agent", arguments={"amount": 20}, fingerprint=fingerprint,
        since="2026-01-02T03:04:05+00:00", signature_required=True, approve_command=command,
        reject_command=approve_command(where, key, fingerprint, Decision.REJECT, signed=True),
    )  # fmt: skip
    page, _, blocks = rendered(details([waiting], []))
    assert [json.loads(block) for block in blocks["json"]] == [{"amount": 20}]  # no input
    (shell,) = blocks["sh"]
    assert shell_words(shell) == shell_words(command)
    assert shell_words(shell)[:3] == ["temporal-ledger", "sign", "approve"]
    assert "without <code>--send</code> it prints the update's input" in page
