"""API speculative execution (SGLang paper §5) for OpenAI-style API backends.

A gen with a stop string is answered by ONE call that ignores the stop and generates up to
``num_api_spec_tokens`` tokens; the text past the stop (the surplus) is kept. When the program
then appends its template text and a later gen's prompt is a prefix of prompt + surplus, that
gen is answered from the surplus without a call, as a separate call would have answered it:

- the later gen's own stop strings cut the value;
- the later gen's own ``max_new_tokens`` caps it: the speculative call asks for logprobs so the
  response lists its tokens, and a value longer than ``max_new_tokens`` tokens is cut after its
  ``max_new_tokens``-th token and finishes by ``length``. Without token texts from the endpoint a
  value is taken only if it cannot be too long (no more characters than ``max_new_tokens``);
- a surplus that was cut by length and holds neither a stop nor ``max_new_tokens`` tokens may end
  mid-answer: no hit.

When nothing matches (the model's surplus left the template), the gen falls back to a call.

State: one :class:`SpeculativeCache` per program run (the executor makes it through the
backend's ``new_speculation(n)``), so programs with different ``num_api_spec_tokens`` share one
backend without seeing each other's surplus. Within a run it is keyed by prompt text (one lock:
fork branches may call at once). Constrained gens (regex / schema / FSM / grammar) never speculate.
"""
from __future__ import annotations

import bisect
import dataclasses
import threading
from collections import OrderedDict
from typing import Callable, Optional

from sglc.wire.backend import CallMeta, GenParams, GenResult

__all__ = ["SpecStats", "SpeculativeCache", "SpecCall"]

#: Makes the real call for the prompt: ``call(params, want_tokens)`` -> (result, the generated
#: tokens' texts, or None when not asked for or the endpoint gave none).
SpecCall = Callable[[GenParams, bool], "tuple[GenResult, Optional[list[str]]]"]


@dataclasses.dataclass
class SpecStats:
    """What speculation did in one run: calls made, gens answered from a surplus, misses."""

    api_calls: int = 0
    hits: int = 0
    misses: int = 0


@dataclasses.dataclass(frozen=True)
class _Entry:
    """One speculative generation, stored as prompt+generation (the dict key)."""

    #: The generation ended by itself (stop/EOS), so it is the model's whole answer.
    ended: bool
    #: End offset (in prompt+generation) of each generated token; None when the endpoint gave
    #: no token texts (or they did not join to the text).
    token_ends: Optional[tuple[int, ...]]


@dataclasses.dataclass(frozen=True)
class _Answer:
    text: str
    finish: str  # "stop" | "length"


class SpeculativeCache:
    """Surplus texts of one run's speculative calls, looked up by prompt prefix (LRU of `capacity`)."""

    def __init__(self, num_spec_tokens: int, capacity: int = 256) -> None:
        if isinstance(num_spec_tokens, bool) or not isinstance(num_spec_tokens, int) or num_spec_tokens < 1:
            raise ValueError(f"num_api_spec_tokens must be an int >= 1, got {num_spec_tokens!r}")
        self.num_spec_tokens = num_spec_tokens
        self.capacity = capacity
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self.stats = SpecStats()

    @staticmethod
    def can_speculate(params: GenParams) -> bool:
        """Only unconstrained gens with a stop start a speculative call."""
        return bool(params.stop) and SpeculativeCache._unconstrained(params)

    @staticmethod
    def _unconstrained(params: GenParams) -> bool:
        """Gens whose answer a surplus can give: cut by stop strings and a token budget only (a
        constraint, a stop regex or a minimum length would need the model's own run)."""
        return (params.regex is None and params.json_schema is None and params.fsm is None and params.ebnf is None
                and not params.stop_regex and not params.min_new_tokens)

    def generate(self, prompt_text: str, params: GenParams, call: SpecCall) -> GenResult:
        """Answer from a surplus when the prompt continues one; else one call (speculative when the
        gen has a stop). `call(params, want_tokens)` makes the real API call for `prompt_text`."""
        if self._unconstrained(params):
            hit = self._from_surplus(prompt_text, params)
            if hit is not None:
                return hit
        if not self.can_speculate(params):
            return self._plain(params, call)
        spec = dataclasses.replace(params, stop=None,
                                   max_new_tokens=max(self.num_spec_tokens, params.max_new_tokens or 0))
        with self._lock:
            self.stats.api_calls += 1
        result, tokens = call(spec, True)
        full = prompt_text + result.text
        entry = _Entry(ended=(result.meta.finish_reason or {}).get("type") != "length",
                       token_ends=_token_ends(len(prompt_text), result.text, tokens))
        if params.max_new_tokens in (None, spec.max_new_tokens):  # NOTE: same budget: exactly a plain call's answer
            text, stopped = _cut(result.text, params.stop or [])
            answer: Optional[_Answer] = _Answer(text, "stop" if stopped or entry.ended else "length")
        else:
            answer = _answer(full, entry, len(prompt_text), params)
        if answer is None:  # NOTE: maybe over max_new_tokens, and no token texts to cut it: ask again
            return self._plain(params, call)
        with self._lock:
            self._entries[full] = entry
            self._entries.move_to_end(full)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
        m = result.meta
        return GenResult(answer.text, CallMeta(m.prompt_tokens, m.cached_tokens, m.completion_tokens,
                                               {"type": answer.finish}, m.latency_s))

    def _plain(self, params: GenParams, call: SpecCall) -> GenResult:
        with self._lock:
            self.stats.api_calls += 1
        return call(params, False)[0]

    def _from_surplus(self, prompt_text: str, params: GenParams) -> Optional[GenResult]:
        with self._lock:
            for full, entry in reversed(self._entries.items()):
                if not full.startswith(prompt_text) or (len(full) == len(prompt_text) and not entry.ended):
                    continue
                answer = _answer(full, entry, len(prompt_text), params)
                if answer is not None:
                    self._entries.move_to_end(full)
                    self.stats.hits += 1
                    return GenResult(answer.text, CallMeta(finish_reason={"type": answer.finish,
                                                                          "speculative": True}))
            if self._entries:  # NOTE: a miss = there was a surplus, and it did not answer this gen
                self.stats.misses += 1
            return None


def _token_ends(start: int, text: str, tokens: Optional[list[str]]) -> Optional[tuple[int, ...]]:
    """End offsets of the generated tokens in prompt+text, when the token texts spell `text`."""
    if tokens is None or "".join(tokens) != text:  # NOTE: e.g. a multi-byte char split across tokens
        return None
    ends, pos = [], start
    for tok in tokens:
        pos += len(tok)
        ends.append(pos)
    return tuple(ends)


def _answer(full: str, entry: _Entry, start: int, params: GenParams) -> Optional[_Answer]:
    """What a call for prompt ``full[:start]`` with `params` would have answered, read from `full`;
    None when the surplus cannot tell (it may end mid-answer, or it is too long to cut safely)."""
    text, stopped = _cut(full[start:], params.stop or [])
    limit = params.max_new_tokens
    if entry.token_ends is None:
        if limit is not None and len(text) > limit:  # NOTE: a token has >= 1 char; shorter is safe
            return None
        return _Answer(text, "stop") if stopped or entry.ended else None
    # The value's tokens: every generated token that ends inside the remaining text (a token that
    # straddles the prompt boundary belongs to the value, as it would have been generated for it).
    first = bisect.bisect_right(entry.token_ends, start)
    available = len(entry.token_ends) - first
    end = start + len(text)
    used = bisect.bisect_left(entry.token_ends, end) - first + (1 if text else 0)
    used = min(used, available)
    if limit is not None and (used > limit or (not stopped and available >= limit)):
        cut = entry.token_ends[first + limit - 1] if limit > 0 else start
        return _Answer(full[start:min(cut, end)], "length")
    return _Answer(text, "stop") if stopped or entry.ended else None


def _cut(text: str, stop: list[str]) -> tuple[str, bool]:
    """Text before the earliest stop string, and whether one was found."""
    cuts = [i for i in (text.find(s) for s in stop if s) if i >= 0]
    return (text[:min(cuts)], True) if cuts else (text, False)
