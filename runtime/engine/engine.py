"""Engine: the in-process runtime API (submit / stream / generate / score / abort / stats).

One step is schedule -> run -> process (``step``). The scheduler decides, the model runner
computes, and the engine turns tokens into text, checks stops and delivers outputs. Run it
synchronously (``generate`` / ``wait`` / iterating a stream drive ``step`` themselves) or in a
background thread (``start`` / ``shutdown``), where any thread may submit, abort and wait.

Per-request state lives in typed fields of ``Req``: ``sampling_state`` (SamplingState: seed
generator, constraint cursor, prompt logprobs) and ``output`` (RequestOutput: text stream,
output logprobs, delivery).
``start_trace`` / ``stop_trace`` record the finished requests' tokens (request_trace.py).
"""
from __future__ import annotations

import atexit
import logging
import queue
import threading
import time
import uuid
from typing import Callable, Iterator, Sequence

from sglc.wire.program_hint import ProgramHint, check_program_id

from ..cache.kv_buffer import KVBuffer
from ..constrained import GrammarCache
from ..model.cuda_graph import DecodeGraphs
from ..model.default_model import gguf_source, resolve_model_path
from ..model.model_runner import ModelRunner
from ..model.models import load_model
from ..model.model_config import ModelConfig
from ..model.placement import fit_attention_to_model, resolve_placement
from ..model.tokenizer import Tokenizer
from ..output.outputs import GenerateOutput, ScoreResult, StreamChunk
from ..output.request_output import RequestOutput
from ..sampling.sampler import Sampler
from ..sampling.sampling_params import SamplingParams, as_params
from ..sampling.sampling_state import SamplingState
from ..sampling.token_result import TokenResult
from ..scheduling.request import Req
from ..scheduling.schedule_batch import ScheduleBatch
from ..scheduling.scheduler import Scheduler
from ..scheduling.scheduler_config import SchedulerConfig
from .engine_config import AUTO_CHUNK, DEFAULT_CHUNKED_PREFILL_SIZE, MIN_AUTO_CHUNK, EngineConfig
from .engine_constraints import EngineConstraints
from .prefill_pacer import PrefillPacer
from .precompute import Precomputes, discard_output, check_client_rid, next_prompt_ids, precompute_hint
from .prompt_ids import Prompt, to_token_ids
from . import request_trace
from .request_trace import RequestTrace, TracedRequest
from .score_job import ScoreJob
from .stats import EngineStats, RadixTimer, StepTimers
from .thread_policy import apply_thread_count, in_transient_thread

log = logging.getLogger(__name__)

# Slots past the scheduler's pool, written only by prompt-logprob side passes (model_runner.py).
_SCRATCH_SLOTS = 256
#: Seconds ``shutdown`` waits for the engine thread to finish its step. A step is one prefill
#: chunk plus one decode token per running request (well under a second on a 2-core CPU with the
#: default chunk), so this is only reached when a step is far longer than it should be.
SHUTDOWN_TIMEOUT_S = 10.0


class Engine:
    """An LLM engine over one model. See the module docstring for the threading rules."""

    def __init__(self, config: EngineConfig | None = None, *, share_model_with: Engine | None = None,
                 **overrides) -> None:
        """Load the model and build scheduler, KV buffer and runner.

        config or keyword overrides give an EngineConfig. share_model_with reuses another
        engine's loaded weights and tokenizer (its model/dtype/device settings win); the two
        engines must not step at the same time.
        """
        self.config = cfg = config if config is not None else EngineConfig(**overrides)
        self.threads = share_model_with.threads if share_model_with is not None else apply_thread_count(cfg.threads)
        # NOTE: built in a thread of its own, so that the OpenMP pool of its big tensor work (weight
        # packing, KV and table fills) ends with it: the stepping thread's pool must be the only
        # one (thread_policy.py; two pools halved one-stream decode speed).
        in_transient_thread(lambda: self._build(cfg, share_model_with), name="sglc-engine-setup")

    def _build(self, cfg: EngineConfig, share_model_with: Engine | None) -> None:
        if share_model_with is not None:
            self.tokenizer, self.model = share_model_with.tokenizer, share_model_with.model
            self.placement = share_model_with.placement
        else:
            #: where the model runs and which attention backend it uses ("auto" resolved)
            placement = resolve_placement(cfg.device, cfg.attention_backend)  # ValueError: why not
            path = resolve_model_path(cfg.model)  # FileNotFoundError / ValueError naming the path
            self.placement = fit_attention_to_model(placement, cfg.attention_backend, ModelConfig.from_pretrained(path))
            log.info("engine: %s", self.placement.describe())
            gguf = gguf_source(cfg.model)  # NOTE: its weights are read in place, kept in their types
            self.tokenizer = Tokenizer(path)
            self.model = load_model(path, dtype=cfg.dtype, device=self.placement.device,
                                    attention=self.placement.attention_backend, pack_weights=cfg.pack_weights,
                                    quantization=cfg.quantization, gguf=gguf)
        mc = self.model.config
        num_slots = cfg.num_kv_slots or KVBuffer.slots_for_budget(
            cfg.kv_cache_bytes, mc.num_hidden_layers, mc.num_key_value_heads, mc.head_dim, self.model.dtype)
        self.max_context = min(cfg.max_context or mc.max_position_embeddings, mc.max_position_embeddings, num_slots)
        self.eos_token_ids = tuple(sorted(set(self.tokenizer.stop_token_ids) | set(mc.eos_token_ids)))
        self.scheduler = Scheduler(SchedulerConfig(
            num_kv_slots=num_slots, max_running=cfg.max_running_requests, max_context=self.max_context,
            max_prefill_tokens=cfg.max_prefill_tokens,
            chunk_size=DEFAULT_CHUNKED_PREFILL_SIZE if cfg.chunked_prefill_size == AUTO_CHUNK else cfg.chunked_prefill_size,
            policy=cfg.schedule_policy, seed=cfg.seed, disable_radix_cache=cfg.disable_radix_cache,
            hinted_share=cfg.hinted_share,
            debug=cfg.debug,
        ))
        self.kv_buffer = self.model.new_kv_buffer(num_slots + _SCRATCH_SLOTS)
        graphs = None
        use_graphs = cfg.cuda_graph
        not_capturable = self.model.graph_unsafe_reason()
        if use_graphs is None:  # auto: where the model runs on a GPU with the triton backend and can be captured
            use_graphs = self.model.device.type == "cuda" and self.model.attn.name == "triton" and not not_capturable
        elif use_graphs and not_capturable:
            raise ValueError(f"cuda_graph=True, but this model's decode step cannot be captured: {not_capturable}")
        if use_graphs:
            # NOTE: padding requests write the last scratch slot, never a pool slot.
            graphs = DecodeGraphs(self.model, self.kv_buffer, pad_slot=self.kv_buffer.num_slots - 1,
                                  max_batch=cfg.max_running_requests, max_context=self.max_context)
        self.runner = ModelRunner(self.model, self.kv_buffer, Sampler(cfg.seed, self.model.device),
                                  num_pool_slots=num_slots, eos_token_ids=self.eos_token_ids, graphs=graphs)
        #: "auto" chunks: sized from the measured prefill rate after every step with prefill
        self._pacer = PrefillPacer(cfg.prefill_step_ms / 1000, DEFAULT_CHUNKED_PREFILL_SIZE, MIN_AUTO_CHUNK,
                                   max(MIN_AUTO_CHUNK, cfg.max_prefill_tokens)) \
            if cfg.chunked_prefill_size == AUTO_CHUNK else None
        self._radix = RadixTimer(self.scheduler.tree_cache)
        self._timers = StepTimers()
        self._completion_tokens = 0
        self._lock = threading.RLock()
        self._cv = threading.Condition(self._lock)
        self._results: dict[str, GenerateOutput] = {}
        self._flush_when_idle = False
        self._thread: threading.Thread | None = None
        self._stopping = False
        self.precomputes = Precomputes()
        self._constraints = EngineConstraints(self.tokenizer, self.model.device, self.scheduler, self._lock,
                                              jump_forward=not cfg.disable_jump_forward,
                                              compiler=cfg.constraint_compiler)
        #: Jump-forward counts: jumps made, tokens they added, jumps that re-queued the request.
        self.jump_counts = self._constraints.counts
        self._trace: RequestTrace | None = None
        #: Chunk queues of streaming requests, until chunks(rid) takes them.
        self._stream_queues: dict[str, queue.SimpleQueue] = {}

    @property
    def vocab_size(self) -> int:
        """Token ids this engine's model takes (its logits' width)."""
        return self.runner.vocab_size

    # --- requests in ---------------------------------------------------------------------
    def submit(self, prompt: Prompt, params: SamplingParams | dict | None = None, *, rid: str | None = None,
               stream: bool = False, callback: Callable[[StreamChunk], None] | None = None,
               hint: ProgramHint | None = None) -> str:
        """Queue a request and return its id. Invalid input raises here, never later.

        stream=True queues StreamChunks for ``chunks(rid)``; callback receives each chunk on the
        stepping thread while it holds the engine lock (keep it short; it may call the engine).
        Otherwise the final output waits for ``wait(rid)``. A constraint (regex / json_schema /
        fsm) is compiled here; the text it forces at the start is appended at once (jump-forward).
        ``hint``: the call's place in its program (issue 28): retention and admission use it; it
        never changes the output.
        """
        if hint is not None and not isinstance(hint, ProgramHint):
            raise TypeError(f"hint must be a ProgramHint, got {type(hint).__name__}")
        params = self._constraints.compile(as_params(params))
        ids = to_token_ids(prompt, self.tokenizer, self.runner.vocab_size)
        if len(ids) + max(params.max_new_tokens, 1) > self.max_context:
            raise ValueError(f"prompt of {len(ids)} tokens + max_new_tokens {params.max_new_tokens} exceeds "
                             f"the context of {self.max_context} tokens")
        bad = [t for t in params.stop_token_ids if t >= self.runner.vocab_size]
        if bad:
            raise ValueError(f"SamplingParams.stop_token_ids {bad} are outside the vocabulary ({self.runner.vocab_size})")
        if params.constraint is not None and not hasattr(params.constraint, "new_cursor"):
            raise TypeError(f"SamplingParams.constraint must provide new_cursor(), got {type(params.constraint).__name__}")
        check_client_rid(rid)
        req = Req(rid if rid is not None else uuid.uuid4().hex, ids, params)
        req.prompt_text = prompt if isinstance(prompt, str) else None
        req.sampling_state = SamplingState.for_request(params, len(ids))
        req.output = RequestOutput(req.rid, self.tokenizer, params, self.eos_token_ids, ids,
                                   stream=stream, callback=callback)
        if not params.stop and not params.stop_regex:  # NOTE: forced text cannot end a request before it is queued
            self._constraints.jump(req, queued=True)
        req.num_forced_at_submit = len(req.output_ids)
        req.hint = hint
        with self._lock:
            self.scheduler.add_request(req)  # ValueError on a duplicate id
            if hint is not None:  # NOTE: the program's next call is here: it does the work itself
                self.precomputes.claim(hint.program_id, self._withdraw)
            if stream:
                # NOTE: registered here, not looked up in chunks(): the engine thread may finish
                # the request before the caller asks for its chunks.
                self._stream_queues[req.rid] = req.output.queue
            self._cv.notify_all()
        return req.rid

    def abort(self, rid: str, message: str = "aborted by client") -> bool:
        """Abort a queued or running request; False when it is unknown or already finished."""
        with self._lock:
            req = self.scheduler.get_request(rid)
            if req is None:
                return False
            req.output.abort_message = message
            self.scheduler.abort(rid)
            if req.finished:  # it was not in the batch in flight: finished now
                self._finalize(req)
                # NOTE: a waiter blocked in wait() sleeps until notified; without this it slept
                # forever once the engine went idle (the queue held only this request).
                self._cv.notify_all()
            return True

    # --- one step ------------------------------------------------------------------------
    def step(self) -> list[GenerateOutput]:
        """Schedule -> run -> process once; returns the outputs of requests finished by it."""
        if self._thread is not None and threading.current_thread() is not self._thread:
            raise RuntimeError("Engine.step: the background thread drives this engine (see start())")
        t0 = time.perf_counter()
        batch = self._schedule()
        if batch is None:
            return []
        t_run = time.perf_counter()
        results = self._run(batch)
        if self._pacer is not None and batch.num_prefill_tokens:
            chunk = self._pacer.observe(batch.num_prefill_tokens, time.perf_counter() - t_run)
            with self._lock:
                self.scheduler.config.chunk_size = chunk
        finished = self._process(batch, results)
        took = time.perf_counter() - t0
        self._timers.busy_s += took
        self.precomputes.observe_step(took)
        return finished

    def _schedule(self) -> ScheduleBatch | None:
        with self._lock:
            t0 = time.perf_counter()
            if self._flush_when_idle and not self.scheduler.has_work():
                self._flush_when_idle = not self.scheduler.flush_cache()
            # NOTE: held precomputes join while other work runs, or once the engine idled a step
            for pre in self.precomputes.due(time.monotonic(), self.scheduler.has_work()):
                try:
                    self.scheduler.add_request(pre)
                except ValueError:  # NOTE: past the pool: the next call will say so itself
                    self.precomputes.done(pre.rid)
            batch = self.scheduler.schedule()
            self._timers.schedule_s += time.perf_counter() - t0
            return batch

    def _run(self, batch: ScheduleBatch) -> list[TokenResult | None] | Exception:
        t0 = time.perf_counter()
        try:
            return self.runner.run(batch)
        except Exception as e:  # NOTE: the batch is aborted; other requests keep being served
            log.exception("model runner failed; aborting the %d requests of this batch", len(batch))
            return e
        finally:
            self._timers.forward_s += time.perf_counter() - t0

    def _process(self, batch: ScheduleBatch, results: list[TokenResult | None] | Exception) -> list[GenerateOutput]:
        with self._lock:
            t0 = time.perf_counter()
            if isinstance(results, Exception):
                for e in batch.reqs:
                    e.req.output.fail(f"engine error: {type(results).__name__}: {results}")
                tokens, reasons = [-1] * len(batch), ["abort"] * len(batch)
                self._flush_when_idle = True  # K/V of this batch may be missing from cached slots
            else:
                tokens = [r.token_id if r is not None else -1 for r in results]
                reasons = [None if r is None else self._on_token(e.req, r) for e, r in zip(batch.reqs, results)]
                self._completion_tokens += sum(1 for r in results if r is not None and r.error is None)
            t1 = time.perf_counter()
            finished = self.scheduler.process_results(batch, tokens, reasons)
            if isinstance(results, Exception):  # partial prefills survive process_results
                for e in batch.reqs:
                    if not e.req.finished:
                        self.scheduler.abort(e.req.rid)
                        finished.append(e.req)
            t2 = time.perf_counter()
            if not isinstance(results, Exception):  # constrained requests append their forced text
                finished += [e.req for e in batch.reqs
                             if e.samples and not e.req.finished and self._constraints.jump(e.req)]
            outs = [self._finalize(req) for req in finished]
            self._timers.schedule_s += t2 - t1
            self._timers.process_s += time.perf_counter() - t0 - (t2 - t1)
            self._cv.notify_all()
            return outs

    def _on_token(self, req: Req, result: TokenResult) -> str | None:
        """One request's new token (text, stops, constraint); a failure ends only that request."""
        rec = req.output
        try:
            return rec.on_token(result, req.sampling_state.cursor)
        except Exception as err:  # NOTE: one request's bad state must not take the batch down
            log.exception("processing the token of request %s failed; aborting it", req.rid)
            rec.fail(f"engine error: {type(err).__name__}: {err}")
            return "abort"

    # --- constrained decoding ------------------------------------------------------------
    @property
    def grammars(self) -> GrammarCache:
        """This engine's compiled constraints (one compile and token index per constraint)."""
        return self._constraints.grammars

    def _finalize(self, req: Req) -> GenerateOutput:
        p, rec = req.sampling_params, req.output
        prompt_logprobs = req.sampling_state.prompt_logprobs if p.return_logprob and p.logprob_start_len >= 0 else None
        out = rec.finalize(aborted=req.finished_reason == "abort", cached_tokens=req.cached_tokens,
                           prompt_logprobs=prompt_logprobs)
        if rec.keeps_result:
            self._results[req.rid] = out
        ended = req.finished_reason != "abort" and not rec.failed
        if self._trace is not None and ended and not req.internal:
            self._trace.record(TracedRequest(req.rid, tuple(req.origin_input_ids), tuple(req.output_ids),
                                             req.cached_tokens, req.num_forced_at_submit))
        self.precomputes.done(req.rid)
        if ended and self.config.precompute and not self._stopping:
            self._precompute_after(req, out.text)
        return out

    def _precompute_after(self, req: Req, output_text: str) -> None:
        """Queue the prefill of the program's next prompt, when ``req``'s hint says what follows
        its output (precompute.py)."""
        try:
            ids = next_prompt_ids(req.prompt_text, output_text, req.hint, self.tokenizer, self.runner.vocab_size,
                                  self.max_context)
        except ValueError:
            return
        if ids is None:
            return
        pre = Req(self.precomputes.new_rid(req.hint.program_id), ids, SamplingParams(max_new_tokens=0))
        pre.sampling_state = SamplingState.for_request(pre.sampling_params, len(ids))
        pre.output = RequestOutput(pre.rid, self.tokenizer, pre.sampling_params, self.eos_token_ids, ids,
                                   callback=discard_output)
        pre.hint, pre.internal = precompute_hint(req.hint), True
        self.precomputes.claim(req.hint.program_id, self._withdraw)  # NOTE: a newer precompute replaces an older one
        self.precomputes.hold(req.hint.program_id, pre.rid, pre, time.monotonic())

    def _withdraw(self, rid: str) -> bool:
        """Drop a waiting precompute (its program's next call came first); False if it started."""
        req = self.scheduler.get_request(rid)
        if req is None or req not in self.scheduler.waiting:
            return False
        self.scheduler.abort(rid)
        self._finalize(req)
        return True

    # --- outputs -------------------------------------------------------------------------
    def wait(self, rid: str, timeout: float | None = None) -> GenerateOutput:
        """The final output of a request submitted without stream/callback (pops it)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                if rid in self._results:
                    return self._results.pop(rid)
                if self.scheduler.get_request(rid) is None:
                    raise KeyError(f"unknown request id {rid!r} (or its output was already taken)")
                if self._thread is not None:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        raise TimeoutError(f"request {rid!r} did not finish in {timeout} s")
                    self._cv.wait(left)
                    continue
            self.step()

    def chunks(self, rid: str) -> Iterator[StreamChunk]:
        """The StreamChunks of a request submitted with stream=True; closing early aborts it."""
        with self._lock:
            q = self._stream_queues.pop(rid, None)
        if q is None:
            raise KeyError(f"request {rid!r} was not submitted with stream=True (or its chunks were taken)")
        return self._iter_chunks(rid, q)

    def _iter_chunks(self, rid: str, q: queue.SimpleQueue) -> Iterator[StreamChunk]:
        done = False
        try:
            while not done:
                try:
                    chunk = q.get(timeout=0.5) if self._thread is not None else q.get_nowait()
                except queue.Empty:
                    if self._thread is None and not self.step() and not self.scheduler.has_work() and q.empty():
                        raise RuntimeError(f"request {rid!r} vanished without a final chunk")
                    continue
                done = chunk.finished
                yield chunk
        finally:
            if not done:
                self.abort(rid, "stream closed by the consumer")

    def stream(self, prompt: Prompt, params: SamplingParams | dict | None = None) -> Iterator[StreamChunk]:
        """Submit (errors raise now) and iterate over the request's chunks."""
        return self.chunks(self.submit(prompt, params, stream=True))

    def generate(self, prompts: Prompt | Sequence[Prompt],
                 params: SamplingParams | dict | Sequence[SamplingParams] | None = None) -> list[GenerateOutput]:
        """Submit all prompts, then run them together; outputs in prompt order."""
        if isinstance(prompts, str) or (prompts and isinstance(prompts[0], int)):
            prompts = [prompts]
        plist = list(params) if isinstance(params, (list, tuple)) else [params] * len(prompts)
        if len(plist) != len(prompts):
            raise ValueError(f"generate: {len(prompts)} prompts but {len(plist)} sampling params")
        rids: list[str] = []
        try:
            for p, sp in zip(prompts, plist):
                rids.append(self.submit(p, sp))
        except Exception:
            with self._lock:
                for r in rids:
                    self.abort(r, "a sibling request in the same generate() call was invalid")
                    self._results.pop(r, None)
            raise
        return [self.wait(r) for r in rids]

    def score(self, prompt: Prompt, continuations: Sequence[Prompt]) -> list[ScoreResult]:
        """Log-probabilities of each continuation's tokens after `prompt` (what select needs).

        The prompt is prefilled once (so it is cached), then the continuations run in batched
        prefills that share it. Text continuations are tokenized together with the prompt; their
        tokens start where that tokenization departs from the prompt's own. Each result carries
        the prompt's prompt_tokens and cached_tokens (of its own prefill). See score_job() for a
        score another thread can abort.
        """
        return self.score_job(prompt, continuations).results()

    def score_job(self, prompt: Prompt, continuations: Sequence[Prompt], *,
                  hint: ProgramHint | None = None) -> ScoreJob:
        """A score as a ScoreJob (validated now): ``results()`` runs it, ``abort()`` stops it."""
        return ScoreJob(self, prompt, continuations, hint=hint)

    def end_program(self, program_id: str) -> int:
        """A program run ended: release what the cache holds for its hints (evicted first from
        now on). Returns the cached tokens released; 0 for a program it holds nothing for."""
        check_program_id(program_id)
        with self._lock:
            self.precomputes.claim(program_id, self._withdraw)
            return self.scheduler.end_program(program_id)

    # --- control -------------------------------------------------------------------------
    def start(self) -> None:
        """Serve in a background thread; submit/abort/wait/chunks may then come from any thread."""
        if self._thread is not None:
            return
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="sglc-engine", daemon=True)
        self._thread.start()
        # NOTE: a daemon thread still stepping when the interpreter finalizes is killed inside torch's
        # C++ code (pthread_exit meets a noexcept frame: "terminate called without an active
        # exception", exit 134). So an engine its owner never shuts down stops at exit, before
        # finalization, as SGLang's Runtime does.
        atexit.register(self.shutdown)

    def shutdown(self, timeout: float | None = SHUTDOWN_TIMEOUT_S) -> bool:
        """Stop the background thread, abort whatever is still queued or running, and stop the
        constraint compile workers. True when the engine thread has stopped.

        The thread stops at its next step boundary; ``timeout`` (seconds, None = no limit) bounds
        the wait. When it expires (a step longer than that: chunked prefill off, a huge batch)
        this logs a warning and returns False without waiting: the requests are aborted all the
        same (those in the step in flight when it ends) and the thread exits after that step.
        """
        with self._lock:
            self._stopping = True
            self._cv.notify_all()
        stopped = True
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                stopped = False
                log.warning("engine shutdown: the engine thread is still inside a step after %.1f s; not waiting "
                            "for it (it stops at the end of that step)", timeout)
            else:
                self._thread = None
                atexit.unregister(self.shutdown)
        with self._lock:
            for req in list(self.scheduler.waiting) + list(self.scheduler.running):
                self.abort(req.rid, "engine shut down")
            self._cv.notify_all()  # NOTE: waiters get their aborted outputs now, not at their deadline
        self._constraints.close()
        return stopped

    def _loop(self) -> None:
        while True:
            with self._lock:
                while not self._stopping and not self.scheduler.has_work():
                    due_in = self.precomputes.wait_s(time.monotonic())
                    if due_in is not None and due_in <= 0:
                        break  # NOTE: a held precompute is due: _schedule() queues it
                    self._cv.wait(due_in)
                if self._stopping:
                    return
            try:
                self.step()
            except Exception as err:  # NOTE: a scheduler bug must not leave waiters hanging forever
                log.exception("engine step failed; aborting all requests")
                with self._lock:
                    batch = self.scheduler.batch_in_flight
                    if batch is not None:  # NOTE: failed before process_results: finish it, or no step runs again
                        self._process(batch, err)
                    for req in list(self.scheduler.waiting) + list(self.scheduler.running):
                        self.abort(req.rid, "engine step failed")

    def start_trace(self) -> RequestTrace:
        """Record every request that finishes from now on (aborted ones excepted) until
        stop_trace(); returns the live trace. RuntimeError if a trace is already on."""
        with self._lock:
            self._trace = request_trace.begin(self._trace, "Engine")
            return self._trace

    def stop_trace(self) -> RequestTrace:
        """Stop recording and return the trace. RuntimeError if no trace is on."""
        with self._lock:
            trace = request_trace.end(self._trace, "Engine")
            self._trace = None
            return trace

    def flush_cache(self) -> bool:
        """Empty the prefix cache; only possible while idle (returns False otherwise)."""
        with self._lock:
            return self.scheduler.flush_cache()

    def stats(self) -> EngineStats:
        """Counters and timers; see EngineStats."""
        with self._lock:
            s, t = self.scheduler.stats(), self._timers
            return EngineStats(
                num_waiting=s.num_waiting, num_running=s.num_running, num_finished=s.num_finished,
                num_retractions=s.num_retractions, num_steps=s.num_steps, prompt_tokens=s.prompt_tokens,
                cached_tokens=s.cached_tokens, cache_hit_rate=s.cache_hit_rate,
                computed_prefill_tokens=s.computed_prefill_tokens, completion_tokens=self._completion_tokens,
                num_kv_slots=self.scheduler.pool.num_slots, num_used_slots=s.num_used_slots,
                cached_slots=s.cached_slots, pool_usage=s.pool_usage, schedule_s=t.schedule_s,
                radix_s=self._radix.seconds, radix_calls=self._radix.calls, forward_s=t.forward_s,
                process_s=t.process_s, busy_s=t.busy_s, hinted_tokens=s.hinted_tokens,
                hint_evictions=s.hint_evictions, num_programs=s.num_programs,
                provisional_programs=s.provisional_programs, promoted_programs=s.promoted_programs,
                precomputes=self.precomputes.counts["submitted"],
                precomputes_withdrawn=self.precomputes.counts["withdrawn"],
                precomputes_pending=self.precomputes.num_pending,
            )

    def reset_timers(self) -> None:
        """Zero the time accumulators (benchmarks call this after warm-up)."""
        with self._lock:
            self._timers = StepTimers()
            self._radix.seconds, self._radix.calls = 0.0, 0

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()
