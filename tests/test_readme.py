"""The README's snippets that are not part of its app (``tests/test_user_app.py`` runs
that) run as they are shown."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from temporal_ledger.activities import Policy
from temporal_ledger.ledger import Authority

from tests.temporal_support import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.S)


def test_the_ledger_snippet_acts_once_and_replays(tmp_path: Path) -> None:
    (snippet,) = [b for b in blocks("python") if b.startswith("# the ledger on its own")]
    (tmp_path / "snippet.py").write_text(snippet, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "snippet.py"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    expected = re.search(r"# (succeeded .*)\n", snippet)
    assert expected is not None and done.stdout.strip() == expected.group(1)
    assert (tmp_path / "tickets-ledger.db").exists()


def test_the_policy_snippet_is_a_valid_policy(tmp_path: Path) -> None:
    (snippet,) = [b for b in blocks("toml") if "[performers]" in b]
    (tmp_path / "policy.toml").write_text(snippet, encoding="utf-8")
    policy = Policy.load(tmp_path / "policy.toml")
    assert policy.may_reconcile("ops-alice") and not policy.may_reconcile("agent-1")
    checkout = policy.authority_for("checkout")
    assert isinstance(checkout, Authority) and checkout.allows("payments.charge")
    assert not policy.authority_for("agent-7").allows("payments.charge")
    assert policy.requires_approval("payments.refund") and not policy.requires_approval("mail.x")
    assert policy.may_approve("lead-ann") and not policy.may_approve("ops-alice")


def test_the_readme_links_nothing_outside_the_repository() -> None:
    for target in re.findall(r"\]\(([^)]+)\)", README):
        assert not target.startswith(("http:", "https:", "/", "..")), target
        assert (ROOT / target.split("#")[0]).exists(), target
