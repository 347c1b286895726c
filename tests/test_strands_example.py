"""The Strands example (``examples/strands/``), in the environment Strands installs in
(scripts/test-strands runs this file in .venv-strands; it skips where the `strands` extra
is not installed): every module imports, and its worker and starter refund and note once,
even when the finished run is reset, as tests/test_examples.py checks the other agent
examples."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("strands", reason="the `strands` extra is not installed")
pytest.importorskip("temporalio.strands_agents", reason="the `strands` extra is not installed")

from temporalio.testing import WorkflowEnvironment

from tests.test_examples import LAYOUT, agent_example_refunds_and_notes_once, check_example_module

pytestmark = pytest.mark.timeout(180)


@pytest.mark.parametrize("module", [f"examples.strands.{m}" for m in LAYOUT])
def test_strands_example_module_imports(module: str) -> None:
    check_example_module(module)


async def test_strands_example_refunds_and_notes_once_even_when_reset(
    temporal_env: WorkflowEnvironment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await agent_example_refunds_and_notes_once("strands", temporal_env, tmp_path, monkeypatch)
