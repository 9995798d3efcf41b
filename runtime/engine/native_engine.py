"""NativeEngine: the Engine's serving API over the torch-free GGUF model (issue #26).

``sglc serve --engine native`` runs this in a process that never imports torch: ~1 s and ~100-200
MiB less than the torch engine before the first answer (docs/benchmarks.md). The same tiles and
kernels compute (``model/native_model.py``: each decoder layer is the binding's ``DecodeLayer``),
so a greedy request gives the torch engine's tokens. What is here is the serving loop around it:
continuous batching (every step decodes one token of each running request and prefills up to
``chunked_prefill_size`` prompt tokens of the others, all as rows of one native call), the torch
engine's radix cache over numpy slot arrays (a prompt's longest cached prefix is reused, locked
while the request runs; a finished request's tokens are inserted; unlocked prefixes are evicted
least recently used first when a request needs room), KV slots for the rest reserved at
admission (prompt + max_new_tokens: a request admitted always finishes), sampling in numpy, and
the text, stops and delivery of the torch engine's ``RequestOutput``.

Prompt logprobs, prefill-only requests and scoring (``select``, through the torch engine's
``ScoreJob``: the prompt is prefilled once and every choice reuses it) work as there. Not here
yet, refused at submit by name (the torch engine runs them): output constraints (regex / JSON
schema / EBNF) and stop_regex. Program hints (issue 28) work as in the torch engine: the radix
cache evicts by them (cache/retention.py: a hinted call's final text is kept for its program, a
program with a call queued keeps its texts longest, an ended program's go first) and admission
is by program (scheduling/program_gate.py: calls of programs in flight first, a new program held
back while memory is tight, started provisional when nothing runs), and a call whose hint carries
its continuation has the program's next prompt prefilled when it ends (precompute.py; the KV-slot
side of a request is native_slots.py). Hints never change outputs.
A prompt is cached as soon as it is prefilled (the torch engine caches after every chunk), and
a waiting request whose prompt shares a long prefix with one being prefilled waits for it (the
torch scheduler's in-batch prefix dedup). Seeded sampling is
deterministic per seed, from numpy's generator, so its draws are not the torch engine's.
"""
from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import deque
from typing import Callable, Sequence

import numpy as np

from sglc.wire.program_hint import ProgramHint, check_program_id

from ..cache.kv_pool import KVSlotPool
from ..cache.radix_cache import RadixCache
from ..cache.slot_arrays import NumpySlots
from ..cache.token_prefix import common_prefix_len
from ..model.default_model import resolve_model_path
from ..model.native_model import NativeGGUFModel
from ..model.tokenizer import Tokenizer
from ..output.outputs import GenerateOutput, StreamChunk
from ..output.request_output import RequestOutput
from ..scheduling import program_gate
from ..scheduling.program_gate import ProgramGate, Start
from ..scheduling.program_table import ProgramTable
from ..sampling.sampling_params import SamplingParams, as_params
from ..sampling.numpy_sampling import choose_token, log_softmax
from ..sampling.sampling_state import prompt_logprob_span
from .native_engine_config import NativeEngineConfig, start_model_load
from .native_slots import RequestSlots
from .precompute import Precomputes, discard_output, check_client_rid, next_prompt_ids, precompute_hint
from .native_step import NativeRequest, StepRows
from .prompt_ids import Prompt, to_token_ids
from . import request_trace
from .request_trace import RequestTrace, TracedRequest
from .score_job import ScoreJob
from .stats import EngineStats

log = logging.getLogger(__name__)

SHUTDOWN_TIMEOUT_S = 10.0
#: a waiting request whose prompt shares this many tokens more than the cache holds with one being
#: prefilled waits for that prefill to be cached instead of prefilling the same tokens beside it
DEDUP_TOKENS = 32


def unsupported_params(p: SamplingParams) -> list[str]:
    """The sampling fields this engine cannot honour (empty: it runs the request)."""
    found = []
    if p.regex is not None or p.json_schema is not None or p.fsm is not None or p.ebnf is not None \
            or p.constraint is not None:
        found.append("output constraints (regex / json_schema / fsm / ebnf)")
    if p.stop_regex:
        found.append("stop_regex")
    return found


class NativeEngine:
    """Submit / abort / stats / start / shutdown as ``Engine`` has them, for ``RuntimeService``."""

    def __init__(self, config: NativeEngineConfig | None = None, *,
                 loading: Callable[[], NativeGGUFModel] | None = None, **overrides) -> None:
        """``loading``: this config's model, loading already (``start_model_load(config)``: ``sglc
        serve`` starts it before it imports the rest)."""
        self.config = cfg = config if config is not None else NativeEngineConfig(**overrides)
        path = resolve_model_path(cfg.model)
        # NOTE: the tokenizer loads while the model does (its repacking is native code, without the GIL)
        loading = loading if loading is not None else start_model_load(cfg)
        self.tokenizer = Tokenizer(path)
        self.model = loading()
        mc = self.model.config
        self.max_context = min(cfg.max_context or mc.max_position_embeddings, mc.max_position_embeddings,
                               cfg.num_kv_slots)
        self.eos_token_ids = tuple(sorted(set(self.tokenizer.stop_token_ids) | set(mc.eos_token_ids)))
        self._rng = np.random.default_rng(cfg.seed)
        #: the pool's slots go to running requests and the prefix cache (SGLang's RadixAttention,
        #: the torch engine's RadixCache over numpy slot arrays)
        self.pool = KVSlotPool(cfg.num_kv_slots, arrays=NumpySlots())
        self.tree = RadixCache(self.pool, disable=cfg.disable_radix_cache, hinted_share=cfg.hinted_share)
        self.slots = RequestSlots(self.pool, self.tree)
        self.programs = ProgramTable()  # NOTE: programs in flight, for admission by program (issue 28)
        self.precomputes = Precomputes()
        self._trace: RequestTrace | None = None
        self._waiting: deque[NativeRequest] = deque()
        self._running: list[NativeRequest] = []
        self._in_step: set[str] = set()
        self._results: dict[str, GenerateOutput] = {}  # finished requests nobody streams, until wait()
        self._lock = threading.RLock()
        self._cv = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None
        self._stopping = False
        #: the model's memory, loaded in ordinary pages, still to be moved into huge pages
        #: (_settle_memory: at the first idle moment after a step, so no first answer waits on it)
        self._unsettled = True
        self._settling: threading.Thread | None = None
        self._counts = dict(num_finished=0, num_steps=0, prompt_tokens=0, computed_prefill_tokens=0,
                            completion_tokens=0, cached_tokens=0)
        self._times = dict(schedule_s=0.0, forward_s=0.0, process_s=0.0, busy_s=0.0)

    # --- requests in ---------------------------------------------------------------------
    def submit(self, prompt: Prompt, params: SamplingParams | dict | None = None, *, rid: str | None = None,
               stream: bool = False, callback: Callable[[StreamChunk], None] | None = None,
               hint: ProgramHint | None = None) -> str:
        """Queue a request and return its id; invalid or unsupported input raises ValueError here.
        ``hint``: the call's place in its program (issue 28): the radix cache keeps the text it ends
        with for its program (cache/retention.py); hints never change outputs."""
        if hint is not None and not isinstance(hint, ProgramHint):
            raise TypeError(f"hint must be a ProgramHint, got {type(hint).__name__}")
        params = as_params(params)
        unsupported = unsupported_params(params)
        if unsupported:
            raise ValueError(f"the native engine does not run {', '.join(unsupported)} yet; "
                             "serve with --engine torch for them")
        ids = to_token_ids(prompt, self.tokenizer, self.vocab_size)
        if not ids:
            raise ValueError("the prompt has no tokens")
        if len(ids) + max(params.max_new_tokens, 1) > self.max_context:
            raise ValueError(f"prompt of {len(ids)} tokens + max_new_tokens {params.max_new_tokens} exceeds "
                             f"the context of {self.max_context} tokens")
        bad = [t for t in params.stop_token_ids if t >= self.vocab_size]
        if bad:
            raise ValueError(f"SamplingParams.stop_token_ids {bad} are outside the vocabulary ({self.vocab_size})")
        check_client_rid(rid)
        rid = rid if rid is not None else uuid.uuid4().hex
        rng = np.random.default_rng(params.seed) if params.seed is not None else self._rng
        out = RequestOutput(rid, self.tokenizer, params, self.eos_token_ids, ids, stream=stream, callback=callback)
        req = NativeRequest(rid, list(ids), len(ids), params, out, rng, hint=hint,
                            prompt_text=prompt if isinstance(prompt, str) else None)
        span = prompt_logprob_span(params, len(ids))
        if span is not None:
            req.logprob_rows, req.prompt_logprobs = span[:2], [None] if span[2] else []
        with self._lock:
            if self._find(rid) is not None:
                raise ValueError(f"request id {rid!r} is already queued or running")
            if hint is not None:  # NOTE: the program's next call is here: it does the work itself
                self.precomputes.claim(hint.program_id, self._withdraw)
            self._waiting.append(req)
            self._counts["prompt_tokens"] += len(ids)
            self._cv.notify_all()
        return rid

    def abort(self, rid: str, message: str = "aborted by client") -> bool:
        """Abort a queued or running request; False when it is unknown or already finished."""
        with self._lock:
            req = self._find(rid)
            if req is None:
                return False
            req.output.abort_message, req.aborted = message, True
            if rid not in self._in_step:  # NOTE: one in the step in flight ends when the step is processed
                self._finish(req)
            return True

    @property
    def vocab_size(self) -> int:
        """Token ids this engine's model takes (its logits' width)."""
        return self.model.embed.rows

    def wait(self, rid: str, timeout: float | None = None) -> GenerateOutput:
        """The final output of a request submitted without stream / callback (taken: once)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while rid not in self._results:
                if self._find(rid) is None:
                    raise KeyError(f"unknown request id {rid!r} (or its output was already taken)")
                if self._thread is None:
                    self._lock.release()  # NOTE: step() takes the lock itself
                    try:
                        self.step()
                    finally:
                        self._lock.acquire()
                    continue
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError(f"request {rid!r} did not finish in {timeout} s")
                self._cv.wait(left)
            return self._results.pop(rid)

    def _find(self, rid: str) -> NativeRequest | None:
        for req in (*self._waiting, *self._running):
            if req.rid == rid:
                return req
        return None

    # --- one step ------------------------------------------------------------------------
    def step(self) -> bool:
        """Admit, run one batch of rows, take its tokens; False when there was nothing to run."""
        t0 = time.perf_counter()
        with self._lock:
            # NOTE: held precomputes join while other work runs, or once the engine idled a step
            self._waiting.extend(self.precomputes.due(time.monotonic(), bool(self._waiting or self._running)))
            self._admit()
            plan = self._plan()
            if plan is None:
                return False
            self._in_step = {r.rid for r, _, _ in plan.picked}
        t1 = time.perf_counter()
        picked, samplers, prompt_rows = plan.picked, plan.samplers, plan.prompt_rows
        reqs = [r for r, _, _ in picked]
        try:
            read = [row for _, row in samplers] + [row for _, row, _ in prompt_rows]
            logits = self.model.forward(*plan.inputs, logit_rows=read)  # NOTE: also with no row read: the K/V writes
            error = None
        except Exception as err:  # NOTE: the batch is aborted; other requests keep being served
            log.exception("native model step failed; aborting the %d requests of this batch", len(reqs))
            logits, error = None, err
        t2 = time.perf_counter()
        with self._lock:
            self._in_step = set()
            self._process(picked, samplers, prompt_rows, logits, error)
            self._counts["num_steps"] += 1
            t3 = time.perf_counter()
            self._times["schedule_s"] += t1 - t0
            self._times["forward_s"] += t2 - t1
            self._times["process_s"] += t3 - t2
            self._times["busy_s"] += t3 - t0
            self.precomputes.observe_step(t3 - t0)
            self._cv.notify_all()
        return True

    def _admit(self) -> None:
        """Waiting requests while a row and their slots are free, calls of programs in flight
        first, the rest in arrival order (program_gate.py; a call that would start a program
        waits while memory is tight): the longest cached prefix of the prompt (locked), new
        slots for the rest and for max_new_tokens (reserved whole: an admitted request always
        finishes; cached prefixes are evicted for room, in the hints' order)."""
        limit = self.config.num_kv_slots * self.config.program_admit_share
        program_gate.refresh(self.programs, self.tree.retention, self._waiting, limit)
        gate = ProgramGate(self.programs, self.tree.retention, limit)
        admitted: list[NativeRequest] = []
        for req in gate.order(self._waiting, list):
            if len(self._running) >= self.config.max_running_requests:
                break
            prefix = self.slots.reusable_prefix(req)
            if self._prefilling_shares(prefix, self.tree.peek_prefix_len(prefix)):
                continue  # NOTE: its prefix is being prefilled: admitted once that is cached, it reuses it
            call_tokens = req.num_prompt + max(req.params.max_new_tokens, 1)
            start = Start.COMMITTED
            if gate.starts_program(req):
                start = gate.start_verdict(req, call_tokens - self.tree.peek_prefix_len(prefix), busy=bool(self._running))
                if start is Start.HOLD:
                    continue
            match = self.slots.lock_prefix(prefix)
            need, room = call_tokens - match.prefix_len, self.slots.room()
            provisional = start is Start.PROVISIONAL or self.programs.is_provisional(req)
            room -= gate.held_room(req, provisional=provisional, need=need, room=room, busy=bool(self._running))
            if not self.slots.take(req, match, need, room):
                break
            self._counts["cached_tokens"] += 0 if req.internal else req.cached
            self._running.append(req)
            admitted.append(req)
            gate.admitted(req, call_tokens, match.prefix_len, start=start)
        for req in admitted:
            self._waiting.remove(req)

    def _prefilling_shares(self, tokens: list[int], cached: int) -> bool:
        """Whether a running request still prefilling its prompt shares more of ``tokens`` than the
        cache holds (by ``DEDUP_TOKENS`` or more): the prefix will be cached when its prefill ends
        (the torch scheduler's in-batch prefix dedup, for requests sent together)."""
        for other in self._running:
            if other.computed < other.num_prompt:
                shared = common_prefix_len(other.tokens[:other.num_prompt], tokens)
                # NOTE: a precompute is short and ends this step or the next: any overlap waits for it
                least = 1 if other.internal else DEDUP_TOKENS
                if shared >= cached + least:
                    return True
        return False

    def _plan(self) -> StepRows | None:
        """This step's rows: one per decoding request, then prompt chunks within the budget."""
        budget = self.config.chunked_prefill_size
        picked: list[tuple[NativeRequest, int, int]] = []  # (request, first position, rows)
        for req in self._running:
            if req.aborted:
                continue
            if req.computed >= req.num_prompt:  # decoding: its last token
                picked.append((req, len(req.tokens) - 1, 1))
            elif budget > 0:
                n = min(budget, req.num_prompt - req.computed)
                picked.append((req, req.computed, n))
                budget -= n
        if not picked:
            return None
        return StepRows.build(picked)

    def _process(self, picked: list[tuple[NativeRequest, int, int]], samplers, prompt_rows, logits: np.ndarray | None,
                 error: Exception | None) -> None:
        if error is not None:
            for req, _, _ in picked:
                req.output.fail(f"engine error: {type(error).__name__}: {error}")
                self._finish(req, keep_kv=False)
            return
        for req, start, n in picked:
            req.computed = start + n
            if start < req.num_prompt <= req.computed and not self.tree.disable and not req.aborted:
                self.slots.cache_prompt(req)
        for j, (req, _, p) in enumerate(prompt_rows):  # NOTE: row p predicts token p + 1
            req.prompt_logprobs.append(float(log_softmax(logits[len(samplers) + j])[req.tokens[p + 1]]))
        for req, start, n in picked:  # NOTE: a prefill-only request (a score's) ends with its prompt
            if req.params.max_new_tokens == 0 and req.computed >= req.num_prompt and not req.aborted:
                self._finish(req)
        for j, (req, _) in enumerate(samplers):
            if req.aborted:
                continue
            reason = self._take(req, logits[j])
            if reason is not None or req.num_output >= req.params.max_new_tokens:
                self._finish(req)
        for req in list(self._running):
            if req.aborted:
                self._finish(req)

    def _take(self, req: NativeRequest, row: np.ndarray) -> str | None:
        """Sample ``req``'s next token from its logits row and hand it to its output."""
        result = choose_token(row, req.params, req.rng, req.tokens[req.num_prompt:], self.eos_token_ids)
        token = result.token_id
        req.tokens.append(token)
        self._counts["completion_tokens"] += 1
        try:
            return req.output.on_token(result, None)
        except Exception as err:  # NOTE: one request's bad state must not take the batch down
            log.exception("processing the token of request %s failed; aborting it", req.rid)
            req.output.fail(f"engine error: {type(err).__name__}: {err}")
            return "abort"

    def _finish(self, req: NativeRequest, keep_kv: bool = True) -> GenerateOutput:
        """End ``req`` (any state): its computed tokens go to the prefix cache (``keep_kv``: their
        K/V are whole, not after a failed step), its other slots back to the pool, its prefix is
        unlocked; then its final output is delivered."""
        if req in self._running:
            self._running.remove(req)
            self.slots.release(req, keep_kv)
        elif req in self._waiting:
            self._waiting.remove(req)
        self._counts["num_finished"] += 1
        self._counts["computed_prefill_tokens"] += max(0, min(req.computed, req.num_prompt) - req.cached)
        out = req.output.finalize(aborted=req.aborted, cached_tokens=req.cached, prompt_logprobs=req.prompt_logprobs)
        if req.output.keeps_result:
            self._results[req.rid] = out
        self.precomputes.done(req.rid)
        if self.config.precompute and not (req.aborted or req.output.failed or self._stopping):
            self._precompute_after(req, out.text)
        if self._trace is not None and not req.aborted and not req.output.failed and not req.internal:
            n = req.num_prompt
            self._trace.record(TracedRequest(req.rid, tuple(req.tokens[:n]), tuple(req.tokens[n:]), req.cached))
        return out

    def _precompute_after(self, req: NativeRequest, output_text: str) -> None:
        """Queue the prefill of the program's next prompt, when ``req``'s hint says what follows
        its output (precompute.py)."""
        try:
            ids = next_prompt_ids(req.prompt_text, output_text, req.hint, self.tokenizer, self.vocab_size,
                                  self.max_context)
        except ValueError:
            return
        if ids is None:
            return
        rid = self.precomputes.new_rid(req.hint.program_id)
        params = SamplingParams(max_new_tokens=0)
        output = RequestOutput(rid, self.tokenizer, params, self.eos_token_ids, ids, callback=discard_output)
        pre = NativeRequest(rid, ids, len(ids), params, output, self._rng, hint=precompute_hint(req.hint), internal=True)
        self.precomputes.claim(req.hint.program_id, self._withdraw)  # NOTE: a newer precompute replaces an older one
        self.precomputes.hold(req.hint.program_id, rid, pre, time.monotonic())

    def _withdraw(self, rid: str) -> bool:
        """Drop a waiting precompute (its program's next call came first); False if it started."""
        for req in self._waiting:
            if req.rid == rid:
                req.aborted = True
                self._finish(req)
                return True
        return False

    # --- what the server asks besides generating ------------------------------------------
    def score_job(self, prompt: Prompt, continuations: Sequence[Prompt], *,
                  hint: ProgramHint | None = None) -> ScoreJob:
        """A select's scoring as engine requests (validated now): ``results()`` runs it."""
        return ScoreJob(self, prompt, continuations, hint=hint)

    def end_program(self, program_id: str) -> int:
        """A program run ended: the texts the cache keeps for its hints lose them (evicted first
        from now on). Returns the cached tokens released; 0 for a program it holds nothing for."""
        check_program_id(program_id)
        with self._lock:
            self.precomputes.claim(program_id, self._withdraw)
            self.programs.end(program_id)
            return self.tree.retention.end_program(program_id)

    def start_trace(self) -> RequestTrace:
        """Record every request that finishes from now on (aborted and failed ones excepted)
        until stop_trace(); returns the live trace (request_trace.py). RuntimeError if one is on."""
        with self._lock:
            self._trace = request_trace.begin(self._trace, "NativeEngine")
            return self._trace

    def stop_trace(self) -> RequestTrace:
        """Stop recording and return the trace. RuntimeError if no trace is on."""
        with self._lock:
            trace = request_trace.end(self._trace, "NativeEngine")
            self._trace = None
            return trace

    def flush_cache(self) -> bool:
        """Empty the prefix cache; only while idle (False otherwise)."""
        with self._lock:
            if self._waiting or self._running:
                return False
            self.tree.reset()
            return True

    def stats(self) -> EngineStats:
        with self._lock:
            c, t = self._counts, self._times
            used = self.pool.num_used
            return EngineStats(
                num_waiting=len(self._waiting), num_running=len(self._running), num_finished=c["num_finished"],
                num_retractions=0, num_steps=c["num_steps"], prompt_tokens=c["prompt_tokens"],
                cached_tokens=c["cached_tokens"], cache_hit_rate=c["cached_tokens"] / max(1, c["prompt_tokens"]),
                computed_prefill_tokens=c["computed_prefill_tokens"],
                completion_tokens=c["completion_tokens"], num_kv_slots=self.config.num_kv_slots,
                num_used_slots=used, cached_slots=self.tree.total_size(), pool_usage=used / self.config.num_kv_slots,
                schedule_s=t["schedule_s"], radix_s=0.0, radix_calls=0, forward_s=t["forward_s"],
                process_s=t["process_s"], busy_s=t["busy_s"], hinted_tokens=self.tree.retention.pinned_tokens(),
                hint_evictions=self.tree.retention.counts["evicted"], num_programs=len(self.programs),
                provisional_programs=self.programs.counts["provisional"],
                promoted_programs=self.programs.counts["promoted"],
                precomputes=self.precomputes.counts["submitted"],
                precomputes_withdrawn=self.precomputes.counts["withdrawn"],
                precomputes_pending=self.precomputes.num_pending)

    # --- control -------------------------------------------------------------------------
    def start(self) -> None:
        """Serve in a background thread."""
        if self._thread is not None:
            return
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="sglc-native-engine", daemon=True)
        self._thread.start()

    def shutdown(self, timeout: float | None = SHUTDOWN_TIMEOUT_S) -> bool:
        """Stop the thread (at its next step boundary, waiting up to ``timeout``) and abort what
        is left; True when the thread has stopped."""
        with self._lock:
            self._stopping = True
            self._cv.notify_all()
        stopped = True
        if self._thread is not None:
            self._thread.join(timeout)
            stopped = not self._thread.is_alive()
            if stopped:
                self._thread = None
        with self._lock:
            for req in [*self._waiting, *self._running]:
                if req.rid not in self._in_step:
                    req.output.abort_message, req.aborted = "engine shut down", True
                    self._finish(req)
            self._cv.notify_all()
        return stopped

    def _loop(self) -> None:
        while True:
            with self._lock:
                while not self._stopping and not (self._waiting or self._running):
                    due_in = self.precomputes.wait_s(time.monotonic())
                    if due_in is not None and due_in <= 0:
                        break  # NOTE: a held precompute is due: step() queues it
                    if self._unsettled and self._counts["num_steps"] > 0:
                        self._settle_memory()
                    self._cv.wait(due_in)
                if self._stopping:
                    return
            try:
                if not self.step():
                    with self._lock:  # NOTE: work exists but none fits (slots): wait for a change
                        due_in = self.precomputes.wait_s(time.monotonic())
                        self._cv.wait(0.05 if due_in is None else min(0.05, due_in))
            except Exception:  # NOTE: a bug here must not leave waiters hanging forever
                log.exception("native engine step failed; aborting all requests")
                with self._lock:
                    self._in_step = set()
                    for req in [*self._waiting, *self._running]:
                        req.output.abort_message, req.aborted = "engine step failed", True
                        self._finish(req, keep_kv=False)

    def _settle_memory(self) -> None:
        """Move the model into huge pages (its load deferred them: model/native/binding/weight_arena.h)
        in a thread of its own: decode streams every weight each step, ~1.4x faster from huge pages."""
        self._unsettled = False
        self._settling = threading.Thread(target=self.model.collapse_huge_pages, name="sglc-huge-pages", daemon=True)
        self._settling.start()

    def wait_settled(self, timeout: float | None = None) -> bool:
        """Move the model into huge pages now if that has not started, and wait for it (benchmarks:
        the move takes seconds of a core beside the steps); True once it has ended."""
        with self._lock:
            if self._unsettled:
                self._settle_memory()
        self._settling.join(timeout)
        return not self._settling.is_alive()

    # --- in-process use ------------------------------------------------------------------
    def generate(self, prompts: Sequence[Prompt], params: SamplingParams | dict | None = None) -> list[GenerateOutput]:
        """Submit ``prompts`` and return their outputs in order (``wait`` steps the engine itself
        where no background thread runs); an invalid prompt aborts the ones submitted before it."""
        rids: list[str] = []
        try:
            for prompt in prompts:
                rids.append(self.submit(prompt, params))
        except Exception:
            for rid in rids:
                self.abort(rid, "a sibling request in the same generate() call was invalid")
                self._results.pop(rid, None)
            raise
        return [self.wait(rid) for rid in rids]
