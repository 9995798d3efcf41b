"""The optimal prefix-cache hit rate of a workload, from its request trace (SGLang paper, Thm 3.1).

The paper's Theorem 3.1: for a batch of requests, visiting the radix tree of the requests in
depth-first order with a cache at least as large as the longest request achieves the optimal
cache hit rate, because every tree node's KV is then computed exactly once. Our adaptation to
this engine's accounting (``EngineStats.cached_tokens``: prompt tokens served from the cache at
a request's first admission):

- Build a trie over all requests' prompt token sequences; a node ``v`` is a prompt prefix, one
  prompt token position. ``min_computed`` sums, over the nodes, how often ``v``'s KV must be
  computed at least:

  * ``e(v)`` times if ``e(v) >= 1`` requests END at ``v``: every request computes its own last
    prompt token, because admission matches ``fill[:-1]`` (the model needs >= 1 fed token for
    the next-token logits). A request that already had output tokens when first admitted (text
    a constraint forced at submit, ``forced_tokens > 0``) does not count in ``e(v)``;
  * otherwise 0 times if some request's DECODE produced ``v``'s KV: ``v`` is a prefix of
    ``P_j + O_j`` of length in ``(len(P_j), len(P_j) + len(O_j) - 1]`` (a generated token
    whose KV was computed by a later decode step; the final output token never gets KV). This
    is what makes multi-turn follow-ups (prompt = earlier prompt + its output + new text)
    cacheable;
  * otherwise once.

- ``optimal_hit_rate = 1 - min_computed / sum(len(P_i))``.

Why it bounds the engine: a request gets position ``v`` from the cache only if ``v``'s KV was
computed before, by a prefill (counted above) or a decode (free here), so the requests covering
``v`` that do NOT compute it are at most ``covering(v) - cost(v)``. Caveats: KV produced by
requests outside the trace (aborted ones, or before tracing began without a cache flush) or by
output tokens a jump-forward later rewrote is not seen here, and can let the achieved rate
exceed this bound.

Cost: one dict lookup per prompt token and per decoded token (a dict-of-dicts trie), about
0.1 s per 10^5 tokens in CPython.
"""
from __future__ import annotations

from typing import Any, Iterable, NamedTuple, Sequence

# Trie nodes are dicts {token_id: child}; negative keys (never token ids) hold the node's marks.
_ENDS = -1  # number of requests whose admission ends at this node
_DECODED = -2  # present when some request's decode produced this node's KV


class HitRateBound(NamedTuple):
    """The best any schedule could do on a trace: prompt tokens, the least of them that must be
    computed, and ``optimal_hit_rate = 1 - min_computed_tokens / prompt_tokens`` (0.0 when empty)."""

    prompt_tokens: int
    min_computed_tokens: int
    optimal_hit_rate: float


def optimal_hit_rate(requests: Iterable[Any]) -> HitRateBound:
    """The Theorem 3.1 bound of a trace (see the module docstring).

    ``requests``: objects with ``prompt_ids`` and ``output_ids`` (token id sequences) and an
    optional ``forced_tokens`` (default 0), e.g. ``sglc_runtime.engine.request_trace.TracedRequest``.
    Raises ValueError for a request with an empty prompt.
    """
    reqs = list(requests)
    root: dict = {}
    num_nodes = num_end_nodes = num_ending = prompt_tokens = 0
    ends: list[dict] = []
    for r in reqs:
        prompt: Sequence[int] = r.prompt_ids
        if len(prompt) == 0:
            raise ValueError(f"optimal_hit_rate: request {getattr(r, 'rid', '?')!r} has an empty prompt")
        prompt_tokens += len(prompt)
        node = root
        for t in prompt:
            child = node.get(t)
            if child is None:
                child = node[t] = {}
                num_nodes += 1
            node = child
        ends.append(node)
        if getattr(r, "forced_tokens", 0) == 0:
            num_ending += 1
            if _ENDS not in node:
                node[_ENDS] = 0
                num_end_nodes += 1
            node[_ENDS] += 1
    # Prompt nodes (no request ends there) whose KV some request's decode produced.
    num_free = 0
    for r, node in zip(reqs, ends):
        for t in r.output_ids[:-1]:
            node = node.get(t)
            if node is None:
                break
            if _DECODED not in node:
                node[_DECODED] = True
                if _ENDS not in node:
                    num_free += 1
    # sum_v cost(v) = sum of e(v) over end nodes + (other nodes) - (other nodes decoded)
    min_computed = num_ending + (num_nodes - num_end_nodes) - num_free
    rate = (prompt_tokens - min_computed) / prompt_tokens if prompt_tokens else 0.0
    return HitRateBound(prompt_tokens, min_computed, rate)


def achieved_hit_rate(requests: Iterable[Any]) -> float:
    """sum(cached_tokens) / sum(len(prompt_ids)) over a trace (0.0 when it has no prompt tokens):
    the same ratio as ``EngineStats.cache_hit_rate`` over the traced requests."""
    prompt = cached = 0
    for r in requests:
        prompt += len(r.prompt_ids)
        cached += r.cached_tokens
    return cached / prompt if prompt else 0.0
