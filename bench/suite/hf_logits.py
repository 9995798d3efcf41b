"""Per-call decoding state for the Hugging Face baseline: our stop rules and constraints inside
``model.generate``.

One :class:`CallDecoding` follows one ``generate`` call. It feeds every new token through the
runtime's own :class:`~sglc_runtime.output.text_stream.TextStream` (detokenizer + stop checker) and,
for a constrained gen, through a :class:`~sglc_runtime.constrained.ConstraintState`, so the text,
the finish reason and where the output ends are decided exactly as the engine decides them.
It is plugged into transformers twice:

- :meth:`CallDecoding.logits_processor`: penalties (the runtime's ``PenaltyBatch``) and the
  constraint's allowed-token mask for the next token, token by token (no jump-forward);
- :meth:`CallDecoding.stopping_criteria`: stop once the stream is finished (eos unless
  ignore_eos, stop token ids, stop strings, a completed constraint, the length limit).

NOTE: HF's own eos handling must be off (``eos_token_id=None``): stopping is decided here only,
and ignore_eos means "do not stop at eos", never "ban eos" (the engine does not ban it either).
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

import torch
from transformers import LogitsProcessor, StoppingCriteria

from sglc_runtime.output.stop_checker import FinishReason
from sglc_runtime.output.text_stream import TextStream
from sglc_runtime.sampling.penalties import PenaltyBatch
from sglc_runtime.sampling.sampler import apply_masks
from sglc_runtime.sampling.sampling_params import SamplingParams


class ConstraintAbort(RuntimeError):
    """The constraint allowed no next token (the engine aborts such a request too)."""


class CallDecoding:
    """The output of one generate call as it grows (batch size 1).

    ``sync(input_ids)`` takes the tokens appended since the last call; both hooks call it, so
    the state is current whichever transformers runs first.
    """

    def __init__(self, tokenizer: Any, params: SamplingParams, eos_token_ids: Sequence[int],
                 prompt_ids: Sequence[int], grammar: Any = None) -> None:
        self.params = params
        self.prompt_len = len(prompt_ids)
        self.stream = TextStream(tokenizer, params, eos_token_ids, prompt_ids=prompt_ids)
        self.cursor = grammar.new_cursor() if grammar is not None else None
        if self.cursor is not None and self.cursor.is_finished():
            # NOTE: a constraint complete before any token (e.g. regex "") ends the call at once.
            self.stream.finish(FinishReason.stop(-1))

    # --- state ---------------------------------------------------------------------------
    @property
    def finished(self) -> bool:
        return self.stream.finished

    @property
    def output_ids(self) -> list[int]:
        return self.stream.output_ids

    def sync(self, input_ids: torch.Tensor) -> None:
        """Feed the tokens of ``input_ids[0]`` past the prompt that were not seen yet."""
        seen = self.prompt_len + len(self.stream.output_ids)
        for token in input_ids[0, seen:].tolist():
            if self.stream.finished:  # NOTE: cannot happen: the criteria stop at the finishing token
                break
            self.stream.append(token)
            if self.cursor is not None and not self.stream.finished:
                self.cursor.advance(token)  # the mask allowed it, so this never raises
                if self.cursor.is_finished():
                    self.stream.finish(FinishReason.stop(token))

    def result(self) -> tuple[str, dict]:
        """(text, finish reason dict) once generate has returned."""
        if not self.stream.finished:  # generate ran out of max_new_tokens before our checker saw it
            self.stream.finish(FinishReason.of_length(len(self.stream.output_ids)))
        return self.stream.text, self.stream.finish_reason.to_dict()

    # --- transformers hooks ----------------------------------------------------------------
    def logits_processor(self) -> Optional[LogitsProcessor]:
        """The processor for this call; None when the logits need no change (no penalty, no
        constraint), so a plain greedy call runs HF's generate untouched."""
        if self.cursor is None and not self.params.has_penalties:
            return None
        return _Processor(self)

    def stopping_criteria(self) -> StoppingCriteria:
        return _Criteria(self)


class _Processor(LogitsProcessor):
    def __init__(self, call: CallDecoding) -> None:
        self.call = call

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        call = self.call
        call.sync(input_ids)
        scores = scores.clone()
        if call.params.has_penalties:
            penalties = PenaltyBatch.build([call.params], [call.output_ids], scores.shape[1], scores.device)
            if penalties is not None:
                penalties.apply(scores)
        if call.cursor is not None and not call.finished:
            try:
                apply_masks(scores, [call.cursor.allowed_mask()])
            except ValueError:
                raise ConstraintAbort("constraint error: the constraint allows no next token "
                                      f"after {len(call.output_ids)} tokens") from None
        return scores


class _Criteria(StoppingCriteria):
    def __init__(self, call: CallDecoding) -> None:
        self.call = call

    def __call__(self, input_ids: torch.LongTensor, scores: Any, **kwargs: Any) -> torch.BoolTensor:
        self.call.sync(input_ids)
        return torch.full((input_ids.shape[0],), self.call.finished, dtype=torch.bool, device=input_ids.device)
