"""The Strands example (``examples/strands/``), in the environment Strands installs in
(scripts/test-strands runs this file in .venv-strands; it skips where the `strands` extra
is not installed): every module imports, and its worker and starter refund and note once,
even when the finished run is reset, from the repository and as a user's app with the
wheel (where the same app without the ledger acts twice), and a lost reply parks until
the operator answers with the CLI, as tests/test_examples.py and tests/test_user_app.py
check the other agent examples."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("strands", reason="the `strands` extra is not installed")
pytest.importorskip("temporalio.strands_agents", reason="the `strands` extra is not installed")

from temporalio.testing import WorkflowEnvironment

from tests.test_examples import (
    LAYOUT,
    agent_example_refunds_and_notes_once,
    check_example_module,
    refuses_no_ledger_with_a_policy,
)
from tests.test_user_app import (
    lost_reply_parks_in_the_wheel_app,
    run_example_from_the_wheel,
    venv_with,
)

pytestmark = pytest.mark.timeout(600)


@pytest.mark.parametrize("module", [f"examples.strands.{m}" for m in LAYOUT])
def test_strands_example_module_imports(module: str) -> None:
    check_example_module(module)


async def test_strands_example_refunds_and_notes_once_even_when_reset(
    temporal_env: WorkflowEnvironment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await agent_example_refunds_and_notes_once("strands", temporal_env, tmp_path, monkeypatch)


def test_strands_worker_refuses_no_ledger_with_a_policy(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    refuses_no_ledger_with_a_policy("examples.strands.worker", monkeypatch, capsys)


@pytest.fixture(scope="module")
def strands_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel and its `strands` extra, as a user installs them."""
    return venv_with(wheel, "strands", tmp_path_factory.mktemp("strands-venv"))


async def test_strands_example_from_the_wheel_replays_a_reset_and_acts_twice_without_ledger(
    strands_venv: Path,
    temporal_env: WorkflowEnvironment,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The Strands example copied out of the repository and run with the wheel's venv; a
    reset of the finished run replays it, and without the ledger (``--no-ledger``) the
    same app acts twice."""
    await run_example_from_the_wheel("strands", strands_venv, temporal_env, tmp_path, monkeypatch)


async def test_a_lost_reply_in_the_strands_app_from_the_wheel_parks_until_reconciled(
    strands_venv: Path, temporal_address: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await lost_reply_parks_in_the_wheel_app(
        "strands",
        strands_venv,
        temporal_address,
        tmp_path,
        monkeypatch,
        output="refunded 1250 cents on A-1",
    )
