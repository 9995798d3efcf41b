"""Per-request sampling parameters (SGLang's field names), validated once at construction.

The sampling fields, their defaults and ranges are the rows of :mod:`sglc.wire.sampling_table`
(the one table the DSL, the IR, the executor and runtime.proto also derive from); this module
adds the constraint fields and the rules that relate several fields. Every check raises at the
edge with the field's name, so a bad request fails at `submit()` and never inside a running batch.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, make_dataclass, replace

from sglc.wire import sampling_table

#: Temperatures below this sample greedily (dividing logits by less overflows).
_GREEDY_BELOW = 1e-5


@dataclass(slots=True)
class _ConstraintFields:
    """The output constraint of a request (after the table's sampling fields).

    - regex / json_schema / fsm / ebnf: at most one output constraint (a regex; a JSON schema as
      JSON text, a dict or a pydantic model class; the ``fsm`` dict the compiler's
      lower_constraints pass stores on a gen; or a context-free grammar in GBNF/EBNF text). The engine compiles it once per distinct constraint at submit (a bad
      one raises ValueError there) into ``constraint``. min_new_tokens must be 0 with one: the
      constraint decides where the output ends.
    - constraint: the compiled form, any object with ``new_cursor()`` (set by the engine from the
      fields above, or given directly); it wins over them.
    - jump_forward: with a constraint, append the text it forces without sampling (retokenized at
      the boundary); False decodes token by token (for comparison).
    - stop_regex_dfas: the compiled search DFAs of ``stop_regex``, one per pattern (set by the
      engine at submit from its compile pool, like ``constraint``; None: compiled where used).
    """

    regex: str | None = None
    json_schema: object | None = None
    fsm: dict | None = None
    ebnf: str | None = None
    constraint: object | None = None
    jump_forward: bool = True
    stop_regex_dfas: tuple | None = None


class _SamplingRules:
    """SamplingParams' methods (its fields come from the table and _ConstraintFields)."""

    __slots__ = ()

    def __post_init__(self) -> None:
        for row in sampling_table.RUNTIME:
            value = getattr(self, row.name)
            if value is None:
                if row.kind in ("str_list", "token_ids"):
                    setattr(self, row.name, [])
                elif row.default is not None:
                    raise TypeError(f"SamplingParams.{row.name} must be set, got None")
                continue
            setattr(self, row.name, row.check(value, f"SamplingParams.{row.name}"))
        self._check_stop_regex()
        if self.min_new_tokens > self.max_new_tokens:
            raise ValueError(
                f"SamplingParams.min_new_tokens ({self.min_new_tokens}) must be <= "
                f"max_new_tokens ({self.max_new_tokens})"
            )
        if self.temperature < _GREEDY_BELOW:  # NOTE: logits / 1e-308 overflow to inf and NaN (SGLang does the same)
            self.temperature = 0.0
        self._check_constraint()

    def _check_stop_regex(self) -> None:
        """Each stop_regex parsed here so an invalid one fails at construction. NOTE: parsed, not
        compiled: the compile (and its budget) is the engine's, in its compile pool, at submit."""
        if not self.stop_regex:
            return
        from ..constrained.stop_regex import check_stop_regex  # NOTE: lazy: only stop_regex requests pay

        for pattern in self.stop_regex:
            try:
                check_stop_regex(pattern)
            except ValueError as err:
                raise ValueError(f"SamplingParams.{err}") from None
        dfas = self.stop_regex_dfas
        if dfas is not None and (not isinstance(dfas, tuple) or len(dfas) != len(self.stop_regex)):
            raise ValueError("SamplingParams.stop_regex_dfas must be a tuple of one DFA per stop_regex pattern")

    def _check_constraint(self) -> None:
        if not isinstance(self.jump_forward, bool):
            raise TypeError(f"SamplingParams.jump_forward must be a bool, got {type(self.jump_forward).__name__}")
        constrained = self.constraint is not None or self.constraint_spec() is not None
        if constrained and self.min_new_tokens:
            raise ValueError("SamplingParams.min_new_tokens must be 0 with a constraint "
                             "(regex / json_schema / fsm / ebnf): the constraint decides where the output ends")

    def constraint_spec(self):  # -> sglc.wire.constraint_spec.ConstraintSpec | None
        """The regex / json_schema / fsm / ebnf constraint as a ConstraintSpec (None when none is
        set); TypeError / ValueError naming the field when it is malformed or several are set."""
        if self.regex is None and self.json_schema is None and self.fsm is None and self.ebnf is None:
            return None
        from sglc.wire.constraint_spec import ConstraintSpec  # NOTE: lazy: only constrained requests pay

        try:
            return ConstraintSpec.of(regex=self.regex, json_schema=self.json_schema, fsm=self.fsm, ebnf=self.ebnf)
        except (TypeError, ValueError) as err:
            raise type(err)(f"SamplingParams: {err}") from None

    @property
    def is_greedy(self) -> bool:
        """True when sampling reduces to argmax (temperature 0 or top_k 1)."""
        return self.temperature == 0.0 or self.top_k == 1

    @property
    def has_penalties(self) -> bool:
        """True when any output-token penalty changes the logits."""
        return self.frequency_penalty != 0.0 or self.presence_penalty != 0.0 or self.repetition_penalty != 1.0

    def replace(self, **changes: object) -> SamplingParams:
        """A validated copy with some fields changed."""
        return replace(self, **changes)


_DOC = "How one request samples and when it stops.\n\n" + "\n".join(
    f"- {row.name} (default {row.default!r}, {row.described()})" + (f": {row.doc}" if row.doc else "")
    for row in sampling_table.RUNTIME) + "\n\n" + (_ConstraintFields.__doc__ or "").split("\n\n", 1)[1]

#: One request's sampling: the table's rows (sglc.wire.sampling_table.RUNTIME) as slotted fields
#: with their defaults, then the constraint fields; validated in __post_init__.
SamplingParams = make_dataclass(
    "SamplingParams",
    [*((row.name, object, field(default=row.default)) for row in sampling_table.RUNTIME),
     *((f.name, f.type, field(default=f.default)) for f in fields(_ConstraintFields))],
    bases=(_SamplingRules,),
    namespace={"__module__": __name__, "__doc__": _DOC},
    slots=True,
)


def as_params(params: SamplingParams | dict | None) -> SamplingParams:
    """SamplingParams from None (defaults), a dict of its fields, or itself."""
    if params is None:
        return SamplingParams()
    if isinstance(params, SamplingParams):
        return params
    if isinstance(params, dict):
        return SamplingParams(**params)
    raise TypeError(f"sampling params must be SamplingParams or a dict, got {type(params).__name__}")
