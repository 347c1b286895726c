"""The crash matrix's Strands rows: Strands' ``activity_as_tool`` and MCP ``call-tool``
(``TemporalMCPClient``), killed at every crash point, through the same harness as the
other ways (``tests/test_crash_matrix.py``, whose docstring says how), in .venv-strands
(scripts/test-strands runs it; it skips where the `strands` extra is not installed).

Its table is the section of ``docs/crash-matrix.md`` between the Strands markers; the
main matrix's section is not touched. ``LEDGER_WRITE_CRASH_MATRIX=1
.venv-strands/bin/pytest tests/test_crash_matrix_strands.py`` rewrites it from the run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("strands", reason="the `strands` extra is not installed")
pytest.importorskip("temporalio.strands_agents", reason="the `strands` extra is not installed")

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from tests.test_crash_matrix import Matrix, Way, check_page, run_matrix

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(420)]

BEGIN = "<!-- crash-matrix-strands: begin (written by tests/test_crash_matrix_strands.py) -->"
END = "<!-- crash-matrix-strands: end -->"


STRANDS_WAYS = [
    Way(
        "strands_tool",
        "Strands `activity_as_tool`",
        "CrashStrandsWorkflow",
        "strands",
        lambda cell: f"crash_strands_append {json.dumps({'cell': cell})}",
        lambda text: text,
        lambda text: f"done: {text}",
        "activity.crash_strands_append",
    ),
    Way(
        "strands_mcp",
        "Strands MCP `call-tool` (`TemporalMCPClient`)",
        "CrashStrandsWorkflow",
        "strands",
        lambda cell: f"append_note {json.dumps({'cell': cell})}",
        # The operator answers with the result's content blocks, in Strands' form.
        lambda text: [{"text": text}],
        lambda text: f"done: {text}",
        "activity.notes-call-tool",
    ),
]


async def test_strands_ways_survive_every_crash_point_with_one_effect(
    temporal_address: str, postgres_url: str, tmp_path: Path
) -> None:
    client = await Client.connect(temporal_address, data_converter=pydantic_data_converter)
    matrix = Matrix(
        client,
        temporal_address,
        postgres_url,
        tmp_path,
        ways=STRANDS_WAYS,
        worker_module="tests.crash_tools_strands",
    )
    check_page(
        await run_matrix(matrix),
        BEGIN,
        END,
        ".venv-strands/bin/pytest tests/test_crash_matrix_strands.py",
    )
