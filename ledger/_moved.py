"""Names that left the public face, kept one release with a warning (PEP 562)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any


def moved(module: str, find: Callable[[str], Any], instead: Callable[[str], str | None]) -> Any:
    """A module ``__getattr__``: each name ``instead`` has advice for is answered by
    ``find`` with a ``DeprecationWarning`` saying what to use instead.

    Args:
        module: The public module's dotted name, for the messages.
        find: The object for a name.
        instead: What to use instead of a name, or ``None`` for a name that never was.

    Returns:
        The ``__getattr__``.
    """

    def __getattr__(name: str) -> Any:
        advice = instead(name)
        if advice is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warnings.warn(
            f"{module}.{name} is deprecated and goes in 0.4: {advice}",
            DeprecationWarning,
            stacklevel=2,
        )
        return find(name)

    return __getattr__


def moved_names(module: str, names: Mapping[str, tuple[Any, str]]) -> Any:
    """:func:`moved` for a fixed table of old names.

    Args:
        module: The public module's dotted name, for the messages.
        names: Each old name, with its object and what to use instead.

    Returns:
        The ``__getattr__``.
    """
    return moved(
        module,
        lambda name: names[name][0],
        lambda name: names[name][1] if name in names else None,
    )
