"""ModelRunner: turns the scheduler's plan into a forward pass, samples, computes logprobs.

No policy here: which requests run, with how many tokens, into which slots, is decided by the
scheduler. The runner builds the ``ForwardBatch``, runs the model, samples one token per entry
that samples, and returns logprobs where requests asked for them.

Prompt logprobs need the logits of prompt positions. Positions the radix cache served were not
computed in this step, so their rows are recomputed in a side pass that reads the cached K/V
and writes its own K/V into scratch slots reserved past the scheduler's pool (shared slots are
never written twice).
"""
from __future__ import annotations

import torch

from ..cache.kv_buffer import KVBuffer
from ..sampling.logprobs import token_logprobs, top_logprobs
from ..sampling.mask_liveness import MaskLiveness
from ..sampling.sampler import Sampler, SamplingBatch
from ..sampling.token_result import TokenResult
from ..scheduling.request import Req
from ..scheduling.schedule_batch import ScheduleBatch, ScheduledReq
from .cuda_graph import DecodeGraphs
from .forward_batch import ForwardBatch


class ModelRunner:
    """Runs one ``ScheduleBatch``: forward, prompt logprobs, sampling, output logprobs."""

    def __init__(self, model, kv_buffer: KVBuffer, sampler: Sampler, *, num_pool_slots: int,
                 eos_token_ids: tuple[int, ...] = (), graphs: DecodeGraphs | None = None) -> None:
        """``graphs``: run the decode batches it accepts through CUDA graphs (``cuda_graph.py``)."""
        self.model = model
        self.graphs = graphs
        self.kv_buffer = kv_buffer
        self.sampler = sampler
        self.vocab_size = model.config.vocab_size
        self.eos_token_ids = eos_token_ids
        self.device = model.device
        self.mask_liveness = MaskLiveness(self.vocab_size, self.device)
        # NOTE: slots [num_pool_slots, kv_buffer.num_slots) are never handed out by the pool.
        self.scratch = torch.arange(num_pool_slots, kv_buffer.num_slots, dtype=torch.long)
        if self.scratch.numel() < 1:
            raise ValueError("ModelRunner: the KV buffer needs >= 1 scratch slot past the pool")

    def run(self, batch: ScheduleBatch) -> list[TokenResult | None]:
        """Forward + sample. Returns, per entry, its TokenResult or None (entry does not sample).

        Prompt logprobs are appended to ``req.sampling_state.prompt_logprobs``.
        """
        entries = batch.reqs
        for e in entries:  # side pass first: it reads cached K/V of positions before this step
            self._recompute_skipped(e.req, e.prefix_len, e.kv_indices)
        starts = [self._logits_start(e.req, e.prefix_len, e.extend_len) for e in entries]
        fb = ForwardBatch(
            input_ids=torch.tensor(batch.input_ids, dtype=torch.long, device=self.device),
            positions=torch.tensor(batch.positions, dtype=torch.long, device=self.device),
            out_cache_loc=batch.out_cache_loc.to(self.device),
            extend_lens=batch.extend_lens,
            prefix_lens=batch.prefix_lens,
            kv_indices=self._to_device(batch.kv_indices),
            logits_start=starts,
        )
        if self.graphs is not None and self.graphs.can_run(fb):
            logits = self.graphs.forward(fb)
        else:
            logits = self.model.forward(fb, self.kv_buffer)
        last_rows: list[int] = []
        row = 0
        for e, s in zip(entries, starts):
            n = e.extend_len - s
            if e.req.sampling_state.wants_prompt_rows:
                self._take_prompt_logprobs(e.req, logits[row : row + n], e.prefix_len + s)
            row += n
            last_rows.append(row - 1)
        return self._sample(entries, logits, last_rows)

    def _to_device(self, kv_indices: list[torch.Tensor]) -> list[torch.Tensor]:
        """Per-request slot lists on the model's device: one copy of their concatenation (on a
        GPU, one transfer instead of one per request), split back into views."""
        if self.device.type == "cpu" or not kv_indices:
            return list(kv_indices)
        flat = torch.cat(kv_indices).to(self.device)
        return list(flat.split([k.numel() for k in kv_indices]))

    # --- sampling ------------------------------------------------------------------------------
    def _sample(self, entries: list[ScheduledReq], logits: torch.Tensor,
                last_rows: list[int]) -> list[TokenResult | None]:
        """Sample the entries that sample from their last logits row; add output logprobs."""
        sampling = [i for i, e in enumerate(entries) if e.samples and e.req.max_new_tokens > 0]
        out: list[TokenResult | None] = [None] * len(entries)
        if not sampling:
            return out
        idx = [last_rows[i] for i in sampling]
        rows = logits if len(idx) == logits.shape[0] else logits[torch.tensor(idx, device=logits.device)]
        reqs = [entries[i].req for i in sampling]
        errors: dict[int, str] = {}
        tokens = self.sampler(rows, self._sampling_batch(reqs, errors)).tolist()
        lps = tops = None
        want = [r.sampling_params.return_logprob for r in reqs]
        if any(want):
            lps = token_logprobs(rows, torch.tensor(tokens, device=rows.device)).tolist()
            k = max(r.sampling_params.top_logprobs_num if w else 0 for r, w in zip(reqs, want))
            if k:
                vals, ids = top_logprobs(rows, k)
                tops = list(zip(ids.tolist(), vals.tolist()))
        for j, i in enumerate(sampling):
            p = reqs[j].sampling_params
            top = None
            if tops is not None and want[j] and p.top_logprobs_num:
                ids_j, vals_j = tops[j]
                top = list(zip(ids_j[: p.top_logprobs_num], vals_j[: p.top_logprobs_num]))
            out[i] = TokenResult(tokens[j], lps[j] if lps is not None and want[j] else None, top, errors.get(j))
        return out

    def _sampling_batch(self, reqs: list[Req], errors: dict[int, str]) -> SamplingBatch:
        """Sampling inputs of `reqs`; rows whose constraint allows no token go into `errors`."""
        states = [r.sampling_state for r in reqs]
        gens = [s.generator for s in states]
        masks = None
        if any(s.cursor is not None for s in states):
            masks = [s.cursor.allowed_mask() if s.cursor is not None else None for s in states]
            rows = [j for j, m in enumerate(masks) if m is not None and m.dtype == torch.bool]
            if rows:
                for j, ok in zip(rows, self.mask_liveness.allow_some([masks[j] for j in rows])):
                    if not ok:
                        errors[j], masks[j] = "constraint error: the constraint allows no next token", None
        return SamplingBatch.build(
            [r.sampling_params for r in reqs], self.vocab_size,
            output_ids=[r.output_ids for r in reqs], generators=gens, masks=masks, masks_checked=True,
            eos_token_ids=self.eos_token_ids, device=self.device,
        )

    # --- prompt logprobs -----------------------------------------------------------------------
    @staticmethod
    def _logits_start(req: Req, prefix_len: int, extend_len: int) -> int:
        """First row of this entry to return: the last one, or earlier for prompt logprobs."""
        st = req.sampling_state
        if not st.wants_prompt_rows:
            return extend_len - 1
        return min(max(st.logprob_next - prefix_len, 0), extend_len - 1)

    def _take_prompt_logprobs(self, req: Req, rows: torch.Tensor, first_pos: int) -> None:
        """Rows are positions first_pos.. ; keep those in [logprob_next, logprob_end)."""
        st = req.sampling_state
        lo, hi = max(st.logprob_next, first_pos), min(st.logprob_end, first_pos + rows.shape[0])
        if lo >= hi or lo != st.logprob_next:
            return
        targets = torch.tensor(req.fill_ids[lo + 1 : hi + 1], dtype=torch.long, device=rows.device)
        st.prompt_logprobs.extend(token_logprobs(rows[lo - first_pos : hi - first_pos], targets).tolist())
        st.logprob_next = hi

    def _recompute_skipped(self, req: Req, prefix_len: int, kv_indices: torch.Tensor) -> None:
        """Logits rows of positions [logprob_next, prefix_len) that the cache skipped."""
        st = req.sampling_state
        if st.logprob_next >= min(prefix_len, st.logprob_end):
            return
        fill = req.fill_ids
        end = min(prefix_len, st.logprob_end)
        step = self.scratch.numel()
        for a in range(st.logprob_next, end, step):
            b = min(a + step, end)
            # NOTE: earlier positions' K/V are read from the cache; this pass writes only scratch.
            kv = torch.cat([kv_indices[:a], self.scratch[: b - a]]).to(self.device)
            fb = ForwardBatch(
                input_ids=torch.tensor(fill[a:b], dtype=torch.long, device=self.device),
                positions=torch.arange(a, b, dtype=torch.long, device=self.device),
                out_cache_loc=self.scratch[: b - a].to(self.device),
                extend_lens=[b - a], prefix_lens=[a], kv_indices=[kv], logits_start=[0],
            )
            self._take_prompt_logprobs(req, self.model.forward(fb, self.kv_buffer), a)
