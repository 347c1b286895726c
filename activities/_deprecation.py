"""Names that left the public face, kept one release with a warning (PEP 562)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any


def moved_names(module: str, names: Mapping[str, tuple[Any, str]]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that answers each of ``names`` with its object and a
    ``DeprecationWarning`` saying what to use instead.

    Args:
        module: The public module's dotted name, for the messages.
        names: Each old name, with its object and what to use instead.

    Returns:
        The ``__getattr__``.
    """

    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        found, instead = names[name]
        warnings.warn(
            f"{module}.{name} is deprecated and goes in 0.4: {instead}",
            DeprecationWarning,
            stacklevel=2,
        )
        return found

    return __getattr__
