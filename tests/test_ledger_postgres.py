"""The ledger contract on PostgreSQL (LEDGER_TEST_POSTGRES_URL; CI sets it)."""

from __future__ import annotations

import pytest
from temporal_ledger.ledger.testing import LedgerContract


@pytest.mark.postgres
class TestPostgresLedger(LedgerContract):
    @pytest.fixture
    def ledger_url(self, postgres_url: str) -> str:
        return postgres_url
