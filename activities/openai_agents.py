"""Ledgered tools, MCP calls and model calls for the OpenAI Agents SDK on Temporal.

Users of ``temporalio.openai_agents.OpenAIAgentsPlugin`` (the package
``temporalio-openai-agents``) add one plugin and change no tool::

    from temporalio.openai_agents import OpenAIAgentsPlugin
    from temporal_ledger.activities import LedgerPlugin
    from temporal_ledger.activities.openai_agents import activity_rules

    rules = activity_rules(tools=[send_email])
    client = await Client.connect(
        "localhost:7233",
        plugins=[
            OpenAIAgentsPlugin(mcp_servers={"files": files_server}),
            LedgerPlugin("sqlite:///ledger.db", ledger_activities=rules),
        ],
    )

Then every call the integration's plugin registers, and every call of those tools, goes
through the ledger, keyed by workflow, first execution run and the call's number in the
run (see ``activities._generic``):

* ``tools``: activities the agent calls through ``activity_as_tool``. Not retry-safe:
  an attempt that acted and lost its reply (or whose worker died) is never run again;
  the agent's run waits in the workflow, parked like a ``run_tool`` step, until an
  operator answers with the tool's return value (update ``reconcile``).
* MCP calls: the ``call-tool`` activities of every MCP server, wired with
  ``OpenAIAgentsPlugin(mcp_servers=...)`` and ``workflow.temporal_mcp_server(name)``,
  or with the deprecated ``StatelessMCPServerProvider`` / ``StatefulMCPServerProvider``;
  a server added later is covered too. The operator confirms an effect with the tool's
  result content, e.g. ``[{"type": "text", "text": "..."}]``. Each server's tool list
  is recorded too (it only reads), so a reset offers the model the tools the run saw;
  the tools' annotations are hints the policy weighs (``readOnlyHint``, ``idempotentHint``: the
  call is retry-safe; ``destructiveHint`` with ``[approve] destructive = true``: it
  waits for an approval; ``[tools]`` has the last word).
* Sandbox calls (``{prefix}-sandbox_session_exec``, ``_read``, ``_write`` of
  ``OpenAIAgentsPlugin(sandbox_clients=...)``): they act on the sandbox's world, so an
  unknown effect parks like a tool's; the operator answers with the activity's result
  (``{"stdout", "stderr", "exit_code"}`` of an exec). The session's lifecycle activities
  (create, start, stop, ...) are not ledgered: a replay of one would hand back a session
  that no longer runs.
* Model calls (``invoke_model_activity``) are recorded as retry-safe, so a worker
  crash, a retry or ``temporal workflow reset`` replays the model's answers instead of
  asking again.

The parking happens around the workflow's activity call, before the Agents SDK sees an
error: the SDK would turn a failed MCP call into "An error occurred while running the
tool" for the model, and a failed ``activity_as_tool`` call into a failed workflow.

Plugin order does not matter on a client: the integration installs a converter of its
own and refuses any other, and ``LedgerPlugin`` keeps it. On a ``Replayer`` put the
integration's plugin first.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from ..workflows._seam import PLACEHOLDER
from . import _rules
from ._mcp import content_schema

__all__ = ["activity_rules"]


@dataclasses.dataclass(frozen=True)
class _McpContent:
    """An MCP tool's result: the operator answers with its content blocks (or a string,
    for one text block), and the activity returns a ``CallToolResult`` of them."""

    def template(self, result_type: Any) -> Any:
        """The operator's template: one text block to fill in.

        Args:
            result_type: The activity's result type (not needed: always MCP content).

        Returns:
            ``[{"type": "text", "text": "<what the tool returned>"}]``.
        """
        return [{"type": "text", "text": PLACEHOLDER}]

    def result(self, output: Any) -> Any:
        """The activity's ``CallToolResult`` (as JSON) for the operator's content.

        Args:
            output: Content blocks, or a string for one text block.

        Returns:
            ``{"content": [...], "is_error": False}``.

        Raises:
            ValueError: The output is not MCP result content.
        """
        content = [{"type": "text", "text": output}] if isinstance(output, str) else output
        if not isinstance(content, list) or not content:
            raise ValueError(
                "an MCP tool's output is its result content: a list of content blocks such "
                'as [{"type": "text", "text": "..."}], or a string for one text block'
            )
        from mcp.types import CallToolResult
        from pydantic import ValidationError

        result = {"content": content, "is_error": False}
        try:
            CallToolResult.model_validate(result)
        except ValidationError as exc:
            raise ValueError(f"not an MCP tool result's content: {exc}") from None
        return result

    def output_schema(self, result_type: Any, args: list[Any]) -> dict[str, Any] | None:
        """What an operator's output must fit: MCP content blocks, or one string.

        Args:
            result_type: The activity's result type (not needed: always MCP content).
            args: The call's arguments (not needed).

        Returns:
            The JSON schema of a non-empty list of MCP content blocks, or a string.
        """
        return content_schema()


#: The integration's model activities (``ModelActivity`` methods).
_MODELS = _rules.models("invoke_model_activity", "invoke_model_activity_streaming")
#: What the plugin registers that acts: every MCP server's calls (``temporal_mcp_server``,
#: and the deprecated stateless and stateful providers), and the sandbox's I/O.
_CALLS = [
    *_rules.mcp(
        listing=["temporalio.mcp.*.list-tools"],
        calling=["temporalio.mcp.*.call-tool"],
        tool_name=lambda args: args[0]["name"],
        output=_McpContent(),
    ),
    *_rules.mcp(
        listing=["*-stateless-list-tools", "*-stateful-list-tools"],
        calling=["*-stateless-call-tool-v2", "*-stateful-call-tool-v2"],
        tool_name=lambda args: args[0]["tool_name"],
        output=_McpContent(),
    ),
    *(_rules.Rule(f"*-sandbox_session_{io}") for io in ("exec", "read", "write")),
]

if TYPE_CHECKING:
    from ._rules import activity_rules
else:
    activity_rules = _rules.bind(_MODELS, _CALLS)
