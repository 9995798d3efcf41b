"""Exceptions raised by the FSM library (``sglc.fsm``).

Every error a user can provoke with a bad pattern, schema, vocabulary or serialized FSM is a
subclass of :class:`FSMError` (itself a ``ValueError``), so callers at the edges can catch one
type. Messages name the problem and, where there is one, its position or JSON path.

Errors pickle with their constructor's arguments (``_args``), so they cross process boundaries
(the runtime compiles constraints in worker processes) as the same type with the same fields.
"""
from __future__ import annotations

from typing import Sequence


class FSMError(ValueError):
    """Base class of every error raised by ``sglc.fsm``."""

    _args: tuple | None = None

    def __reduce__(self):  # type: ignore[override]
        # NOTE: BaseException pickles ``args`` (the message), which custom constructors reject.
        if self._args is None:
            return super().__reduce__()
        return (type(self), self._args)


class InvalidRegexError(FSMError):
    """The pattern is not a valid regular expression (Python ``re`` would reject it too)."""

    def __init__(self, message: str, pattern: str, position: int) -> None:
        self._args = (message, pattern, position)
        self.pattern = pattern
        self.position = position
        self.reason = message
        super().__init__(f"invalid regex: {message} at position {position} in {pattern!r}")


class UnsupportedRegexError(FSMError):
    """The pattern is valid Python regex syntax but uses a construct a finite automaton cannot
    express (backreferences, lookaround, inline flags, ...)."""

    def __init__(self, construct: str, pattern: str, position: int) -> None:
        self._args = (construct, pattern, position)
        self.pattern = pattern
        self.position = position
        self.construct = construct
        super().__init__(
            f"unsupported regex construct: {construct} at position {position} in {pattern!r}"
        )


class UnsupportedSchemaError(FSMError):
    """The JSON schema uses a keyword (or a keyword value) that cannot be lowered to a regex."""

    def __init__(self, keyword: str, path: str, detail: str = "") -> None:
        self._args = (keyword, path, detail)
        self.keyword = keyword
        self.path = path
        extra = f": {detail}" if detail else ""
        super().__init__(f"unsupported JSON schema keyword {keyword!r} at {path}{extra}")


class RecursiveSchemaError(UnsupportedSchemaError):
    """A ``$ref`` that refers to a schema it is inside of: not regular, so no FSM; such a schema
    is a context-free grammar (``sglc.grammar``; the compiler lowers it to one, issue 27)."""

    def __init__(self, ref: str, path: str) -> None:
        super().__init__("$ref", path, f"recursive reference {ref!r} is not regular")
        self._args = (ref, path)
        self.ref = ref


class InvalidSchemaError(FSMError):
    """The JSON schema is malformed (wrong value type for a keyword, dangling $ref, ...)."""

    def __init__(self, message: str, path: str) -> None:
        self._args = (message, path)
        self.path = path
        super().__init__(f"invalid JSON schema at {path}: {message}")


class EmptyLanguageError(FSMError):
    """The constraint matches no string at all, so no generation can satisfy it."""


class IncompatibleVocabularyError(FSMError):
    """The vocabulary cannot express the pattern: from a reachable state no token leads on to
    an accepting state (outlines-core's ``IncompatibleVocabulary``)."""

    def __init__(self, state: int, missing: Sequence[str], pattern: str = "") -> None:
        self._args = (state, tuple(missing), pattern)
        self.state = state
        self.missing = tuple(missing)
        shown = ", ".join(self.missing[:12]) + (", ..." if len(self.missing) > 12 else "")
        where = f" for pattern {pattern!r}" if pattern else ""
        super().__init__(
            f"vocabulary cannot continue from FSM state {state}{where}: the pattern needs "
            f"one of [{shown}] there and no token (or token sequence) provides it"
        )


class FSMFormatError(FSMError):
    """A serialized FSM is malformed or was written by a newer format version."""


class ConstraintViolationError(FSMError):
    """A cursor was asked to take a token or text the constraint does not allow there."""


class CompileBudgetError(FSMError):
    """Compiling the constraint would cost more than its :class:`~sglc.fsm.budget.CompileBudget`
    allows (states, table size, nesting, wall time, ...). ``limit`` is the budget field's name,
    ``value`` its setting; the message names both and what was measured. ``owner`` is the
    settings class the limit belongs to (the runtime's worker memory limit is not a
    CompileBudget field)."""

    def __init__(self, limit: str, value: float, measured: str, owner: str = "CompileBudget") -> None:
        self._args = (limit, value, measured, owner)
        self.limit = limit
        self.value = value
        self.measured = measured
        self.owner = owner
        super().__init__(
            f"constraint exceeds its compile budget: {measured} "
            f"(limit {owner}.{limit} = {value:,}; raise it to allow this)"
        )
