"""THE table of sampling parameters: each one's name, type, range, default and how every edge
spells it. Everything else is derived from it:

- the DSL's checks (``sglc.frontend.params``) and the IR's attribute rules (``sglc.ir.op_rules``);
- the executor's GenParams fields (``sglc.wire.backend``) and its run-level keywords;
- the runtime's SamplingParams fields, defaults and validation (``sglc_runtime.sampling``);
- the runtime.proto conversion on both sides (``sglc.wire.client_convert`` / ``server_convert``).

Spellings: ``name`` is the one spelling inside, in both halves: the IR's gen attribute (and so
graph.pb's, since format 4), the GenParams field, the runtime's SamplingParams field and
runtime.proto's (SGLang's ``sampling_params`` key, e.g. ``max_new_tokens``). The other columns
are edges, read only where a user's spelling comes in: ``dsl`` is ``gen(...)``'s keyword (SGLang's
``max_tokens``), ``run`` is ``SglFunction.run``'s keyword, ``openai`` the OpenAI request fields,
``sglang`` the key in SGLang's /generate ``sampling_params`` (``seed`` is its ``sampling_seed``).

Adding a parameter is one row here plus its runtime behaviour.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Optional

#: Largest token count of one request (and of a gen's max_tokens): 2**20, beyond any context.
MAX_NEW_TOKENS = 2**20
#: Largest token id (stop_token_ids) and top_k: int32, beyond any vocabulary.
MAX_TOKEN_ID = 2**31 - 1
#: Largest sampling temperature: above float32's range logits / t is NaN.
MAX_TEMPERATURE = 1e4
MAX_SEED = 2**63 - 1

_KINDS = ("int", "float", "bool", "str_list", "token_ids")


@dataclasses.dataclass(frozen=True)
class SamplingParam:
    """One sampling parameter. ``check(value)`` returns the normalized value or raises
    TypeError (wrong type) / ValueError (out of range) naming the parameter."""

    name: str
    kind: str
    default: Any
    low: Optional[float] = None
    high: Optional[float] = None
    low_open: bool = False
    #: Values allowed outside [low, high] (top_k's -1 = off).
    special: tuple = ()
    doc: str = ""
    dsl: Optional[str] = None
    #: A stricter lower bound for a gen (and its graph.pb attribute) than for a request.
    dsl_low: Optional[float] = None
    run: Optional[str] = None
    openai: tuple[str, ...] = ()
    sglang: Optional[str] = None
    proto: Optional[str] = None
    #: False: accepted by the DSL for SGLang compatibility, but no backend takes it.
    runtime: bool = True

    def __post_init__(self) -> None:
        assert self.kind in _KINDS, f"{self.name}: kind {self.kind!r} is not one of {_KINDS}"

    def range_text(self, low: Optional[float] = None) -> str:
        """``[0, 1048576]``, ``(0, 1]``, ``[-1, inf)``."""
        low = self.low if low is None else low
        high = "inf)" if self.high is None else f"{_num(self.high)}]"
        return f"{'(' if self.low_open else '['}{_num(low)}, {high}"

    def expected(self, low: Optional[float] = None) -> str:
        """What a value must be: ``an int in [1, 1048576]``, ``-1 or an int in [1, 2147483647]``."""
        kind = "an int" if self.kind == "int" else "a number"
        return " or ".join([*(_num(v) for v in self.special), f"{kind} in {self.range_text(low)}"])

    def described(self, low: Optional[float] = None) -> str:
        """What a value must be, in words, for docs and errors: ``an int in [0, 1048576]``."""
        if self.kind in ("int", "float"):
            return self.expected(low)
        return {"bool": "a bool", "str_list": "a str or a list of non-empty str",
                "token_ids": f"a list of token ids in [0, {MAX_TOKEN_ID}]"}[self.kind]

    def check(self, value: Any, where: Optional[str] = None, low: Optional[float] = None) -> Any:
        """`value` normalized (a float for a float, a list for stop); `where` names it in errors."""
        where = self.name if where is None else where
        if self.kind == "bool":
            if not isinstance(value, bool):
                raise TypeError(f"{where} must be a bool, got {value!r}")
            return value
        if self.kind == "str_list":
            items = [value] if isinstance(value, str) else value
            if not isinstance(items, (list, tuple)) or not all(isinstance(s, str) for s in items):
                raise TypeError(f"{where} must be a str or a list of str, got {type(value).__name__}")
            if not all(items):
                raise ValueError(f"{where} must not contain an empty string")
            return list(items)
        if self.kind == "token_ids":
            if not isinstance(value, (list, tuple, set, frozenset)) or not all(_is_int(t) for t in value):
                raise TypeError(f"{where} must be a list of int token ids, got {value!r}")
            if not all(0 <= t <= MAX_TOKEN_ID for t in value):
                raise ValueError(f"{where} must hold token ids in [0, {MAX_TOKEN_ID}], got {list(value)!r}")
            return list(value)
        low = self.low if low is None else low
        if not (_is_int(value) or (self.kind == "float" and isinstance(value, float))):
            raise TypeError(f"{where} must be {self.expected(low)}, got {value!r}")
        if self.kind == "float":
            if not math.isfinite(value):
                raise ValueError(f"{where} must be a finite number in {self.range_text(low)}, got {value}")
            value = float(value)
        if value in self.special:
            return value
        too_low = value <= low if self.low_open else value < low
        if too_low or (self.high is not None and value > self.high):
            raise ValueError(f"{where} must be {self.expected(low)}, got {value!r}")
        return value

    def check_gen(self, value: Any, where: Optional[str] = None) -> Any:
        """The check a gen's (and a graph.pb attribute's) value passes: dsl_low, if any, as its bound."""
        return self.check(value, self.name if where is None else where, self.dsl_low)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _num(v: float) -> str:
    """1048576 (not 1.04858e+06), 0.5, -2."""
    if isinstance(v, int):
        return str(v)
    return str(int(v)) if v.is_integer() else f"{v:g}"


P = SamplingParam
#: Every sampling parameter, one row each.
TABLE: tuple[SamplingParam, ...] = (
    P("max_new_tokens", "int", 128, 0, MAX_NEW_TOKENS, dsl="max_tokens", dsl_low=1, run="max_new_tokens",
      openai=("max_tokens", "max_completion_tokens"), sglang="max_new_tokens", proto="max_new_tokens",
      doc="upper bound on generated tokens (0 = prefill only, e.g. a cache-prefix hint; a gen asks for >= 1)"),
    P("min_new_tokens", "int", 0, 0, MAX_NEW_TOKENS, dsl="min_tokens", run="min_new_tokens", openai=("min_tokens",),
      sglang="min_new_tokens", proto="min_new_tokens",
      doc="eos / stop tokens / stop strings are suppressed until this many tokens exist"),
    P("stop", "str_list", None, dsl="stop", run="stop", openai=("stop",), sglang="stop", proto="stop",
      doc="strings that end the output (a str is a one-item list)"),
    P("stop_token_ids", "token_ids", None, dsl="stop_token_ids", run="stop_token_ids", openai=("stop_token_ids",),
      sglang="stop_token_ids", proto="stop_token_ids", doc="token ids that end the output"),
    P("temperature", "float", 1.0, 0.0, MAX_TEMPERATURE, dsl="temperature", run="temperature",
      openai=("temperature",), sglang="temperature", proto="temperature", doc="0 (or below 1e-5) is greedy"),
    P("top_p", "float", 1.0, 0.0, 1.0, low_open=True, dsl="top_p", run="top_p", openai=("top_p",), sglang="top_p",
      proto="top_p"),
    P("top_k", "int", -1, 1, MAX_TOKEN_ID, special=(-1,), dsl="top_k", run="top_k", openai=("top_k",), sglang="top_k",
      proto="top_k", doc="-1 is off; 1 is greedy"),
    P("min_p", "float", 0.0, 0.0, 1.0, dsl="min_p", run="min_p", openai=("min_p",), sglang="min_p", proto="min_p",
      doc="0 is off"),
    P("frequency_penalty", "float", 0.0, -2.0, 2.0, dsl="frequency_penalty", run="frequency_penalty",
      openai=("frequency_penalty",), sglang="frequency_penalty", proto="frequency_penalty",
      doc="OpenAI semantics, over output tokens"),
    P("presence_penalty", "float", 0.0, -2.0, 2.0, dsl="presence_penalty", run="presence_penalty",
      openai=("presence_penalty",), sglang="presence_penalty", proto="presence_penalty",
      doc="OpenAI semantics, over output tokens"),
    P("repetition_penalty", "float", 1.0, 0.0, 2.0, low_open=True, openai=("repetition_penalty",),
      sglang="repetition_penalty", proto="repetition_penalty", doc="HF/CTRL semantics, over output tokens; 1 is off"),
    P("seed", "int", None, 0, MAX_SEED, run="seed", openai=("seed",), sglang="sampling_seed", proto="seed",
      doc="a per-request generator: reproducible regardless of batching"),
    P("stop_regex", "str_list", None, dsl="stop_regex", run="stop_regex", openai=("stop_regex",), sglang="stop_regex",
      proto="stop_regex",
      doc="SGLang's field: the output ends once a match of one of these regexes ends in it (run as a DFA; "
          "the matched text stays in the output)"),
    P("no_stop_trim", "bool", False, sglang="no_stop_trim",
      doc="keep a matched stop string (and a stop token's text) in the output text"),
    P("ignore_eos", "bool", False, dsl="ignore_eos", run="ignore_eos", openai=("ignore_eos",), sglang="ignore_eos",
      proto="ignore_eos"),
    P("skip_special_tokens", "bool", True, sglang="skip_special_tokens", proto="skip_special_tokens"),
    P("return_logprob", "bool", False, dsl="return_logprob"),
    P("top_logprobs_num", "int", 0, 0, None, dsl="top_logprobs_num"),
    P("logprob_start_len", "int", -1, -1, None, dsl="logprob_start_len",
      doc="-1 returns none for the prompt; k >= 0 returns them for prompt positions k.."),
    P("return_text_in_logprobs", "bool", False, dsl="return_text_in_logprobs", runtime=False),
)
del P

BY_NAME: Mapping[str, SamplingParam] = {p.name: p for p in TABLE}
#: gen(...) keyword -> row: what the DSL takes (its edge spelling, e.g. ``max_tokens``).
BY_DSL: Mapping[str, SamplingParam] = {p.dsl: p for p in TABLE if p.dsl}
#: The IR's GEN sampling attributes, by name: the rows the DSL spells.
GEN_ATTRS: Mapping[str, SamplingParam] = {p.name: p for p in TABLE if p.dsl}
#: SglFunction.run keyword -> row: run-level defaults; these rows are the GenParams fields.
BY_RUN: Mapping[str, SamplingParam] = {p.run: p for p in TABLE if p.run}
#: GenParams field -> row (a gen's parameters as the executor hands them to a backend).
GEN_FIELDS: Mapping[str, SamplingParam] = {p.name: p for p in TABLE if p.run}
#: The runtime's SamplingParams fields (in table order).
RUNTIME: tuple[SamplingParam, ...] = tuple(p for p in TABLE if p.runtime)
#: runtime.proto SamplingParams fields.
PROTO: tuple[SamplingParam, ...] = tuple(p for p in TABLE if p.proto)
#: OpenAI request field -> row (both of max_new_tokens' spellings).
BY_OPENAI: Mapping[str, SamplingParam] = {name: p for p in TABLE for name in p.openai}
#: SGLang /generate ``sampling_params`` key -> row.
BY_SGLANG: Mapping[str, SamplingParam] = {p.sglang: p for p in TABLE if p.sglang}
#: Defaults the executor sends with every gen (SGLang's SglFunction.run keyword defaults).
RUN_DEFAULTS: Mapping[str, Any] = {n: BY_NAME[n].default for n in ("max_new_tokens", "temperature")}


#: Request fields of the OpenAI API itself; the other OpenAI spellings are extensions that only
#: sglc and SGLang servers read (sent in ``extra_body``).
OPENAI_STANDARD = frozenset({"max_tokens", "temperature", "top_p", "frequency_penalty", "presence_penalty", "seed",
                             "stop"})


def set_fields(params: Any) -> dict[str, Any]:
    """The sampling fields a GenParams sets (None = unset), by name: what a backend sends."""
    return {name: value for name in GEN_FIELDS if (value := getattr(params, name)) is not None}


def at_most_one_constraint(given: Mapping[str, Any], what: str = "a gen") -> list[str]:
    """The names of the constraints set in `given` (None = unset); ValueError when several are."""
    names = [k for k, v in given.items() if v is not None]
    if len(names) > 1:
        raise ValueError(f"{what} takes at most one constraint, got {', '.join(names)}")
    return names
