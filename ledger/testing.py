"""The ledger's behaviour, once for every backend: the recorder contract's test suite.

A backend's test module subclasses :class:`LedgerContract` and says how to open a ledger
of that backend: ``ledger_url``, a URL :meth:`Ledger.open` takes, or ``open_ledger``,
any callable that opens a :class:`Ledger` over the same, at first empty, storage each
time it is called (a third backend is a
:class:`~temporal_ledger.ledger._recorder.Recorder` subclass plus this suite)::

    import pytest
    from temporal_ledger.ledger import Ledger
    from temporal_ledger.ledger.testing import LedgerContract

    class TestMyLedger(LedgerContract):
        @pytest.fixture
        def open_ledger(self):
            store = MyStore()
            return lambda **options: Ledger(MyRecorder(store), **options)

A backend opened by ``open_ledger`` alone skips the tests that start other processes on
the ledger (they need a URL those processes can open); one that gives ``ledger_url``
runs them too.

The suite runs under pytest with pytest-asyncio in ``asyncio_mode = "auto"``; both come
with the ``test`` extra (``pip install 'temporal-ledger[test]'``). Importing
``temporal_ledger.ledger`` never needs them, only importing this module does.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable

try:
    import pytest
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        "temporal_ledger.ledger.testing is a pytest suite and needs pytest and "
        "pytest-asyncio: pip install 'temporal-ledger[test]'"
    ) from exc

from temporal_ledger.ledger import Ledger

from ._contract_decisions import DecisionContract
from ._contract_effects import EffectContract
from ._contract_identity import IdentityContract, RecordContract

__all__ = ["LedgerContract"]


class LedgerContract(IdentityContract, EffectContract, DecisionContract, RecordContract):
    """Behaviour every backend must show. Subclasses provide ``ledger_url`` or
    ``open_ledger`` (see the module's docstring)."""

    @pytest.fixture
    def ledger_url(self) -> str:
        """Override: a URL of the backend, at first empty, that ``Ledger.open`` and other
        processes can open. By default the tests that need one are skipped.

        Returns:
            The URL.
        """
        pytest.skip("this backend has no URL that another process could open")

    @pytest.fixture
    def open_ledger(self, ledger_url: str) -> Callable[..., Ledger]:
        """Override, or give ``ledger_url``: ``open_ledger(**options)`` opens a new
        :class:`Ledger` over the test's storage each time it is called.

        Args:
            ledger_url: The backend's URL (the fixture above).

        Returns:
            The opener; its keyword arguments are ``Ledger``'s (``lease=...``).
        """
        return functools.partial(Ledger.open, ledger_url)

    @pytest.fixture
    async def ledger(self, open_ledger: Callable[..., Ledger]) -> AsyncIterator[Ledger]:
        """An open ledger with a 2 second lease, verified again after the test.

        Args:
            open_ledger: The opener (the fixture above).

        Yields:
            The ledger.
        """
        async with open_ledger(lease=2.0) as ledger:
            yield ledger
        # Every ledger a test builds must still verify.
        with open_ledger() as reopened:
            report = reopened.verify()
            assert report.ok, report.problems
