"""The README's and the documentation pages' snippets that are not part of the README's
app (``tests/test_user_app.py`` runs that) run as they are shown."""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from temporal_ledger.activities import LedgerPlugin, Policy
from temporal_ledger.ledger import Authority

from tests.temporal_support import ROOT
from worker import free_port, temporal_binary

README = (ROOT / "README.md").read_text(encoding="utf-8")
#: The pages the snippets moved to from the README (the site's sources, under docs/).
GETTING_STARTED = "docs/getting-started.md"
BACKENDS = "docs/backends.md"
APPROVALS_AND_PROBES = "docs/approvals-and-probes.md"
AGENTS = "docs/agents.md"


def blocks(language: str, page: str = "README.md") -> list[str]:
    """The fenced blocks of ``language`` in ``page`` (a path from the repository root)."""
    text = (ROOT / page).read_text(encoding="utf-8")
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def test_the_ledger_snippet_acts_once_and_replays(tmp_path: Path) -> None:
    (snippet,) = [b for b in blocks("python", BACKENDS) if b.startswith("# the ledger on its own")]
    (tmp_path / "snippet.py").write_text(snippet, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "snippet.py"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    expected = re.search(r"# (succeeded .*)\n", snippet)
    assert expected is not None and done.stdout.strip() == expected.group(1)
    assert (tmp_path / "tickets-ledger.db").exists()


def test_the_policy_snippet_is_a_valid_policy(tmp_path: Path) -> None:
    (snippet,) = [b for b in blocks("toml", GETTING_STARTED) if "[performers]" in b]
    (tmp_path / "policy.toml").write_text(snippet, encoding="utf-8")
    policy = Policy.load(tmp_path / "policy.toml")
    assert policy.may_reconcile("ops-alice") and not policy.may_reconcile("agent-1")
    checkout = policy.authority_for("checkout")
    assert isinstance(checkout, Authority) and checkout.allows("payments.charge")
    assert not policy.authority_for("agent-7").allows("payments.charge")
    assert policy.requires_approval("payments.refund") and not policy.requires_approval("mail.x")
    assert policy.may_approve("lead-ann") and not policy.may_approve("ops-alice")


def _agent_snippet(named: str) -> str:
    """The one Python snippet of ``docs/agents.md`` that defines ``named``."""
    (snippet,) = [b for b in blocks("python", AGENTS) if f"def {named}(" in b or f"{named} =" in b]
    return snippet


def _names_left_undefined(snippet: str) -> set[str]:
    """The names a snippet reads at its top level, or in its functions, and never binds."""
    tree = ast.parse(snippet)  # top-level await parses; only compiling refuses it
    bound = set(dir(builtins))
    read: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arguments):
            bound |= {a.arg for a in [*node.posonlyargs, *node.args, *node.kwonlyargs]}
        elif isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
    return read - bound


def _imports_that_exist_here(snippet: str) -> list[str]:
    """Import each name the snippet imports from a module installed here; the modules
    found (Strands' run in an environment of their own, scripts/test-strands)."""
    found = []
    for node in ast.walk(ast.parse(snippet)):
        if isinstance(node, ast.ImportFrom) and node.module:
            try:
                module = importlib.import_module(node.module)
            except ModuleNotFoundError:
                continue
            for alias in node.names:
                assert hasattr(module, alias.name), f"{node.module} has no {alias.name}"
            found.append(node.module)
    return found


def test_the_adk_snippet_defines_a_toolset_factory_of_the_providers_shape() -> None:
    snippet = _agent_snippet("notes_toolset")
    # Only the app's own tool is left to the reader.
    assert _names_left_undefined(snippet) == {"issue_refund"}
    modules = [n.module for n in ast.walk(ast.parse(snippet)) if isinstance(n, ast.ImportFrom)]
    assert _imports_that_exist_here(snippet) == modules  # every one, with the google-adk extra
    from google.adk.tools.mcp_tool import McpToolset
    from temporalio.google_adk import TemporalMcpToolSet

    defined: dict[str, Any] = {}
    exec(snippet.split("client = await", 1)[0], defined)
    # temporalio-google-adk calls toolset_factory(factory_argument) for every MCP
    # activity; TemporalMcpToolSet's factory_argument is None unless given.
    factory_argument = inspect.signature(TemporalMcpToolSet).parameters["factory_argument"]
    toolset = defined["notes_toolset"](factory_argument.default)
    assert isinstance(toolset, McpToolset)
    assert isinstance(defined["notes_toolset"]("some argument"), McpToolset)


def test_the_strands_snippet_defines_its_mcp_client_and_server_parameters() -> None:
    snippet = _agent_snippet("notes_server_params")
    # The app's own tool and model factory are left to the reader; MCPClient,
    # stdio_client and the server's parameters are not.
    assert _names_left_undefined(snippet) == {"issue_refund", "make_model"}
    assert "mcp" in _imports_that_exist_here(snippet)  # the rest where Strands is installed
    params = re.search(r"^notes_server_params = (.*)$", snippet, flags=re.M)
    assert params is not None
    from mcp import StdioServerParameters

    assert isinstance(
        eval(params.group(1), {"StdioServerParameters": StdioServerParameters}),
        StdioServerParameters,
    )


def test_the_langgraph_snippet_defines_what_it_uses_and_builds_a_graph() -> None:
    snippet = _agent_snippet("builder")
    assert _names_left_undefined(snippet) == set()
    modules = [n.module for n in ast.walk(ast.parse(snippet)) if isinstance(n, ast.ImportFrom)]
    # All but the chat model's factory, which comes with the model provider's packages.
    assert _imports_that_exist_here(snippet) == [m for m in modules if m != "langchain.chat_models"]
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langgraph.graph import StateGraph
    from temporalio.langgraph import LangGraphPlugin

    class ScriptedModel(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

    def init_chat_model(name: str) -> ScriptedModel:
        return ScriptedModel(messages=iter([AIMessage("done")]))

    # The snippet up to the client, with a scripted model for the real one.
    source = snippet.split("client = await", 1)[0]
    source = source.replace("from langchain.chat_models import init_chat_model", "")
    defined: dict[str, Any] = {"init_chat_model": init_chat_model}
    exec(source, defined)
    assert isinstance(defined["builder"](), StateGraph)
    # What the snippet hands LangGraphPlugin is what it takes: a graph, not a factory.
    registration = re.search(r"LangGraphPlugin\(graphs=\{\"support\": (.*?)\}\)", snippet)
    assert registration is not None and registration.group(1) == "builder()"
    graphs = inspect.signature(LangGraphPlugin).parameters["graphs"].annotation
    assert "StateGraph" in str(graphs), graphs
    # The module's docstring (the API reference) wires it the same way.
    from temporal_ledger.activities import langgraph

    assert 'LangGraphPlugin(graphs={"support": builder()})' in (langgraph.__doc__ or "")


def test_the_readme_links_nothing_outside_the_repository() -> None:
    for target in re.findall(r"\]\(([^)]+)\)", README):
        assert not target.startswith(("http:", "https:", "/", "..")), target
        assert (ROOT / target.split("#")[0]).exists(), target


def test_the_readme_keeps_two_set_up_commands() -> None:
    """One runs the main job on the embedded defaults, one passes the tests; the pages
    under docs/ include them from here and repeat none."""
    setup = README.split("### Set up on a fresh machine", 1)[1]
    commands = re.findall(r"```sh\n(.*?)```", setup, flags=re.S)
    assert [c.strip() for c in commands] == [
        "python3 -m venv .venv && .venv/bin/pip install -e '.[dev-server,http]'"
        " && .venv/bin/python demo.py",
        "bash scripts/test",
    ]
    assert "docker-compose.yml" in setup and "is not run here" in setup


def test_the_readmes_test_command_uses_the_local_postgresql_and_says_why_it_skips(
    tmp_path: Path,
) -> None:
    """``bash scripts/test`` without LEDGER_TEST_POSTGRES_URL runs the PostgreSQL tests on
    the server that answers on 127.0.0.1:5432, and prints the reason of every skip."""
    answers = subprocess.run(
        ["pg_isready", "-h", "127.0.0.1", "-p", "5432", "-q"], check=False
    ).returncode
    if answers != 0:
        if os.environ.get("CI"):
            pytest.fail("no PostgreSQL answers on 127.0.0.1:5432; CI starts one (.ci/run)")
        pytest.skip("no PostgreSQL answers on 127.0.0.1:5432 (pg_isready)")
    skipping = tmp_path / "test_skipping.py"
    skipping.write_text("import pytest\n\n\ndef test_skips():\n    pytest.skip('REASON-42')\n")
    contract = "tests/test_ledger_postgres.py::TestPostgresLedger"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LEDGER_TEST_", "PYTEST_"))}
    env.pop("CI", None)
    done = subprocess.run(
        ["bash", "scripts/test", "-p", "no:cacheprovider", f"--basetemp={tmp_path / 'inner'}",
         f"{contract}::test_fresh_success_records_marker_before_the_effect",
         str(skipping)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "1 passed, 1 skipped" in out, out
    assert "REASON-42" in out, "pytest ran without -rs: the skip's reason is not printed"
    assert "LEDGER_TEST_POSTGRES_URL=postgresql://postgres@127.0.0.1:5432/postgres" in out


def test_every_section_the_site_includes_is_marked_in_the_readme() -> None:
    """The site shows the README's app, pitch and set-up by including them (pymdownx
    snippets); a section the README no longer marks would include nothing."""
    included = {
        name
        for page in (ROOT / "docs").rglob("*.md")
        for name in re.findall(
            r'^--8<-- "README\.md:(\w+)"$', page.read_text(encoding="utf-8"), re.M
        )
    }
    assert included == {"pitch", "app", "setup"}
    for name in included:
        start = README.index(f"<!-- --8<-- [start:{name}] -->")
        assert README.index(f"<!-- --8<-- [end:{name}] -->") > start
    app = README.split("[start:app]", 1)[1].split("[end:app]", 1)[0]
    # The app's files, all of them inside what the site includes.
    for name in ("ledger.py", "activities.py", "workflows.py", "worker.py", "starter.py"):
        assert f"```python\n# {name}\n" in app, name
    # Relative links would break on the site, which includes the text from docs/.
    assert not re.search(r"\]\((?!https?:)", app), "no relative link in the included app"


def test_the_readmes_dev_server_command_registers_the_ledgers_search_attributes(
    tmp_path: Path,
) -> None:
    """Step 5's ``temporal server start-dev`` line, run as shown (on a free loopback port):
    the namespace then lists both attributes as Int, so the worker finds them at start."""
    (block,) = [b for b in blocks("sh") if "temporal server start-dev" in b]
    line = re.search(r"^temporal server start-dev.*?(?<!\\)$", block, flags=re.S | re.M)
    assert line is not None, block
    shown = shlex.split(re.sub(r"#[^\n]*", "", line.group(0)).replace("\\\n", " "))
    port, ui_port = free_port(), free_port()
    where = ["--ip", "127.0.0.1", "--port", str(port), "--ui-port", str(ui_port), "--headless"]
    server = subprocess.Popen(
        [temporal_binary(), *shown[1:], *where, "--db-filename", str(tmp_path / "t.db")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        listed = ""
        address = ["--address", f"127.0.0.1:{port}"]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            done = subprocess.run(
                [temporal_binary(), "operator", "search-attribute", "list", *address, "-o", "json"],
                capture_output=True,
                text=True,
                timeout=30,
            )
            if done.returncode == 0:
                listed = done.stdout
                break
            time.sleep(0.5)
        attributes = json.loads(listed)["customAttributes"]
        for name in LedgerPlugin.search_attributes:
            assert attributes.get(name) == "INDEXED_VALUE_TYPE_INT", attributes
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_the_signing_policy_snippet_is_a_whole_policy(tmp_path: Path) -> None:
    """Who may decide's TOML, pasted as the workers' policy: its keys parse, signatures are
    required, and its performers may still act (a policy without them lets nobody act)."""
    (snippet,) = [b for b in blocks("toml", APPROVALS_AND_PROBES) if "[keys]" in b]
    (tmp_path / "policy.toml").write_text(snippet, encoding="utf-8")
    policy = Policy.load(tmp_path / "policy.toml")
    assert policy.signed_verdicts and policy.may_approve("lead-ann")
    assert set(policy.keys) == {"lead-ann", "ops-cy"} and len(policy.keys["lead-ann"]) == 2
    assert policy.authority_for("support-bot").allows("payments.refund")
