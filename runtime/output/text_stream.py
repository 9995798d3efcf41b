"""One request's output: token ids in, streamable text deltas and the finish reason out.

Glues the incremental detokenizer to the stop checker. Text that could be the start of a stop
string is held back while streaming, so a client never receives characters that a stop string
later removes. The concatenation of all deltas equals `text`, the final output text.
"""
from __future__ import annotations

from typing import Iterable, Sequence

from ..sampling.sampling_params import SamplingParams
from .detokenizer import Decoder, IncrementalDetokenizer
from .stop_checker import FinishReason, StopChecker


class TextStream:
    """Per-request output state.

    `append(token_id)` returns the text now safe to stream and sets `finish_reason` when the
    request is done; a matched stop token or eos is kept in `output_ids` but not in the text,
    a matched stop string is cut from the text (with everything after it); with no_stop_trim both
    stay in the text. A stop_regex match ends the request and keeps its text (as SGLang does).
    """

    __slots__ = ("detok", "checker", "output_ids", "text", "num_sent", "finish_reason")

    def __init__(self, tokenizer: Decoder, params: SamplingParams, eos_token_ids: Iterable[int] = (),
                 prompt_ids: Sequence[int] = ()) -> None:
        self.detok = IncrementalDetokenizer(tokenizer, skip_special_tokens=params.skip_special_tokens,
                                            context_ids=prompt_ids)
        self.checker = StopChecker(params, eos_token_ids)
        self.output_ids: list[int] = []
        self.text = ""  # output text so far, including what is held back
        self.num_sent = 0  # chars of `text` already returned
        self.finish_reason: FinishReason | None = None

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def append(self, token_id: int) -> str:
        """Add one generated token; return the newly streamable text."""
        if self.finish_reason is not None:
            raise RuntimeError("TextStream.append after the request finished")
        self.output_ids.append(token_id)
        n = len(self.output_ids)
        keep = self.checker.params.no_stop_trim
        reason = self.checker.check_token(token_id, n)
        if reason is not None:  # the stop token's own text is not output (unless no_stop_trim)
            self.text += (self.detok.append(token_id) if keep else "") + self.detok.flush()
        else:
            length = self.checker.check_length(n)
            new = self.detok.append(token_id) + (self.detok.flush() if length else "")
            self.text += new
            hit = self.checker.find_stop_str(self.text, len(new), n)
            pattern = None if hit is not None else self.checker.find_stop_regex(new, n)
            if hit is not None:
                self.text = self.text[: hit[0] + (len(hit[1]) if keep else 0)]
                reason = FinishReason.stop(hit[1])
            elif pattern is not None:  # NOTE: SGLang keeps the text a stop_regex matched
                reason = FinishReason.stop(pattern)
            else:
                reason = length
        if reason is not None:
            return self.finish(reason)
        safe = len(self.text) - self.checker.holdback(self.text)
        return self._take(safe)

    def finish(self, reason: FinishReason) -> str:
        """End the request (also for aborts); return all text not yet streamed."""
        if self.finish_reason is None:
            self.finish_reason = reason
            if reason.type == "abort":
                self.text += self.detok.flush()
        return self._take(len(self.text))

    def _take(self, end: int) -> str:
        # NOTE: holdback guarantees a stop string never starts before num_sent.
        delta = self.text[self.num_sent : end] if end > self.num_sent else ""
        self.num_sent = max(self.num_sent, end)
        return delta
