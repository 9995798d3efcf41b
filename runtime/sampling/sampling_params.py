"""Per-request sampling parameters (SGLang's field names), validated once at construction.

Every check raises at the edge with the field's name, so a bad request fails at `submit()` and
never inside a running batch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

_MAX_SEED = 2**63 - 1
#: Temperatures below this sample greedily (dividing logits by less overflows).
_GREEDY_BELOW = 1e-5
_MAX_TEMPERATURE = 1e4


def _check_int(name: str, value: object) -> int:
    # NOTE: bool is an int subclass; True as a token count is always a caller bug.
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"SamplingParams.{name} must be an int, got {type(value).__name__}")
    return value


def _check_float(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"SamplingParams.{name} must be a number, got {type(value).__name__}")
    if not math.isfinite(value):
        raise ValueError(f"SamplingParams.{name} must be finite, got {value}")
    return float(value)


def _normalize_stop(stop: object) -> list[str]:
    if stop is None:
        return []
    if isinstance(stop, str):
        stop = [stop]
    elif not isinstance(stop, (list, tuple)):
        raise TypeError(f"SamplingParams.stop must be a str or a list of str, got {type(stop).__name__}")
    for s in stop:
        if not isinstance(s, str):
            raise TypeError(f"SamplingParams.stop must contain only str, got an item of type {type(s).__name__}")
        if not s:
            raise ValueError("SamplingParams.stop must not contain an empty string")
    return list(stop)


def _normalize_stop_token_ids(ids: object) -> list[int]:
    if ids is None:
        return []
    if not isinstance(ids, (list, tuple, set, frozenset)):
        raise TypeError(f"SamplingParams.stop_token_ids must be a list of int, got {type(ids).__name__}")
    out = []
    for t in ids:
        if isinstance(t, bool) or not isinstance(t, int):
            raise TypeError(f"SamplingParams.stop_token_ids must contain only int, got {type(t).__name__}")
        if t < 0:
            raise ValueError(f"SamplingParams.stop_token_ids must be >= 0, got {t}")
        out.append(t)
    return out


@dataclass(slots=True)
class SamplingParams:
    """How one request samples and when it stops.

    - max_new_tokens: upper bound on generated tokens (>= 0; 0 = prefill only, e.g. scoring).
    - min_new_tokens: eos / stop tokens / stop strings are suppressed until this many tokens exist.
    - temperature in [0, 1e4]: 0 means greedy (argmax), as does any temperature below 1e-5; top_k == 1
      is greedy as well.
    - top_p in (0, 1], top_k == -1 (off) or >= 1, min_p in [0, 1] (0 = off).
    - frequency_penalty / presence_penalty in [-2, 2] (OpenAI semantics, over output tokens);
      repetition_penalty in (0, 2] (HF/CTRL semantics, over output tokens; 1 = off).
    - seed: a per-request generator makes sampling reproducible regardless of batching.
    - stop: str or list of str (normalized to a list); stop_token_ids: extra ids that end the
      request; ignore_eos: do not stop at the tokenizer's eos.
    - return_logprob / top_logprobs_num / logprob_start_len: what log-probabilities to return;
      logprob_start_len = -1 returns none for the prompt, k >= 0 returns them for prompt
      positions k.. (position 0 has no logprob).
    - regex / json_schema / fsm: at most one output constraint (a regex; a JSON schema as JSON
      text, a dict or a pydantic model class; or the ``fsm`` dict the compiler's lower_constraints
      pass stores on a gen). The engine compiles it once per distinct constraint at submit (a bad
      one raises ValueError there) into ``constraint``. min_new_tokens must be 0 with one: the
      constraint decides where the output ends.
    - constraint: the compiled form, any object with ``new_cursor()`` (set by the engine from the
      fields above, or given directly); it wins over them.
    - jump_forward: with a constraint, append the text it forces without sampling (retokenized at
      the boundary); False decodes token by token (for comparison).
    """

    max_new_tokens: int = 128
    min_new_tokens: int = 0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    seed: int | None = None
    stop: str | list[str] | None = field(default=None)
    stop_token_ids: list[int] | None = field(default=None)
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    return_logprob: bool = False
    top_logprobs_num: int = 0
    logprob_start_len: int = -1
    regex: str | None = None
    json_schema: object | None = None
    fsm: dict | None = None
    constraint: object | None = None
    jump_forward: bool = True

    def __post_init__(self) -> None:
        if _check_int("max_new_tokens", self.max_new_tokens) < 0:
            raise ValueError(f"SamplingParams.max_new_tokens must be >= 0, got {self.max_new_tokens}")
        if _check_int("min_new_tokens", self.min_new_tokens) < 0:
            raise ValueError(f"SamplingParams.min_new_tokens must be >= 0, got {self.min_new_tokens}")
        if self.min_new_tokens > self.max_new_tokens:
            raise ValueError(
                f"SamplingParams.min_new_tokens ({self.min_new_tokens}) must be <= "
                f"max_new_tokens ({self.max_new_tokens})"
            )
        self.temperature = _check_float("temperature", self.temperature)
        if not 0 <= self.temperature <= _MAX_TEMPERATURE:  # NOTE: above float32's range logits / t is NaN
            raise ValueError(f"SamplingParams.temperature must be in [0, {_MAX_TEMPERATURE:g}], got {self.temperature}")
        if self.temperature < _GREEDY_BELOW:  # NOTE: logits / 1e-308 overflow to inf and NaN (SGLang does the same)
            self.temperature = 0.0
        self.top_p = _check_float("top_p", self.top_p)
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"SamplingParams.top_p must be in (0, 1], got {self.top_p}")
        if _check_int("top_k", self.top_k) == 0 or self.top_k < -1:
            raise ValueError(f"SamplingParams.top_k must be -1 (off) or >= 1, got {self.top_k}")
        self.min_p = _check_float("min_p", self.min_p)
        if not 0.0 <= self.min_p <= 1.0:
            raise ValueError(f"SamplingParams.min_p must be in [0, 1], got {self.min_p}")
        for name in ("frequency_penalty", "presence_penalty"):
            v = _check_float(name, getattr(self, name))
            if not -2.0 <= v <= 2.0:
                raise ValueError(f"SamplingParams.{name} must be in [-2, 2], got {v}")
            setattr(self, name, v)
        self.repetition_penalty = _check_float("repetition_penalty", self.repetition_penalty)
        if not 0.0 < self.repetition_penalty <= 2.0:
            raise ValueError(f"SamplingParams.repetition_penalty must be in (0, 2], got {self.repetition_penalty}")
        if self.seed is not None and not 0 <= _check_int("seed", self.seed) <= _MAX_SEED:
            raise ValueError(f"SamplingParams.seed must be in [0, 2**63 - 1], got {self.seed}")
        self.stop = _normalize_stop(self.stop)
        self.stop_token_ids = _normalize_stop_token_ids(self.stop_token_ids)
        for name in ("ignore_eos", "skip_special_tokens", "return_logprob"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"SamplingParams.{name} must be a bool, got {type(getattr(self, name)).__name__}")
        if _check_int("top_logprobs_num", self.top_logprobs_num) < 0:
            raise ValueError(f"SamplingParams.top_logprobs_num must be >= 0, got {self.top_logprobs_num}")
        if _check_int("logprob_start_len", self.logprob_start_len) < -1:
            raise ValueError(f"SamplingParams.logprob_start_len must be >= -1, got {self.logprob_start_len}")
        self._check_constraint()

    def _check_constraint(self) -> None:
        if not isinstance(self.jump_forward, bool):
            raise TypeError(f"SamplingParams.jump_forward must be a bool, got {type(self.jump_forward).__name__}")
        constrained = self.constraint is not None or self.constraint_spec() is not None
        if constrained and self.min_new_tokens:
            raise ValueError("SamplingParams.min_new_tokens must be 0 with a constraint "
                             "(regex / json_schema / fsm): the constraint decides where the output ends")

    def constraint_spec(self):  # -> sglc_runtime.constrained.ConstraintSpec | None
        """The regex / json_schema / fsm constraint as a ConstraintSpec (None when none is set);
        TypeError / ValueError naming the field when it is malformed or several are set."""
        if self.regex is None and self.json_schema is None and self.fsm is None:
            return None
        from sglc.wire.constraint_spec import ConstraintSpec  # NOTE: lazy: only constrained requests pay

        try:
            return ConstraintSpec.of(regex=self.regex, json_schema=self.json_schema, fsm=self.fsm)
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


def as_params(params: SamplingParams | dict | None) -> SamplingParams:
    """SamplingParams from None (defaults), a dict of its fields, or itself."""
    if params is None:
        return SamplingParams()
    if isinstance(params, SamplingParams):
        return params
    if isinstance(params, dict):
        return SamplingParams(**params)
    raise TypeError(f"sampling params must be SamplingParams or a dict, got {type(params).__name__}")
