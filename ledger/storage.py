"""The storage contract: what a third backend implements beside SQLite and PostgreSQL.

A backend is a :class:`Recorder` whose :meth:`Recorder.transact` runs the ledger's rule in
one atomic, durable transaction holding one key: a :class:`Transaction` of the backend
appends the key's events and writes its :class:`KeyRecord`. The rule, the hash chain and
``verify`` are written once, against this contract; ``Ledger(MyRecorder(...))`` opens a
ledger over it, and a test module that subclasses
:class:`temporal_ledger.ledger.testing.LedgerContract` proves it behaves as the shipped
backends do. The SQLite backend (``temporal_ledger/ledger/_sqlite.py``) is the smallest
complete example.
"""

from ._recorder import Recorder
from ._transaction import KeyRecord, Transaction

__all__ = ["KeyRecord", "Recorder", "Transaction"]
