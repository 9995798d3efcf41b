"""When a request is finished: stop token ids, eos, stop strings, length; and finish reasons.

Pure logic over token ids and decoded text; the tokenizer lives in the detokenizer.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from ..sampling.sampling_params import SamplingParams


@dataclass(frozen=True, slots=True)
class FinishReason:
    """Why a request ended; `to_dict()` gives SGLang's JSON shape.

    stop: {"type": "stop", "matched": token id or stop string}
    length: {"type": "length", "length": number of generated tokens}
    abort: {"type": "abort", "message": why}
    """

    type: str
    matched: int | str | None = None
    length: int | None = None
    message: str | None = None

    @classmethod
    def stop(cls, matched: int | str) -> FinishReason:
        return cls("stop", matched=matched)

    @classmethod
    def of_length(cls, length: int) -> FinishReason:
        return cls("length", length=length)

    @classmethod
    def abort(cls, message: str) -> FinishReason:
        return cls("abort", message=message)

    def to_dict(self) -> dict:
        if self.type == "stop":
            return {"type": "stop", "matched": self.matched}
        if self.type == "length":
            return {"type": "length", "length": self.length}
        return {"type": self.type, "message": self.message}


class StopChecker:
    """Per-request stop rules.

    NOTE: before `min_new_tokens` tokens exist no stop applies (the sampler also bans eos and
    stop ids then); a stop match wins over the length limit when both happen on one token.
    """

    __slots__ = ("params", "stop_ids", "max_stop_len", "regexes")

    def __init__(self, params: SamplingParams, eos_token_ids: Iterable[int] = ()) -> None:
        self.params = params
        ids = set(params.stop_token_ids)
        if not params.ignore_eos:
            ids.update(eos_token_ids)
        self.stop_ids = frozenset(ids)
        self.max_stop_len = max((len(s) for s in params.stop), default=0)
        self.regexes = None
        if params.stop_regex:  # NOTE: imported here: the regex machinery (lark, the FSM compiler) is ~50 ms
            from ..constrained.stop_regex import StopRegexMatcher

            self.regexes = StopRegexMatcher(params.stop_regex, params.stop_regex_dfas)

    def check_token(self, token_id: int, num_output_tokens: int) -> FinishReason | None:
        """Finish reason decided by the token alone (stop id / eos); `num_output_tokens` counts it."""
        if num_output_tokens > self.params.min_new_tokens and token_id in self.stop_ids:
            return FinishReason.stop(token_id)
        return None

    def check_length(self, num_output_tokens: int) -> FinishReason | None:
        """Length finish once max_new_tokens tokens exist."""
        if num_output_tokens >= self.params.max_new_tokens:
            return FinishReason.of_length(num_output_tokens)
        return None

    def find_stop_str(self, text: str, num_new_chars: int, num_output_tokens: int) -> tuple[int, str] | None:
        """Earliest stop string that ends inside the last `num_new_chars` chars of `text`.

        Returns (index where it starts, the stop string) or None. Only the tail that the new
        characters can complete is searched, so a stop split across tokens is found once its
        last piece arrives, and per-token cost does not grow with the output.
        """
        if not self.max_stop_len or num_new_chars <= 0 or num_output_tokens <= self.params.min_new_tokens:
            return None
        lo = max(len(text) - num_new_chars - self.max_stop_len + 1, 0)
        best: tuple[int, str] | None = None
        for s in self.params.stop:
            i = text.find(s, lo)
            if i != -1 and (best is None or i < best[0]):
                best = (i, s)
        return best

    def find_stop_regex(self, new_text: str, num_output_tokens: int) -> str | None:
        """The first stop_regex pattern a match of which ends in `new_text` (the output's newest
        characters, each read once); before min_new_tokens tokens exist nothing matches."""
        if not self.regexes or not new_text:
            return None
        return self.regexes.feed(new_text, check=num_output_tokens > self.params.min_new_tokens)

    def holdback(self, text: str) -> int:
        """How many trailing chars of `text` could begin a stop string (not safe to stream yet)."""
        for n in range(min(self.max_stop_len - 1, len(text)), 0, -1):
            tail = text[-n:]
            if any(s.startswith(tail) for s in self.params.stop):
                return n
        return 0

