"""API speculative execution (SGLang paper §5) for completion-style API backends.

A gen with a stop string is answered by ONE call that ignores the stop and generates up to
``num_api_spec_tokens`` tokens; the text past the stop (the surplus) is kept. When the program
then appends its template text and the next gen's prompt is a prefix of prompt + surplus, that
gen is answered from the surplus without a call (up to its own stop). When the prompt does not
match (the model's surplus left the template) or the surplus holds no stop, the gen falls back
to a normal call.

The state is keyed by prompt text only, so it is safe across concurrent programs (their prompts
differ) and across threads (one lock). Constrained gens (regex / schema) never speculate.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Optional

from sglc.executor.backend import CallMeta, GenParams, GenResult


@dataclass
class SpecStats:
    """What speculation did: calls made, gens answered from a surplus, surplus misses."""

    api_calls: int = 0
    hits: int = 0
    misses: int = 0


class SpeculativeCache:
    """Surplus texts of speculative calls, looked up by prompt prefix (an LRU of `capacity`)."""

    def __init__(self, num_spec_tokens: int, capacity: int = 256) -> None:
        if num_spec_tokens < 1:
            raise ValueError(f"num_api_spec_tokens must be >= 1, got {num_spec_tokens}")
        self.num_spec_tokens = num_spec_tokens
        self.capacity = capacity
        self._texts: OrderedDict[str, bool] = OrderedDict()  # prompt+generation -> ended (not cut by length)
        self._lock = threading.Lock()
        self.stats = SpecStats()

    @staticmethod
    def can_speculate(params: GenParams) -> bool:
        return bool(params.stop) and params.regex is None and params.json_schema is None and params.fsm is None

    def generate(self, prompt_text: str, params: GenParams,
                 call: Callable[[GenParams], GenResult]) -> GenResult:
        """Answer from a surplus when the prompt continues one; else one call (speculative when
        the gen has a stop). `call(params)` makes the real API call on `prompt_text`."""
        if not self.can_speculate(params):
            with self._lock:
                self.stats.api_calls += 1
            return call(params)
        hit = self._from_surplus(prompt_text, params.stop or [])
        if hit is not None:
            return hit
        spec = GenParams(**{**params.__dict__, "stop": None, "max_tokens": max(self.num_spec_tokens,
                                                                                 params.max_tokens or 0)})
        with self._lock:
            self.stats.api_calls += 1
        result = call(spec)
        ended = (result.meta.finish_reason or {}).get("type") != "length"
        with self._lock:
            self._texts[prompt_text + result.text] = ended
            while len(self._texts) > self.capacity:
                self._texts.popitem(last=False)
        text, stopped = _cut(result.text, params.stop or [])
        meta = CallMeta(result.meta.prompt_tokens, result.meta.cached_tokens, result.meta.completion_tokens,
                        {"type": "stop" if stopped or ended else "length"}, result.meta.latency_s)
        return GenResult(text, meta)

    def _from_surplus(self, prompt_text: str, stop: list[str]) -> Optional[GenResult]:
        with self._lock:
            for full, ended in reversed(self._texts.items()):
                if len(full) > len(prompt_text) and full.startswith(prompt_text) or ended and full == prompt_text:
                    surplus = full[len(prompt_text):]
                    text, stopped = _cut(surplus, stop)
                    if stopped or ended:  # NOTE: a surplus cut by length may end mid-answer: no hit
                        self._texts.move_to_end(full)
                        self.stats.hits += 1
                        return GenResult(text, CallMeta(finish_reason={"type": "stop", "speculative": True}))
            self.stats.misses += 1
            return None


def _cut(text: str, stop: list[str]) -> tuple[str, bool]:
    """Text before the earliest stop string, and whether one was found."""
    cuts = [i for i in (text.find(s) for s in stop if s) if i >= 0]
    return (text[:min(cuts)], True) if cuts else (text, False)
