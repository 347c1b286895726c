"""Deprecated: the postgres backend's module is private from 0.3 (Ledger.open opens it by
URL; :mod:`temporal_ledger.ledger.storage` is the contract a backend implements). Its
names keep working, with a warning, until 0.4."""

import warnings
from typing import Any

from . import _postgres

__all__: list[str] = []


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    warnings.warn(
        "temporal_ledger.ledger.postgres is private from 0.3 and goes in 0.4; "
        "open a ledger with Ledger.open(url)",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(_postgres, name)
