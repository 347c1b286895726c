"""A tool's own failures that mean "failed before acting": declared, not guessed.

An exception from a ledgered tool parks the call as an unknown effect: the ledger cannot
tell whether the tool acted before it raised. A tool's author can: ``no_effect_errors``
(on ``@tool`` and on every ``ledger_activities`` rule) names the exception types the tool
raises only before it acts. Such an exception is recorded as ``NoEffect(retryable=True)``
(the key may act again) and reaches Temporal as it was raised, so that the framework
reports it as it would without the ledger.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from temporalio.exceptions import ApplicationError

from ..workflows._seam import ErrorType

#: The ``type`` of the ledger's own errors: the answers of calls made inside an activity
#: (an unknown effect, an approval to wait for) are never a tool's failure before acting.
_LEDGER_ERRORS = frozenset(kind.value for kind in ErrorType)


class _NonRetryableApplicationErrors(type):
    def __instancecheck__(cls, instance: object) -> bool:
        return isinstance(instance, ApplicationError) and instance.non_retryable


class NonRetryableApplicationError(ApplicationError, metaclass=_NonRetryableApplicationErrors):
    """Every ``ApplicationError`` raised with ``non_retryable=True``, as a class to name in
    ``no_effect_errors``: the way Temporal code says "this failed; do not try again"
    (e.g. ``raise ApplicationError("No weather for Atlantis", non_retryable=True)``).

    It matches by the error's flag, whatever its class; raise ``ApplicationError`` itself.
    """


def no_effect_errors_of(types: Iterable[type[BaseException]]) -> tuple[type[BaseException], ...]:
    """``types`` as a tuple, each checked to be an exception class.

    Raises:
        TypeError: ``types`` is one class, not a collection of them, or an entry is not a
            subclass of ``Exception``.
    """
    if isinstance(types, type):
        raise TypeError(f"no_effect_errors takes a tuple of exception classes: ({types.__name__},)")
    declared = tuple(types)
    for kind in declared:
        if not (isinstance(kind, type) and issubclass(kind, Exception)):
            raise TypeError(
                f"no_effect_errors takes exception classes (subclasses of Exception), not {kind!r}"
            )
    return declared


def failed_before_acting(exc: BaseException, declared: Sequence[type[BaseException]]) -> bool:
    """Whether ``exc``, raised by a tool, is one its rule declares as raised before acting.

    Never one of the ledger's own errors. Never a cancellation or another
    ``BaseException`` that is not an ``Exception`` (the attempt was stopped, wherever it
    was) either: ``declared`` holds only subclasses of ``Exception``
    (:func:`no_effect_errors_of` made it); and never a ``NoEffect``, which the ledger's
    adapter reads itself before it asks this.
    """
    if isinstance(exc, ApplicationError) and exc.type in _LEDGER_ERRORS:
        return False
    return isinstance(exc, tuple(declared))
