"""SGLang's ``meta_info`` for one /generate answer (or stream chunk), built from our outputs.

Shapes follow SGLang's tokenizer manager: logprobs are triples ``[logprob, token_id, text]``
(text only with ``return_text_in_logprobs``, else None); top logprobs are one list of such
triples per position. Where we differ from SGLang, on purpose:

- ``input_token_logprobs[0]`` holds the real logprob of the token at ``logprob_start_len`` when
  that is > 0 (SGLang always puts None first). SGLang's own ``select`` client subtracts that
  entry or averages it (``greedy_token_selection``), which fails on None; position 0 has no
  context, so it stays None.
- a token appended by jump-forward (forced by a regex / JSON constraint, never sampled) has
  logprob None in ``output_token_logprobs`` and None as its ``output_top_logprobs`` row.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

__all__ = ["LogprobOptions", "final_meta", "partial_meta"]


@dataclass(frozen=True)
class LogprobOptions:
    """What one prompt asked for: return_logprob, top_logprobs_num, return_text_in_logprobs."""

    enabled: bool = False
    top: int = 0
    with_text: bool = False


def _triples(values: Sequence[float | None], ids: Sequence[int], text: Callable[[int], str] | None) -> list[list]:
    return [[None if v is None else float(v), int(t), text(t) if text else None] for v, t in zip(values, ids)]


def _top_rows(rows: Sequence[Any] | None, text: Callable[[int], str] | None) -> list:
    return [None if row is None else [[float(v), int(t), text(t) if text else None] for t, v in row]
            for row in rows or ()]


def final_meta(out: Any, rid: str, opts: LogprobOptions, decode_one: Callable[[int], str], *,
               e2e_latency: float, warnings: Sequence[str] = ()) -> dict[str, Any]:
    """meta_info of a finished request (engine GenerateOutput `out`)."""
    meta: dict[str, Any] = {
        "id": rid, "finish_reason": out.finish_reason, "prompt_tokens": out.prompt_tokens,
        "completion_tokens": out.completion_tokens, "cached_tokens": out.cached_tokens,
        "e2e_latency": e2e_latency,
    }
    if warnings:
        meta["warnings"] = list(warnings)
    if opts.enabled:
        text = decode_one if opts.with_text else None
        meta["input_token_logprobs"] = _triples(out.input_logprobs or [], out.input_token_ids or [], text)
        meta["output_token_logprobs"] = _triples(out.output_logprobs or [], out.token_ids, text)
        if opts.top > 0:
            meta["input_top_logprobs"] = []  # NOTE: refused at the request when input logprobs are asked
            meta["output_top_logprobs"] = _top_rows(out.output_top_logprobs, text)
    return meta


def partial_meta(rid: str, completion_tokens: int, opts: LogprobOptions, decode_one: Callable[[int], str],
                 ids: Sequence[int], logprobs: Sequence[float | None] | None, tops: Sequence[Any] | None,
                 e2e_latency: float) -> dict[str, Any]:
    """meta_info of a stream chunk before the end (finish_reason None; logprobs so far)."""
    meta: dict[str, Any] = {"id": rid, "finish_reason": None, "completion_tokens": completion_tokens,
                            "e2e_latency": e2e_latency}
    if opts.enabled:
        text = decode_one if opts.with_text else None
        meta["output_token_logprobs"] = _triples(logprobs or [], ids, text)
        if opts.top > 0:
            meta["output_top_logprobs"] = _top_rows(tops, text)
    return meta
