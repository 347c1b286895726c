"""Deprecated: the postgres backend's module is private from 0.3 (``Ledger.open`` opens it by
URL; :mod:`temporal_ledger.ledger.storage` is the contract a backend implements). Its
names keep working, with a warning, until 0.4."""

from . import _postgres
from ._moved import moved

__all__: list[str] = []

__getattr__ = moved(
    __name__,
    lambda name: getattr(_postgres, name),
    lambda name: None if name.startswith("__") else "open a ledger with Ledger.open(url)",
)
