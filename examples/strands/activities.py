"""The support agent's model, refund tool and MCP notes server, for Strands on Temporal
(``temporalio-strands-agents``): ``TemporalAgent`` asks the model in an activity
(``invoke_model``), ``activity_as_tool`` runs the refund as one, and
``TemporalMCPClient(server="notes")`` the notes server's calls (``notes-call-tool``).

The model is scripted (no network, no API key): a Strands ``Model`` whose script is the
prompt, one tool call per line (``tool_name {"json": "arguments"}``), as in
``examples/google_adk``. Register a real one instead, e.g.
``StrandsPlugin(models={"claude": lambda: BedrockModel(...)})``, and name it in the
workflow's ``TemporalAgent(model=...)``. The tools write to the folder named by
``SUPPORT_DIR`` (default: ``temporal-ledger-examples`` in the system's temporary
directory, never the repository: see ``examples.work_dir``).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from mcp import StdioServerParameters, stdio_client
from strands.models import Model
from strands.tools.mcp import MCPClient
from temporal_ledger.activities.strands import ledger_transport
from temporalio import activity

from examples import lose_the_reply_if_asked, work_dir

ROOT = Path(__file__).resolve().parent.parent.parent
#: The scripted model's name, as the workflow's ``TemporalAgent`` asks for it.
MODEL = "scripted-support"
#: The MCP server's name: its activities are ``notes-list-tools`` and ``notes-call-tool``.
NOTES = "notes"


def _texts(message: Any, kind: str) -> list[str]:
    """The text of a message's blocks of one kind (``text``, or ``toolResult``'s)."""
    found = []
    for block in message.get("content", []):
        if kind == "text" and "text" in block:
            found.append(str(block["text"]))
        elif kind in block:
            found += [str(part.get("text", "")) for part in block[kind].get("content", [])]
    return found


class ScriptedModel(Model):
    """Asks for the prompt's tool calls in order, one per turn, then answers
    ``done: <outputs>``.

    It decides from the conversation it is given (how many tool results it already
    holds), never from its own state, so an activity retry or a ``temporal workflow
    reset`` gets the same answer for the same turn, as a recorded real model's would be.
    """

    def update_config(self, **model_config: Any) -> None:
        return None

    def get_config(self) -> Any:
        return {}

    def structured_output(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the scripted model answers in text")

    async def stream(  # type: ignore[override]
        self, messages: Any, tool_specs: Any = None, system_prompt: Any = None, **kwargs: Any
    ) -> AsyncGenerator[Any, None]:
        prompt = "\n".join(_texts(messages[0], "text"))
        returned = [text for message in messages for text in _texts(message, "toolResult")]
        calls = [line.strip().partition(" ") for line in prompt.splitlines() if line.strip()]
        yield {"messageStart": {"role": "assistant"}}
        if len(returned) < len(calls):
            name, _, arguments = calls[len(returned)]
            offered = sorted(spec["name"] for spec in tool_specs or [])
            if name not in offered:
                raise ValueError(f"the script asks for {name!r}; the agent offers {offered}")
            use = {"name": name, "toolUseId": f"call-{len(returned) + 1}"}
            yield {"contentBlockStart": {"start": {"toolUse": use}}}
            yield {"contentBlockDelta": {"delta": {"toolUse": {"input": arguments or "{}"}}}}
            yield {"contentBlockStop": {}}
            yield {"messageStop": {"stopReason": "tool_use"}}
            return
        yield {"contentBlockDelta": {"delta": {"text": "done: " + " | ".join(returned)}}}
        yield {"contentBlockStop": {}}
        yield {"messageStop": {"stopReason": "end_turn"}}


@activity.defn
async def issue_refund(order: str, cents: int) -> str:
    """Refund an order: appends the refund to ``refunds.jsonl`` in ``examples.work_dir()``.

    Args:
        order: The order, e.g. ``A-1``.
        cents: The amount, in cents.
    """
    path = work_dir() / "refunds.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps({"order": order, "cents": cents}) + "\n")
    lose_the_reply_if_asked()
    return f"refunded {cents} cents on {order}"


def notes_client() -> MCPClient:
    """The MCP notes server (``examples.strands.notes_server``) over stdio: the
    integration starts it with the worker and keeps it for the worker's life. Its
    transport is given ``ledger_transport``, so each ledgered call carries its key to the
    server, which dedupes by it."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "examples.strands.notes_server"],
        env={**os.environ, "SUPPORT_DIR": str(work_dir())},
        cwd=str(ROOT),
    )
    return MCPClient(ledger_transport(lambda: stdio_client(params)))
