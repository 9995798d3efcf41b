"""Compile budgets: what compiling one constraint may cost, checked before (or while) paying it.

A pattern is data a client sends, and regex compilation has costs far out of proportion to its
text: ``(a|b)*a(a|b){25}`` is 17 characters and 2^26 DFA states; ``[\\s\\S]{0,1000}`` is cheap
to compile but its token index is 8,001 byte states x 49,152 tokens. So every stage has a
limit, checked as early as the stage allows:

| stage | limit | checked |
|---|---|---|
| pattern text | ``max_pattern_chars`` | before parsing (also while a JSON schema is turned into text) |
| syntax | ``max_nesting_depth`` | a linear scan before parsing (regex groups; JSON schema levels) |
| NFA | ``max_nfa_states`` | counted on the syntax tree, before any repetition is expanded |
| DFA | ``max_dfa_states``, ``max_dfa_cells`` | as subset construction adds each state |
| DFA | ``max_subset_states`` | NFA states held in subsets, as each is made (``(a?){2000}``) |
| byte DFA | ``max_byte_states`` | as interior states are added |
| token index | ``max_index_cells`` | byte states x vocabulary size, before the index is built |
| token index | ``max_index_transitions`` | counted as the index is built |
| everything | ``max_compile_seconds`` | wall clock, at every stage and inside every long loop |

A serialized FSM (``fsm_from_dict``) is held to the DFA limits before anything is allocated.
Over a limit, :class:`~sglc.fsm.errors.CompileBudgetError` names the limit, its value and how
to change it. Defaults are sized so the constraints in the tests, samples and benchmarks compile
with room to spare (the largest: about 1,200 DFA states, 830 byte states, 4.8M transitions,
1.7 s) while the pathological cases above are refused in well under a second.

A :class:`CompileMeter` is one compile's running account of a budget (its clock starts when
the meter is made); the compile stages take it as ``meter=`` so one deadline spans them all.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, fields

from .errors import CompileBudgetError


def check_limits(budget: object) -> None:
    """Every field of a budget dataclass is a positive number (``max_compile_seconds`` a float
    > 0, the rest ints >= 1); ValueError naming the field otherwise. Shared by the budgets of
    sglc.fsm and sglc.grammar."""
    for f in fields(budget):  # type: ignore[arg-type]
        v = getattr(budget, f.name)
        if f.name == "max_compile_seconds":
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0
        else:
            ok = isinstance(v, int) and not isinstance(v, bool) and v >= 1
        if not ok:
            raise ValueError(f"{type(budget).__name__}.{f.name} must be a positive number, got {v!r}")


def parse_limits(cls: type, text: str, what: str) -> dict[str, int | float]:
    """The fields of budget class ``cls`` that ``"name=value,..."`` sets; ValueError naming an
    unknown or malformed entry (``what`` names the budget in the message)."""
    known = [f.name for f in fields(cls)]
    values: dict[str, int | float] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, raw = item.partition("=")
        name = name.strip()
        if not sep or name not in known:
            raise ValueError(f"unknown {what} entry {item!r}; known: {', '.join(known)}")
        try:
            values[name] = float(raw) if name == "max_compile_seconds" else int(raw.replace("_", ""))
        except ValueError:
            raise ValueError(f"{what} entry {item!r} is not a number") from None
    return values


@dataclass(frozen=True, slots=True)
class CompileBudget:
    """Limits on compiling one constraint (see the module docstring for where each is checked).

    - max_pattern_chars: regex text length (a JSON schema's or choices' regex included).
    - max_nesting_depth: nested regex groups; nested JSON schema levels.
    - max_nfa_states: Thompson NFA states (bounded repeats count every copy).
    - max_dfa_states: DFA states during subset construction (before minimization).
    - max_dfa_cells: DFA states x alphabet classes (the transition table).
    - max_subset_states: NFA states held by subset construction, summed over its subsets.
    - max_byte_states: states of the UTF-8 byte DFA the token index walks.
    - max_index_cells: byte states x vocabulary size (the token index's worst-case size).
    - max_index_transitions: (state, token) pairs the token index holds.
    - max_compile_seconds: wall time of the whole compile (pattern to token index).
    """

    max_pattern_chars: int = 100_000
    max_nesting_depth: int = 100
    max_nfa_states: int = 50_000
    max_dfa_states: int = 10_000
    max_dfa_cells: int = 2_000_000
    max_subset_states: int = 1_000_000
    max_byte_states: int = 20_000
    max_index_cells: int = 100_000_000
    max_index_transitions: int = 20_000_000
    max_compile_seconds: float = 5.0

    def __post_init__(self) -> None:
        check_limits(self)

    def start(self) -> CompileMeter:
        """A meter for one compile under this budget; its clock starts now."""
        return CompileMeter(self)

    @classmethod
    def parse(cls, text: str) -> CompileBudget:
        """A budget from ``"max_dfa_states=20000,max_compile_seconds=10"`` (the rest default);
        ValueError naming an unknown or malformed entry."""
        values = parse_limits(cls, text, "constraint budget")
        return cls(**values)  # type: ignore[arg-type]


#: The budget used when a caller gives none.
DEFAULT_BUDGET = CompileBudget()



class CompileMeter:
    """One compile's account of a :class:`CompileBudget`: a deadline and limit checks.

    Not thread-safe; one compile, one meter. ``check`` and ``check_time`` raise
    :class:`CompileBudgetError`; both are cheap enough to call inside loops.
    """

    __slots__ = ("budget", "started", "deadline")

    def __init__(self, budget: CompileBudget | None = None) -> None:
        self.budget = budget if budget is not None else DEFAULT_BUDGET
        self.started = time.monotonic()
        self.deadline = self.started + self.budget.max_compile_seconds

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def check(self, limit: str, value: int, what: str) -> None:
        """Raise when ``value`` (what the compile needs, or has reached) exceeds the budget's
        ``limit`` field; ``what`` names what was counted ("DFA states")."""
        allowed = getattr(self.budget, limit)
        if value > allowed:
            raise CompileBudgetError(limit, allowed, f"{what} {value:,}")

    def check_time(self, stage: str) -> None:
        """Raise when the wall-clock budget is spent; ``stage`` names where the compile was."""
        if time.monotonic() > self.deadline:
            limit = self.budget.max_compile_seconds
            raise CompileBudgetError("max_compile_seconds", limit, f"compile time over {limit:g} s while {stage}")


def as_meter(meter: CompileMeter | None) -> CompileMeter:
    """``meter``, or a fresh one on the default budget."""
    return meter if meter is not None else CompileMeter()


def nesting_depth(value: object, limit: int) -> int:
    """The nesting depth of a JSON-like value (dicts and lists), walking iteratively and stopping
    once ``limit`` is passed (so it is safe on values too deep for recursion)."""
    deepest = 0
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        stack.extend((child, depth + 1) for child in children)
    return deepest
