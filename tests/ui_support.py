"""The Temporal Web UI as an operator uses it, in headless Chromium from the system's
packages, driven by Playwright for Python (never a browser Playwright downloads).

``bash scripts/test`` installs Debian's ``chromium`` when it is missing. Without it the UI
tests skip, saying how to install it; in CI (``CI`` set) they fail instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import time
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
#: The flags this machine needs: without the background-networking ones Chromium dials
#: out at start, and the closed network refuses it.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: Narrower than the UI's two-column breakpoint (1024 px): the current details then take
#: the page's width, and the screenshots stay small.
VIEWPORT = {"width": 1016, "height": 800}
#: Set to a folder to keep a screenshot of each step there (scripts/ui_screenshots.py).
SHOTS = "LEDGER_UI_SHOTS"
#: The box the UI shows a failure's stack trace in (under an update's refusal, say).
STACK_TRACE = '[role=alert] div.relative:has([aria-label="Stack Trace"])'
#: How long the UI may take to show what the cluster already has (it polls).
PATIENCE_MS = 30_000

HOW_TO_INSTALL = (
    "the UI tests need headless Chromium from the system's packages "
    "(apt-get install -y --no-install-recommends chromium; bash scripts/test installs it "
    "when run as root) and Playwright for Python (pip install -e '.[test]')"
)


def require_chromium() -> None:
    """Skip (fail in CI) unless the system's Chromium and Playwright are both there."""
    missing = [] if CHROMIUM.exists() else [str(CHROMIUM)]
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        missing.append("the playwright package")
    if not missing:
        return
    message = f"{' and '.join(missing)} missing: {HOW_TO_INSTALL}"
    if os.environ.get("CI"):
        pytest.fail(message + "; in CI the UI tests must run")
    pytest.skip(message)


@contextlib.asynccontextmanager
async def chromium(profile: Path) -> AsyncIterator[Any]:
    """A browser context of the system's headless Chromium with a fresh profile folder."""
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        context = await playwright.chromium.launch_persistent_context(
            str(profile),
            executable_path=str(CHROMIUM),
            args=CHROMIUM_ARGS,
            headless=True,
            viewport=VIEWPORT,  # type: ignore[arg-type]
        )
        context.set_default_timeout(PATIENCE_MS)
        try:
            yield context
        finally:
            await context.close()


async def wait_until_served(url: str, within: float = 60) -> None:
    """Wait for the dev server's UI to answer (it starts after the frontend)."""
    deadline = time.monotonic() + within

    def get() -> int:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status

    while True:
        try:
            if await asyncio.to_thread(get) == 200:
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.2)


@dataclass
class Details:
    """A run's current details as the UI renders them."""

    text: str
    #: The JSON code blocks, parsed.
    json_blocks: list[Any]
    #: The shell code blocks, as shown.
    shell_blocks: list[str]


class OperatorUI:
    """One page of the dev server's Web UI, used the way an operator does."""

    def __init__(self, page: Any, base_url: str, shots: Path | None = None) -> None:
        self.page = page
        self.base_url = base_url
        self.shots = shots

    async def shot(self, name: str) -> dict[str, float]:
        """Keep a screenshot of the page as it is now, if screenshots are wanted: the
        window without the navigation bar on its left, and above any stack trace the UI
        shows under a refusal (the worker's Python traceback, with the paths of its
        files: nothing for an operator, nor for the docs). Returns the clip, taken or not."""
        left = (await self.page.locator("main").bounding_box())["x"]
        bottom = float(VIEWPORT["height"])
        for trace in await self.page.locator(STACK_TRACE).all():
            box = await trace.bounding_box() if await trace.is_visible() else None
            if box is not None:
                bottom = min(bottom, max(box["y"] - 4, 0.0))
        clip = {"x": left, "y": 0, "width": VIEWPORT["width"] - left, "height": bottom}
        if self.shots is not None:
            self.shots.mkdir(parents=True, exist_ok=True)
            await self.page.screenshot(path=str(self.shots / f"{name}.png"), clip=clip)
        return clip

    async def stack_traces(self) -> list[dict[str, float]]:
        """The boxes of the stack traces the page shows."""
        boxes = []
        for trace in await self.page.locator(STACK_TRACE).all():
            box = await trace.bounding_box() if await trace.is_visible() else None
            if box is not None:
                boxes.append(box)
        return boxes

    async def list_runs(self, query: str, *, until_listed: str) -> None:
        """Run ``query`` in the workflow list's query box, again until ``until_listed``
        (a workflow id) is among the runs it lists (the list does not poll)."""
        from playwright.async_api import TimeoutError as NotYet

        page = self.page
        await page.goto(f"{self.base_url}/namespaces/default/workflows")
        await page.get_by_test_id("toggle-manual-query").click()
        await page.get_by_test_id("workflow-manual-search-input").fill(query)
        link = page.get_by_role("link", name=until_listed, exact=True)
        deadline = time.monotonic() + PATIENCE_MS / 1000
        while True:
            await page.get_by_test_id("workflow-manual-search-button").click()
            with contextlib.suppress(NotYet):
                await link.wait_for(timeout=2_000)
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"{until_listed} is not listed by {query!r}")

    async def listed(self) -> list[str]:
        """The workflow ids of the list as shown."""
        rows = self.page.get_by_test_id("workflows-summary-configurable-table-row")
        return [await row.get_by_role("link").first.inner_text() for row in await rows.all()]

    async def open_run(self, workflow_id: str) -> None:
        """Open the listed run and its current details (tab "User Metadata")."""
        await self.page.get_by_role("link", name=workflow_id, exact=True).click()
        await self._to_details(workflow_id)

    async def open_run_page(self, workflow_id: str) -> None:
        """Go to the run's page by its address, and its current details."""
        await self.page.goto(f"{self.base_url}/namespaces/default/workflows/{workflow_id}")
        await self._to_details(workflow_id)

    async def _to_details(self, workflow_id: str) -> None:
        heading = self.page.get_by_test_id("workflow-id-heading")
        await heading.filter(has_text=workflow_id).wait_for()
        await self.page.get_by_test_id("user-metadata-tab").click()

    async def current_details(self) -> Details:
        """The run's current details, rendered (the UI shows them in a frame of their own)."""
        frame = self.page.frame_locator("#user-metadata-current-details")
        main = frame.locator("main")
        await main.wait_for()
        json_code = frame.locator("pre code.language-json")
        shell_code = frame.locator("pre code.language-sh")
        return Details(
            text=await main.inner_text(),
            json_blocks=[json.loads(text) for text in await json_code.all_inner_texts()],
            shell_blocks=await shell_code.all_inner_texts(),
        )

    async def show_in_details(self, pattern: str) -> None:
        """Scroll the page until the first code block of the current details that holds
        ``pattern`` ends at the window's bottom edge."""
        frame = self.page.frame_locator("#user-metadata-current-details")
        block = frame.locator("pre", has_text=pattern).first
        await block.evaluate("block => block.scrollIntoView({block: 'end'})")

    async def fill_update(self, name: str, payload: Any) -> None:
        """More Actions, Send an Update: choose the update ``name``, paste ``payload``."""
        page = self.page
        await page.get_by_role("button", name="More Actions").click()
        await page.get_by_test_id("update-button").filter(visible=True).click()
        dialog = page.locator("dialog[open]")
        await dialog.get_by_test_id("update-select-button").click()
        await dialog.get_by_role("option", name=name, exact=True).click()
        await dialog.get_by_role("textbox", name="Data").fill(json.dumps(payload, indent=2))

    async def submit_update(self) -> str | None:
        """Submit the update dialog: ``None`` once the update was accepted (the dialog
        closes), or the refusal the dialog shows (its first line)."""
        dialog = self.page.locator("dialog[open]")
        await dialog.get_by_test_id("confirm-modal-button").click()
        refusal = dialog.get_by_role("alert").filter(has_text=re.compile(r"\S"))
        deadline = time.monotonic() + PATIENCE_MS / 1000
        while time.monotonic() < deadline:
            if not await dialog.count():
                return None
            if await refusal.count():
                return (await refusal.first.inner_text()).strip().splitlines()[0]
            await asyncio.sleep(0.1)
        raise AssertionError("the update dialog neither closed nor showed a refusal")

    async def close_update(self) -> None:
        await self.page.locator("dialog[open]").get_by_test_id("cancel-modal-button").click()

    async def wait_for_status(self, status: str) -> None:
        """Wait until the run's status badge says ``status`` (the page polls the run)."""
        badge = self.page.get_by_test_id("execution-status").first
        deadline = time.monotonic() + PATIENCE_MS / 1000
        while (shown := (await badge.inner_text()).strip()) != status:
            if time.monotonic() > deadline:
                raise AssertionError(f"the run is {shown}, not {status}")
            await asyncio.sleep(0.2)

    async def result(self) -> str:
        """The run's input and result as the Timeline tab shows them."""
        await self.page.get_by_test_id("timeline-tab").click()
        box = self.page.get_by_test_id("input-and-result")
        await box.filter(has_not_text="Results will appear upon completion").wait_for()
        return await box.inner_text()
