"""An operator's output for a parked activity of another library, mapped to its result."""

from __future__ import annotations

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

    from temporal_ledger.activities._generic import rule_matches
    from temporalio import activity

    renamed = activity.defn(name="refund")(issue_refund)
    rules = activity_rules(tools=[renamed], mcp_servers=["n"])
    patterns = {rule.pattern: rule for rule in rules}
    assert patterns["invoke_model_activity"].retry_safe
    # Where the activity runs, the function itself matches, under any name; the workflow
    # side matches its own name.
    tool = patterns["issue_refund"]
    assert not tool.retry_safe
    assert rule_matches(tool, "refund", renamed) and not rule_matches(tool, "refund", len)
    assert patterns["temporalio.mcp.n.list-tools"].lists_tools
    call = patterns["temporalio.mcp.n.call-tool"]
    assert call.server == "n" and call.tool_name is not None
    assert call.tool_name([{"name": "add_note", "arguments": {}}]) == "add_note"
    assert patterns["n-stateless-call-tool-v2"].tool_name([{"tool_name": "x"}]) == "x"
    with pytest.raises(TypeError):
        activity_rules(tools=[42])  # type: ignore[list-item]  # neither a function nor a name
