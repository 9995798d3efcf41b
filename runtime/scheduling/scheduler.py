"""Scheduler: continuous batching over a radix cache (policy only; it never runs the model).

One step is ``batch = schedule()``, the model runner runs ``batch``, then
``process_results(batch, next_token_ids)``. ``schedule`` plans, in order:
    1. decodes: every running request whose prefill is done feeds its pending token(s); when the
       pool cannot hold them even after evicting the cache, the youngest running requests are
       retracted (their KV goes into the cache, they go back to the front of the queue);
    2. the next chunk of a partially prefilled request; while one is in progress, waiting
       requests that fit whole into half the prefill-token budget are admitted beside it first
       (a short request never waits for every chunk of a long prompt; the long one keeps at
       least half of each step);
    3. new admissions in policy order, while the prefill-token budget, the table rows and the KV
       budget (free + evictable slots minus the estimated future growth of running requests)
       allow; a prompt longer than the remaining budget is chunked.
Program hints (issue 28): calls of programs already in flight are admitted first, in program
start order (program_table.py); while anything runs, a call may not count as room the texts live
hints keep for programs older than its own (a call that starts a program, or carries no hint,
counts none of them): older programs finish before younger ones take their memory; and a call
that would start a program waits while the in-flight programs' expected footprints would not
leave it room (program_table.py), unless nothing runs: then it starts *provisional*, on memory
no committed program's texts hold, and is promoted when room frees. The cache evicts by the
hints (cache/retention.py). The rules are asked through program_gate.py, as the torch-free engine asks them.
The prefill-token budget (``SchedulerConfig.prefill_budget``) bounds the prefill tokens of every
step, so with chunking on no request holds the engine for longer than one chunk.
Not thread-safe: call everything from the engine's thread.
"""
from __future__ import annotations

from typing import Sequence

import torch

from ..cache.kv_pool import KVSlotPool
from ..cache.radix_cache import RadixCache
from ..cache.req_slot_table import ReqSlotTable
from .decode_growth import DecodeGrowthEstimator
from . import program_gate
from .program_gate import ProgramGate, Start
from .program_table import ProgramTable
from .request import Req, ReqStatus
from .schedule_batch import ScheduleBatch, ScheduledReq
from .schedule_policy import InBatchPrefixDedup, SchedulePolicy
from .scheduler_config import SchedulerConfig
from .scheduler_stats import SchedulerStats


class Scheduler:
    """Owns the waiting queue, the running set, the slot pool, the request table and the cache."""

    def __init__(self, config: SchedulerConfig):
        self.config = cfg = config
        self.pool = KVSlotPool(cfg.num_kv_slots, debug=cfg.debug)
        self.table = ReqSlotTable(cfg.max_running, cfg.max_context)
        self.tree_cache = RadixCache(self.pool, disable=cfg.disable_radix_cache, hinted_share=cfg.hinted_share)
        self.programs = ProgramTable()
        self.policy = SchedulePolicy(cfg.policy, self.tree_cache, cfg.seed, cfg.lpm_max_queue)
        self.growth = DecodeGrowthEstimator(
            cfg.init_new_token_ratio, cfg.min_new_token_ratio, cfg.new_token_ratio_decay
        )
        self.waiting: list[Req] = []
        self.running: list[Req] = []
        self._live: dict[str, Req] = {}
        self._inflight: ScheduleBatch | None = None
        self._abort_after_step: set[str] = set()
        self._next_arrival = 0
        self._counts = dict(finished=0, prompt=0, cached=0, prefill=0, decode=0, retract=0, steps=0)

    # --- requests in and out ---------------------------------------------------------------
    def add_request(self, req: Req) -> None:
        """Queue a new request; raises ValueError if it could never fit."""
        cfg = self.config
        if req.rid in self._live:
            raise ValueError(f"request id {req.rid!r} is already queued or running")
        need = len(req.origin_input_ids) + max(req.max_new_tokens, 1)
        if need > cfg.max_context or need > cfg.num_kv_slots:
            raise ValueError(
                f"request {req.rid!r}: prompt ({len(req.origin_input_ids)}) + max_new_tokens "
                f"({req.max_new_tokens}) = {need} tokens exceeds max_context ({cfg.max_context}) "
                f"or the KV pool ({cfg.num_kv_slots} slots)"
            )
        req.status, req.arrival = ReqStatus.WAITING, self._next_arrival
        self._next_arrival += 1
        self._live[req.rid] = req
        self.waiting.append(req)

    def abort(self, rid: str) -> bool:
        """Finish ``rid`` with reason "abort", releasing its slots; False if unknown/finished.
        A request in the batch in flight is finished at that batch's ``process_results``."""
        req = self._live.get(rid)
        if req is None:
            return False
        if req.status is ReqStatus.WAITING:
            self.waiting.remove(req)
            self._retire(req, "abort")
        elif self._in_flight(req):
            self._abort_after_step.add(rid)
        else:
            self.finish(req, "abort")
        return True

    def finish(self, req: Req, reason: str = "stop") -> None:
        """Finish a running request now (e.g. the engine found a stop string): its computed
        tokens go into the cache and its slots and row are released."""
        if req.status is not ReqStatus.RUNNING or self._in_flight(req):
            raise ValueError(f"finish({req}): needs a running request outside the batch in flight")
        self.tree_cache.cache_finished_req(req, self.table)
        self.running.remove(req)
        self._retire(req, reason)

    def rewrite_output(self, req: Req, output_ids: list[int]) -> None:
        """Replace a running request's generated tokens (e.g. jump-forward retokenization) and
        requeue it at the front: its computed KV stays in the cache, so the re-prefill reuses
        everything up to the first changed token. (To only APPEND tokens, extend
        ``req.output_ids`` between steps; the next step feeds them all.) Not while in flight."""
        if req.status is not ReqStatus.RUNNING or self._in_flight(req):
            raise ValueError(f"rewrite_output({req}): needs a running request outside the batch in flight")
        self.tree_cache.cache_finished_req(req, self.table)
        self.running.remove(req)
        req.reset_for_requeue()
        req.output_ids = list(output_ids)
        self.waiting.insert(0, req)

    def end_program(self, program_id: str) -> int:
        """A program ended: the texts the cache keeps for its hints lose them (evicted first from
        now on) and its later calls, if any, queue as a new program's. Returns the tokens released."""
        self.programs.end(program_id)
        return self.tree_cache.retention.end_program(program_id)

    @property
    def batch_in_flight(self) -> ScheduleBatch | None:
        """The batch schedule() returned whose process_results() has not run yet."""
        return self._inflight

    @property
    def _program_limit(self) -> float:
        """Tokens the in-flight programs' expected footprints may reach (program_gate.py)."""
        return self.config.num_kv_slots * self.config.program_admit_share

    def _in_flight(self, req: Req) -> bool:
        return self._inflight is not None and any(e.req is req for e in self._inflight.reqs)

    def _retire(self, req: Req, reason: str) -> None:
        req.status, req.finished_reason = ReqStatus.FINISHED, reason
        del self._live[req.rid]
        self._counts["finished"] += 1
        if reason != "abort":
            self.growth.on_finished(len(req.output_ids), min(req.max_new_tokens, self.config.clip_max_new_tokens))

    # --- one step ----------------------------------------------------------------------------
    def schedule(self) -> ScheduleBatch | None:
        """Plan the next step; None when there is nothing to run."""
        if self._inflight is not None:
            raise RuntimeError("Scheduler.schedule: process_results() of the previous batch is missing")
        program_gate.refresh(self.programs, self.tree_cache.retention, self.waiting, self._program_limit)
        decodes = self._schedule_decodes()
        prefills = self._schedule_prefills()
        if not decodes and not prefills:
            if self.running:  # NOTE: would spin forever; admission guarantees this never happens
                raise RuntimeError(f"Scheduler.schedule: running requests but nothing schedulable: {self.stats()}")
            return None
        if decodes:
            self.growth.on_decode_step()
        self._counts["steps"] += 1
        self._inflight = ScheduleBatch(prefills + decodes)
        self._debug_check()
        return self._inflight

    def process_results(
        self,
        batch: ScheduleBatch,
        next_token_ids: Sequence[int] | torch.Tensor,
        finish_reasons: Sequence[str | None] | None = None,
    ) -> list[Req]:
        """Append each sampling entry's token, finish requests that are done, cache the
        others' new prefixes. ``finish_reasons[i]`` (optional, e.g. "stop" from the engine's
        stop checks) finishes entry i. Returns the requests finished in this step."""
        if batch is not self._inflight:
            raise RuntimeError("Scheduler.process_results: not the batch returned by the last schedule()")
        if len(next_token_ids) != len(batch.reqs):
            raise ValueError(f"process_results: {len(next_token_ids)} token ids for {len(batch.reqs)} entries")
        if isinstance(next_token_ids, torch.Tensor):
            next_token_ids = next_token_ids.tolist()
        self._inflight = None
        finished: list[Req] = []
        for i, entry in enumerate(batch.reqs):
            req = entry.req
            if req.status is not ReqStatus.RUNNING:
                continue  # finished by the engine while the batch was in flight
            if not entry.samples:
                self.tree_cache.cache_unfinished_req(req, self.table)
                continue
            reason = None
            if req.max_new_tokens == 0:
                reason = "length"  # prefill only (scoring, cache hints): nothing is generated
            else:
                tok = int(next_token_ids[i])
                req.output_ids.append(tok)
                reason = (finish_reasons[i] if finish_reasons is not None else None) or self._stop_reason(req, tok)
            if reason is not None:
                self.finish(req, reason)
                finished.append(req)
            elif not req.prefill_done:
                req.prefill_done = True
                self.tree_cache.cache_unfinished_req(req, self.table)
        for rid in self._abort_after_step:
            req = self._live.get(rid)
            if req is not None and req.status is ReqStatus.RUNNING:
                self.finish(req, "abort")
                finished.append(req)
        self._abort_after_step.clear()
        self._debug_check()
        return finished

    def _stop_reason(self, req: Req, tok: int) -> str | None:
        if tok in self.config.eos_token_ids and not req.ignore_eos:
            return "stop"
        if len(req.output_ids) >= req.max_new_tokens:
            return "length"
        return None

    # --- planning ----------------------------------------------------------------------------
    def _make_room(self, n: int) -> bool:
        """Evict cache until ``n`` slots are free; False if even that is not enough."""
        short = n - self.pool.num_free
        if short > 0:
            self.tree_cache.evict(short)
        return self.pool.can_alloc(n)

    def _extend(self, req: Req, n: int) -> ScheduledReq:
        """Allocate ``n`` slots for ``req``'s next pending tokens (room already made)."""
        start = req.kv_len
        slots = self.pool.alloc(n)
        self.table.write(req.req_row, start, slots)
        req.kv_len = start + n
        req.extend_input_len = n
        return ScheduledReq(
            req, req.token_slice(start, start + n), start, slots, self.table.read(req.req_row, 0, start + n),
            samples=req.kv_len == req.seq_len, is_prefill=not req.prefill_done,
        )

    def _schedule_decodes(self) -> list[ScheduledReq]:
        decoding = [r for r in self.running if r.prefill_done]
        need = sum(r.seq_len for r in decoding) - sum(r.kv_len for r in decoding)
        while decoding and not self._make_room(need):
            victim = max(self.running, key=lambda r: r.arrival)  # the youngest
            if victim in decoding:
                decoding.remove(victim)
                need -= victim.num_pending
            self._retract(victim)
        single = [r for r in decoding if r.num_pending == 1]
        out = [self._extend(r, r.num_pending) for r in decoding if r.num_pending != 1]
        if single:  # NOTE: the common case, vectorized: one alloc and one table write
            slots = self.pool.alloc(len(single))
            rows = [r.req_row for r in single]
            cols = [r.kv_len for r in single]
            self.table.write_tokens(rows, cols, slots)
            for i, r in enumerate(single):
                r.kv_len, r.extend_input_len = cols[i] + 1, 1
                out.append(ScheduledReq(
                    r, [r.output_ids[-1]], cols[i], slots[i : i + 1],
                    self.table.read(rows[i], 0, cols[i] + 1), samples=True, is_prefill=False,
                ))
        self._counts["decode"] += len(out)
        return out

    def _retract(self, req: Req) -> None:
        """Give up ``req``'s slots (its computed tokens stay in the cache, unlocked) and put it
        back at the front of the queue; it resumes through the cache."""
        self.tree_cache.cache_finished_req(req, self.table)
        self.running.remove(req)
        req.reset_for_requeue()
        req.num_retractions += 1
        self.waiting.insert(0, req)
        self.growth.on_retract()
        self._counts["retract"] += 1

    def _reserved(self) -> int:
        """Slots running requests will still need: the rest of their prompt + decode growth."""
        clip = self.config.clip_max_new_tokens
        total = 0
        for r in self.running:
            remaining_new = min(r.max_new_tokens, clip) - len(r.output_ids)
            total += self.growth.estimate(remaining_new) + (0 if r.prefill_done else r.num_pending)
        return total

    def _schedule_prefills(self) -> list[ScheduledReq]:
        budget = self.config.prefill_budget
        dedup = InBatchPrefixDedup(self.config.in_batch_prefix_threshold) if self.policy.dedups_in_batch else None
        continuing = [r for r in self.running if not r.prefill_done]  # at most one in practice
        if dedup is not None:
            for req in continuing:
                dedup.add(req.fill_ids)
        # 1) beside a prompt that is being prefilled chunk by chunk, waiting requests that fit
        #    whole into half the budget go first: a short request never waits for all the chunks
        #    of a long one, and the long one still gets at least half of every step.
        lane: list[ScheduledReq] = []
        if continuing and self.waiting and budget // 2 > 0:
            lane = self._admit_waiting(budget // 2, dedup, whole_only=True)
        left = budget - sum(e.extend_len for e in lane)
        # 2) the next chunk of each partially prefilled request
        out: list[ScheduledReq] = []
        for req in continuing:
            n = min(req.num_pending, left)
            if n > 0 and not self._make_room(n):
                n = self.pool.num_free
            if n > 0:
                out.append(self._extend(req, n))
                left -= n
        out += lane
        # 3) admissions in policy order with what is left (the last one admitted may be chunked)
        if self.waiting and left > 0:
            out += self._admit_waiting(left, dedup, whole_only=False)
        self._counts["prefill"] += sum(e.extend_len for e in out)
        return out

    def _admit_waiting(self, budget: int, dedup: InBatchPrefixDedup | None, *,
                       whole_only: bool) -> list[ScheduledReq]:
        """Admit waiting requests in policy order while ``budget`` prefill tokens, the table rows
        and the KV budget allow. A prompt longer than what is left of ``budget`` is skipped when
        ``whole_only``; otherwise it is chunked (without chunking it waits for an empty step,
        unless it is the first)."""
        cfg, cache = self.config, self.tree_cache
        reserved = self._reserved()
        out: list[ScheduledReq] = []
        admitted: set[int] = set()
        gate = ProgramGate(self.programs, cache.retention, self._program_limit)
        for req in gate.order(self.waiting, self.policy.order):
            if budget <= 0 or not self.table.can_alloc_row() or len(self.running) >= cfg.max_running:
                break
            fill = req.fill_ids
            call_tokens = len(fill) + min(req.max_new_tokens, cfg.clip_max_new_tokens) - len(req.output_ids)
            start = Start.COMMITTED
            if gate.starts_program(req):
                start = gate.start_verdict(req, call_tokens - cache.peek_prefix_len(fill), busy=bool(self.running or out))
                if start is Start.HOLD:
                    continue
            match = cache.match_prefix(fill[: self._max_prefix_len(req, len(fill))])
            if dedup is not None and dedup.should_hold(fill, match.prefix_len):
                continue
            extend = len(fill) - match.prefix_len
            n = extend
            if extend > budget:
                if whole_only:
                    continue
                if cfg.chunk_size is not None:
                    n = budget
                elif out:
                    break  # NOTE: without chunking a long prompt waits for an empty step
            cache.inc_lock(match.last_node)
            need = extend + self.growth.estimate(min(req.max_new_tokens, cfg.clip_max_new_tokens) - len(req.output_ids))
            room = self.pool.num_free + cache.evictable_size() - reserved
            provisional = start is Start.PROVISIONAL or self.programs.is_provisional(req)
            room -= gate.held_room(req, provisional=provisional, need=need, room=room, busy=bool(self.running or out))
            if need > room or not self._make_room(n):
                cache.dec_lock(match.last_node)
                break
            self._admit(req, match)
            gate.admitted(req, call_tokens, match.prefix_len, start=start)
            out.append(self._extend(req, n))
            reserved += need - n
            budget -= n
            admitted.add(id(req))
            if dedup is not None:
                dedup.add(fill)
        if admitted:
            self.waiting = [r for r in self.waiting if id(r) not in admitted]
        return out

    @staticmethod
    def _max_prefix_len(req: Req, fill_len: int) -> int:
        """How much of ``fill_ids`` the cache may serve at admission.

        NOTE: >= 1 token is always fed, for logits. A request that wants prompt logprobs is fed
        from the first position whose logits row it needs: cached positions have no logits, and
        recomputing them later is one extra model pass per request (select would pay it for
        every choice).
        """
        limit = fill_len - 1
        p = req.sampling_params
        if p.return_logprob and p.logprob_start_len >= 0:
            first_row = min(p.logprob_start_len, len(req.origin_input_ids) - 1) - 1
            limit = min(limit, max(first_row, 0))
        return limit

    def _admit(self, req: Req, match) -> None:
        req.req_row = self.table.alloc_row()
        self.table.write(req.req_row, 0, match.slots)
        req.prefix_indices, req.last_node = match.slots, match.last_node
        req.kv_len, req.prefill_done, req.status = match.prefix_len, False, ReqStatus.RUNNING
        self.running.append(req)
        req.num_admissions += 1
        if req.num_admissions == 1 and not req.internal:
            req.cached_tokens = min(match.prefix_len, len(req.origin_input_ids))
            self._counts["prompt"] += len(req.origin_input_ids)
            self._counts["cached"] += req.cached_tokens

    # --- maintenance -------------------------------------------------------------------------
    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    @property
    def num_running(self) -> int:
        return len(self.running)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def get_request(self, rid: str) -> Req | None:
        """A queued or running request by id."""
        return self._live.get(rid)

    def flush_cache(self) -> bool:
        """Empty the radix cache; only when idle (returns False otherwise)."""
        if self.has_work() or self._inflight is not None:
            return False
        self.tree_cache.reset()
        return True

    def stats(self) -> SchedulerStats:
        c = self._counts
        return SchedulerStats(
            num_waiting=len(self.waiting), num_running=len(self.running), num_finished=c["finished"],
            prompt_tokens=c["prompt"], cached_tokens=c["cached"],
            cache_hit_rate=c["cached"] / c["prompt"] if c["prompt"] else 0.0,
            computed_prefill_tokens=c["prefill"], decode_tokens=c["decode"],
            num_used_slots=self.pool.num_used, cached_slots=self.tree_cache.total_size(),
            pool_usage=self.pool.num_used / self.pool.num_slots,
            num_retractions=c["retract"], new_token_ratio=self.growth.ratio, num_steps=c["steps"],
            hinted_tokens=self.tree_cache.retention.pinned_tokens(),
            hint_evictions=self.tree_cache.retention.counts["evicted"], num_programs=len(self.programs),
            provisional_programs=self.programs.counts["provisional"], promoted_programs=self.programs.counts["promoted"],
        )

    def check_integrity(self) -> None:
        """Pool, table and cache are each consistent, and every used slot has exactly one owner:
        the tree, or the running request whose row holds it beyond its locked prefix."""
        self.pool.check_integrity()
        self.table.check_integrity()
        self.tree_cache.check_integrity()
        assert self.table.num_used_rows == len(self.running), "a table row leaked"
        owned = [self.tree_cache.all_slots()]
        for r in self.running:
            assert r.status is ReqStatus.RUNNING and r.req_row is not None, f"{r} not running"
            p = r.prefix_indices.numel()
            assert torch.equal(self.table.read(r.req_row, 0, p), r.prefix_indices), f"{r}: row != prefix"
            owned.append(self.table.read(r.req_row, p, r.kv_len))
        for r in self.waiting:
            assert r.status is ReqStatus.WAITING and r.req_row is None, f"{r} in queue holds a row"
        slots = torch.cat(owned)
        assert torch.unique(slots).numel() == slots.numel(), "a slot has two owners"
        assert slots.numel() == self.pool.num_used, f"{self.pool.num_used - slots.numel()} slots leaked"

    def _debug_check(self) -> None:
        if self.config.debug:
            self.check_integrity()

