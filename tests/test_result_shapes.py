"""An operator's output for a parked activity of another library, mapped to its result."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel
from temporal_ledger.activities.openai_agents import _McpContent as McpContent
from temporal_ledger.activities.openai_agents import activity_rules
from temporal_ledger.activities.pydantic_ai import ToolReturn
from temporal_ledger.workflows._protocol import PLACEHOLDER, holds_placeholder
from temporal_ledger.workflows._results import AsReturned


class Refund(BaseModel):
    refund_id: str
    cents: int


def test_a_function_tool_is_answered_with_what_it_returns() -> None:
    shape = AsReturned()
    assert shape.template(None) == PLACEHOLDER
    assert shape.template(Refund) == {"refund_id": "<string>", "cents": "<integer>"}
    assert shape.result({"refund_id": "R-1", "cents": 5}) == {"refund_id": "R-1", "cents": 5}


def test_an_mcp_tool_is_answered_with_its_content() -> None:
    shape = McpContent()
    assert shape.template(dict) == [{"type": "text", "text": PLACEHOLDER}]
    one = shape.result("note 1 on T-7")
    assert one == {"content": [{"type": "text", "text": "note 1 on T-7"}], "is_error": False}
    assert shape.result([{"type": "text", "text": "a"}])["content"][0]["text"] == "a"
    for wrong in (None, [], {"text": "a"}, [{"type": "nonsense"}], [{"type": "image"}]):
        with pytest.raises(ValueError):
            shape.result(wrong)


def test_a_pydantic_ai_tool_is_answered_with_its_return_value() -> None:
    shape = ToolReturn()
    assert shape.result("done") == {"kind": "tool_return", "result": "done"}
    looks_like_its_own = {"kind": "tool-return", "return_value": 1}
    assert shape.result(looks_like_its_own) == {
        "kind": "tool_content_result",
        "result": looks_like_its_own,
    }


def test_a_placeholder_left_in_the_output_is_found_at_any_depth() -> None:
    template = [{"type": "text", "text": PLACEHOLDER}]
    assert holds_placeholder(template, template)
    assert holds_placeholder({"deep": [PLACEHOLDER]}, PLACEHOLDER)
    assert not holds_placeholder([{"type": "text", "text": "real"}], template)
    assert not holds_placeholder("<b>bold</b>", template)


def test_the_openai_rules_name_the_integrations_activities() -> None:
    async def issue_refund() -> None: ...

    from temporal_ledger.workflows._seam import covers, served_by
    from temporalio import activity

    renamed = activity.defn(name="refund")(issue_refund)
    rules = activity_rules(tools=[renamed])
    patterns = {rule.pattern: rule for rule in rules}
    assert patterns["invoke_model_activity"].retry_safe
    # Where the activity runs, the function itself matches, under any name; the workflow
    # side matches its own name.
    tool = patterns["issue_refund"]
    assert not tool.retry_safe
    assert covers(tool, "refund", None, renamed) and not covers(tool, "refund", None, len)

    def covering(activity_type: str) -> Any:
        return next((r for r in rules if covers(r, activity_type)), None)

    # Every MCP server the plugin registers is covered, named by the pattern's "*".
    listing = covering("temporalio.mcp.n.list-tools")
    assert listing.lists_tools and served_by(listing, "temporalio.mcp.n.list-tools") == "n"
    call = covering("temporalio.mcp.notes.v2.call-tool")
    assert served_by(call, "temporalio.mcp.notes.v2.call-tool") == "notes.v2"
    assert not call.retry_safe and call.tool_name is not None
    assert call.tool_name([{"name": "add_note", "arguments": {}}]) == "add_note"
    stateless = covering("n-stateless-call-tool-v2")
    assert stateless.tool_name([{"tool_name": "x"}]) == "x"
    assert served_by(stateless, "n-stateless-call-tool-v2") == "n"
    # The sandbox's I/O acts on the world: it parks; its lifecycle is not ledgered.
    for io in ("exec", "read", "write"):
        sandbox = covering(f"box-sandbox_session_{io}")
        assert sandbox is not None and not sandbox.retry_safe, io
    assert covering("box-sandbox_session_start") is None
    assert covering("box-sandbox_client_create") is None
    with pytest.raises(TypeError):
        activity_rules(tools=[42])  # type: ignore[list-item]  # neither a function nor a name


def test_each_shape_says_what_an_answer_must_fit_for_the_call() -> None:
    """The activity side's schema of an answer, by the activity's real result type or the
    call's arguments, and the reasons the ledger gives for an answer that does not fit."""
    from temporal_ledger.activities.google_adk import _McpToolResult as AdkMcpResult
    from temporal_ledger.ledger._schema import output_problems

    assert AsReturned().output_schema(str, []) == {"type": "string"}
    assert AsReturned().output_schema(None, []) is None
    assert output_problems(AsReturned().output_schema(Refund, []) or {}, {"cents": 5}) == [
        "refund_id: missing (string)"
    ]

    def tool_call(return_schema: object, metadata: object = None) -> list[object]:
        tool_def = {"name": "t", "return_schema": return_schema, "metadata": metadata}
        return [{"name": "t", "tool_args": {}, "tool_def": tool_def}, None]

    # pydantic-ai: a function tool's return annotation; an MCP tool's value is its content.
    assert ToolReturn().output_schema(None, tool_call({"type": "string"})) == {"type": "string"}
    assert ToolReturn().output_schema(None, tool_call({})) is None
    mcp_tool = tool_call({"type": "object"}, {"annotations": None, "meta": None})
    assert ToolReturn().output_schema(None, mcp_tool) is None

    content = McpContent().output_schema(None, [])
    assert content is not None
    assert output_problems(content, "note 1") == []
    assert output_problems(content, [{"type": "text"}]) == ["output[0].text: missing (string)"]
    assert output_problems(content, []) == ["output: needs at least 1 item(s), got 0"]
    adk = AdkMcpResult().output_schema(None, [])
    assert adk is not None
    assert output_problems(adk, {"content": [{"type": "text", "text": "a"}]}) == []
    assert output_problems(adk, {"content": [{"type": "image"}]}) == [
        "content[0].data: missing (string)",
        "content[0].mimeType: missing (string)",
    ]
