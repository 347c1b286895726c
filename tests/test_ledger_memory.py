"""The contract suite over a third backend that ``Ledger.open`` does not know.

``tests/memory_recorder.py`` is a recorder of the tests' own; the suite runs over it by
``open_ledger`` alone, which is what a backend outside this package gives it.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import pytest
from temporal_ledger.ledger import Ledger
from temporal_ledger.ledger.testing import LedgerContract

from tests.memory_recorder import MemoryStore, memory_ledger_opener


class TestMemoryLedger(LedgerContract):
    @pytest.fixture
    def open_ledger(self) -> Callable[..., Ledger]:
        return memory_ledger_opener(MemoryStore())


def test_the_package_imports_without_pytest_and_the_suite_names_its_extra() -> None:
    """A plain install has no pytest: the ledger imports, the suite says what to install."""
    script = """
import sys
sys.modules["pytest"] = None  # as if it were not installed
import temporal_ledger.ledger, temporal_ledger.ledger._sqlite, temporal_ledger.ledger._postgres
assert "pytest" not in {name for name, module in sys.modules.items() if module is not None}
try:
    import temporal_ledger.ledger.testing
except ImportError as exc:
    print(exc)
else:
    raise SystemExit("the suite imported without pytest")
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "pip install 'temporal-ledger[test]'" in done.stdout
