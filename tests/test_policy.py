"""The authority policy file: what performers may use, who may reconcile."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from temporal_ledger.activities import Policy
from temporal_ledger.ledger import InvalidRequest


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "policy.toml"
    path.write_text(text)
    return path


def test_a_policy_file_grants_capabilities_by_performer_pattern(tmp_path: Path) -> None:
    policy = Policy.load(
        write(
            tmp_path,
            """
[performers]
"agent-*" = ["files.*"]
"agent-ops" = ["messages.post"]

[reconcile]
actors = ["ops-*"]
""",
        )
    )
    ops = policy.authority_for("agent-ops")
    assert ops.allows("files.append") and ops.allows("messages.post")
    other = policy.authority_for("agent-7")
    assert other.allows("files.append") and not other.allows("messages.post")
    assert not policy.authority_for("intruder").allows("files.append")
    assert policy.may_reconcile("ops-alice") and not policy.may_reconcile("mallory")
    assert not policy.may_reconcile("")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[performers\n", "not valid TOML"),
        ("[perfomers]\nx = ['a']\n", "unknown section"),
        ("[reconcile]\nactor = ['x']\n", "[reconcile] takes only actors"),
        ('[performers]\n"agent" = [""]\n', "capabilities must be non-empty"),
        ("[approve]\napprovers = ['x']\n", "[approve] takes only capabilities"),
    ],
)
def test_a_bad_policy_file_is_named(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(InvalidRequest, match=message.replace("[", r"\[")) as refused:
        Policy.load(write(tmp_path, text))
    assert "policy.toml" in str(refused.value)


def test_a_missing_policy_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequest, match="policy file not found"):
        Policy.load(tmp_path / "nope.toml")


def test_the_allow_all_default_says_so(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="activities.policy"):
        policy = Policy.permissive()
    assert policy.allow_all and policy.authority_for("anyone").allows("any.thing")
    assert "ALLOW-ALL" in caplog.text


def test_approve_names_the_gated_capabilities_and_who_may_decide(tmp_path: Path) -> None:
    policy = Policy.load(
        write(tmp_path, '[approve]\ncapabilities = ["payments.*"]\nactors = ["lead-*"]\n')
    )
    assert policy.requires_approval("payments.refund")
    assert not policy.requires_approval("files.append")
    assert policy.may_approve("lead-ann") and not policy.may_approve("ops-bo")
    assert not policy.may_approve("")
    nobody = Policy.load(write(tmp_path, "[performers]\n"))
    assert not nobody.requires_approval("payments.refund") and not nobody.may_approve("lead-ann")


def test_a_policy_file_weighs_mcp_hints_and_has_the_last_word_per_tool(tmp_path: Path) -> None:
    from temporal_ledger.workflows._protocol import ToolHints

    policy = Policy.load(
        write(
            tmp_path,
            """
[approve]
actors = ["lead-*"]
destructive = true

[hints]
trust = ["count", "put", "wipe_*", "notes/list_*"]

[tools."wipe_*"]
retry_safe = false

[tools."append_note"]
requires_approval = true
""",
        )
    )
    read_only = ToolHints.parse({"readOnlyHint": True})
    idempotent = ToolHints.parse({"idempotent_hint": True, "destructive_hint": False})
    silent = ToolHints.parse({})  # the MCP defaults: not read-only, may destroy
    gentle = ToolHints.parse({"readOnlyHint": False, "destructiveHint": False})

    def treat(tool: str, hints: ToolHints | None, server: str | None = None) -> tuple[bool, bool]:
        t = policy.treatment(
            capability="mcp.x", retry_safe=False, tool=tool, hints=hints, server=server
        )
        return t.retry_safe, t.requires_approval

    assert treat("count", read_only) == (True, False)
    assert treat("put", idempotent) == (True, False)
    # A hint that relaxes counts only where [hints] trust names the tool (or server/tool).
    assert treat("charge", read_only) == (False, False)
    assert treat("charge", idempotent) == (False, False)
    assert treat("list_notes", read_only, server="notes") == (True, False)
    assert treat("list_notes", read_only, server="other") == (False, False)
    assert treat("list_notes", read_only) == (False, False)
    # A hint that makes the ledger more careful applies whoever sent it.
    assert treat("charge", silent) == (False, True)
    assert treat("close", silent) == (False, True)
    assert treat("note", gentle) == (False, False)
    assert treat("append_note", gentle) == (False, True)  # [tools] has the last word
    assert treat("wipe_all", read_only) == (False, False)  # whatever the hints say
    assert treat("close", None) == (False, False)  # no hints: only the declaration counts


def test_by_default_no_hint_relaxes_the_ledger() -> None:
    from temporal_ledger.workflows._protocol import ToolHints

    lying = ToolHints.parse({"readOnlyHint": True, "idempotentHint": True})
    for policy in (Policy(), Policy.permissive()):
        treated = policy.treatment(
            capability="payments.charge", retry_safe=False, tool="charge", hints=lying,
            server="payments",
        )  # fmt: skip
        assert not treated.retry_safe
    trusting = Policy(trust_hints=["payments/*"])
    assert trusting.treatment(
        capability="payments.charge", retry_safe=False, tool="charge", hints=lying,
        server="payments",
    ).retry_safe  # fmt: skip


def test_hints_trust_takes_only_a_list_of_patterns(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequest, match=r"\[hints\] takes only trust"):
        Policy.load(write(tmp_path, "[hints]\ntrusted = ['x']\n"))


def test_hints_of_another_shape_are_no_hints() -> None:
    from temporal_ledger.workflows._protocol import ToolHints

    assert ToolHints.parse(None) is None
    assert ToolHints.parse(["readOnlyHint"]) is None
    assert ToolHints.parse({"readOnlyHint": "very"}) is None
    assert ToolHints.parse({"title": "x", "readOnlyHint": None}) == ToolHints()


def test_a_policy_file_refuses_an_unknown_approve_key(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequest, match="destructive"):
        Policy.load(write(tmp_path, "[approve]\ndestroy = true\n"))
    with pytest.raises(InvalidRequest, match="tools"):
        Policy.load(write(tmp_path, '[tools."x"]\nretry = true\n'))
