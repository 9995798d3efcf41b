"""RequestOutput: one request's output as it is assembled, step by step, and delivered.

Owns the text stream (detokenizer + stop rules), the output logprobs and the delivery target
(a chunk queue for iterators, a callback, or neither when the caller waits for the final
output). The engine calls ``on_token`` once per sampled token and ``finalize`` once at the end.
"""
from __future__ import annotations

import logging
import queue
from typing import Callable, Sequence

from ..sampling.sampling_params import SamplingParams
from ..sampling.sampling_state import ConstraintCursor
from ..sampling.token_result import TokenResult
from .detokenizer import Decoder
from .outputs import GenerateOutput, StreamChunk
from .stop_checker import FinishReason
from .text_stream import TextStream

log = logging.getLogger(__name__)


class RequestOutput:
    """Per-request output state (``Req.output``)."""

    __slots__ = ("rid", "prompt_ids", "num_prompt_tokens", "stream", "logprobs", "top_logprobs", "queue", "callback",
                 "abort_message", "failed", "pending", "new_stream")

    def __init__(self, rid: str, tokenizer: Decoder, params: SamplingParams, eos_token_ids: Sequence[int],
                 prompt_ids: Sequence[int], *, stream: bool = False,
                 callback: Callable[[StreamChunk], None] | None = None) -> None:
        self.rid = rid
        self.prompt_ids = prompt_ids
        self.num_prompt_tokens = len(prompt_ids)
        self.new_stream = lambda: TextStream(tokenizer, params, eos_token_ids, prompt_ids=prompt_ids)
        self.stream = self.new_stream()
        self.logprobs: list[float] | None = [] if params.return_logprob else None
        self.top_logprobs: list | None = [] if params.return_logprob and params.top_logprobs_num else None
        self.queue: queue.SimpleQueue | None = queue.SimpleQueue() if stream else None
        self.callback = callback
        self.abort_message = "aborted"
        self.failed = False  # the engine could not run this request: it ends as an abort
        self.pending = ""  # text of the step that finished the request, sent with the final chunk

    @property
    def keeps_result(self) -> bool:
        """True when nobody consumes chunks, so the final output waits for ``Engine.wait``."""
        return self.queue is None and self.callback is None

    def fail(self, message: str) -> None:
        """The request ends as an abort with `message` (engine or constraint error)."""
        self.abort_message, self.failed = message, True

    def on_token(self, res: TokenResult, cursor: ConstraintCursor | None) -> str | None:
        """Take one sampled token; return the finish type ("stop"/"length"/"abort") or None."""
        if res.error is not None:  # NOTE: its token is meaningless; it never reaches the text
            self.fail(res.error)
            return "abort"
        s = self.stream
        text = s.append(res.token_id)
        if cursor is not None and not s.finished:
            cursor.advance(res.token_id)
            if cursor.is_finished():
                text += s.finish(FinishReason.stop(res.token_id))
        if self.logprobs is not None:
            self.logprobs.append(res.logprob)
            if self.top_logprobs is not None:
                self.top_logprobs.append(res.top)
        if s.finished:
            self.pending = text
            return s.finish_reason.type
        if self.queue is not None or self.callback is not None:
            self._deliver(StreamChunk(self.rid, text, [res.token_id], _last(self.logprobs), _last(self.top_logprobs)))
        return None

    def on_jump(self, start: int, token_ids: Sequence[int], completes: bool) -> str | None:
        """Jump-forward: output tokens ``[start:]`` become ``token_ids`` (the retokenized tail
        plus the forced text, all unsampled: their logprobs are None). ``completes``: the
        constraint is then complete. Returns the finish type when the request ended, else None.

        NOTE: the new tokens spell the old text plus the forced text, so text already streamed
        stays a prefix of the output; only the token ids of earlier chunks may be superseded.
        """
        s = self.stream
        if start == len(s.output_ids):  # only appends: feed the new tokens
            text = "".join(s.append(t) for t in token_ids if not s.finished)
        else:  # the tail changed: replay the output into a fresh stream (O(output))
            fresh = self.new_stream()
            for t in s.output_ids[:start] + list(token_ids):
                if fresh.finished:
                    break
                fresh.append(t)
            # NOTE: the first num_sent chars are identical in both streams (same bytes, no stop
            # string before them), so the client's text continues from there.
            end = len(fresh.text) if fresh.finished else len(fresh.text) - fresh.checker.holdback(fresh.text)
            text = fresh.text[s.num_sent:end]
            fresh.num_sent = max(s.num_sent, end)
            self.stream = s = fresh
        for items in (self.logprobs, self.top_logprobs):
            if items is not None:
                del items[start:]
                items.extend([None] * len(token_ids))
        if completes and not s.finished:
            text += s.finish(FinishReason.stop(token_ids[-1] if token_ids else s.output_ids[-1]))
        if s.finished:
            self.pending = text
            return s.finish_reason.type
        if self.queue is not None or self.callback is not None:
            none = [None] * len(token_ids)
            self._deliver(StreamChunk(self.rid, text, list(token_ids), none if self.logprobs is not None else None,
                                      none if self.top_logprobs is not None else None))
        return None

    def finalize(self, *, aborted: bool, cached_tokens: int,
                 prompt_logprobs: list[float | None] | None) -> GenerateOutput:
        """Build the final output (ending the stream if the scheduler ended the request) and send
        the last chunk. ``aborted``: the scheduler finished the request as an abort;
        ``cached_tokens``: its prompt tokens served from the cache (``Req.cached_tokens``)."""
        s = self.stream
        if s.finish_reason is None:  # ended by the scheduler: abort, length, or prefill only
            reason = (FinishReason.abort(self.abort_message) if aborted or self.failed
                      else FinishReason.of_length(len(s.output_ids)))
            tail, new_ids, lp, top = s.finish(reason), [], None, None
        else:  # finished while taking its last token: that token's chunk goes out now
            tail, new_ids = self.pending, s.output_ids[-1:]
            lp, top = _last(self.logprobs), _last(self.top_logprobs)
        out = GenerateOutput(
            rid=self.rid, text=s.text, token_ids=list(s.output_ids), finish_reason=s.finish_reason.to_dict(),
            prompt_tokens=self.num_prompt_tokens, completion_tokens=len(s.output_ids),
            cached_tokens=cached_tokens, output_logprobs=self.logprobs,
            output_top_logprobs=self.top_logprobs, input_logprobs=prompt_logprobs,
            input_token_ids=None if prompt_logprobs is None
            else list(self.prompt_ids[len(self.prompt_ids) - len(prompt_logprobs):]),
        )
        self._deliver(StreamChunk(self.rid, tail, new_ids, lp, top, finished=True, output=out))
        return out

    def _deliver(self, chunk: StreamChunk) -> None:
        if self.queue is not None:
            self.queue.put(chunk)
        if self.callback is not None:
            try:
                self.callback(chunk)
            except Exception:  # a broken consumer must not take the engine down
                log.exception("stream callback of request %s failed", chunk.rid)


def _last(items: list | None) -> list | None:
    return items[-1:] if items is not None else None
