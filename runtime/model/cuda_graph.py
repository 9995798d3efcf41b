"""DecodeGraphs: CUDA graphs of the model's decode forward, replayed instead of ~20 launches a layer.

A decode step of a small model is launch-bound on a GPU: 30 layers of a dozen kernels each cost
more in launch latency than in work. A CUDA graph records one forward's kernels once and
replays them with one launch. Its inputs must sit at fixed addresses, so the graph reads:

* token ids, positions and KV write slots from static tensors (copied in before each replay);
* the slot lists, lengths and split-K scratch from the triton backend's static decode buffers
  (:meth:`TritonAttentionBackend.prepare_static_decode`).

Graphs are keyed by (padded batch size, split count): a batch of ``n`` requests runs in the graph
of the smallest captured size ``>= n``; the padding requests decode token 0 at position 0 into
one scratch slot past the scheduler's pool (``pad_slot``) and attend only to it, and their logits
rows are dropped. A graph is captured the first time its key is needed (~the cost of a few
eager steps), after one eager warm-up run that also compiles the Triton kernels.

With ``capture=False`` (the CPU, tests) the same static path runs eagerly: that checks the
padding and buffer handling without a GPU.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..cache.kv_buffer import KVBuffer
from .forward_batch import ForwardBatch

# NOTE: powers of two keep the number of graphs small; padding wastes at most half a batch of
# (cheap, launch-bound) decode work.
_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@dataclass(slots=True)
class _Graph:
    graph: "torch.cuda.CUDAGraph"
    logits: torch.Tensor  # the graph's output buffer [bs, vocab]


class DecodeGraphs:
    """Decode forwards through CUDA graphs (or, with ``capture=False``, the same static path eagerly)."""

    def __init__(self, model, kv_buffer: KVBuffer, *, pad_slot: int, max_batch: int, max_context: int,
                 capture: bool | None = None) -> None:
        backend = model.attn
        if not hasattr(backend, "prepare_static_decode"):
            raise ValueError(f"CUDA graphs need the triton attention backend, not {backend.name!r}")
        if not 0 <= pad_slot < kv_buffer.num_slots:
            raise ValueError(f"pad_slot {pad_slot} is outside the KV buffer ({kv_buffer.num_slots} slots)")
        self.model, self.kv_buffer, self.backend = model, kv_buffer, backend
        self.device = model.device
        self.capture = self.device.type == "cuda" if capture is None else capture
        self.pad_slot = pad_slot
        self.max_batch = max_batch
        self.max_context = max_context
        self.sizes = sorted({s for s in _SIZES if s < max_batch} | {max_batch})
        dev = self.device
        self.input_ids = torch.zeros(max_batch, dtype=torch.long, device=dev)
        self.positions = torch.zeros(max_batch, dtype=torch.long, device=dev)
        self.out_loc = torch.full((max_batch,), pad_slot, dtype=torch.long, device=dev)
        self._buffers = backend.enable_static_decode(max_batch, max_batch * max_context,
                                                     backend.tuning.decode_max_splits, dev)
        # NOTE: grow the RoPE table to max_context now; a forward must not reallocate it in a capture.
        model.rope.cos_sin(self.positions[:1], model.dtype, max_context - 1)
        self._batches = {
            bs: ForwardBatch(input_ids=self.input_ids[:bs], positions=self.positions[:bs],
                             out_cache_loc=self.out_loc[:bs], extend_lens=[1] * bs, prefix_lens=[0] * bs,
                             kv_indices=[self.out_loc[i : i + 1] for i in range(bs)])
            for bs in self.sizes
        }
        self._graphs: dict[tuple[int, int], _Graph] = {}
        self._pool = torch.cuda.graph_pool_handle() if self.capture else None

    @property
    def num_graphs(self) -> int:
        """Graphs captured so far."""
        return len(self._graphs)

    def can_run(self, batch: ForwardBatch) -> bool:
        """A pure decode batch that fits: at most max_batch requests, each within max_context,
        returning every row's logits (the decode default)."""
        return (batch.is_decode and batch.batch_size <= self.max_batch
                and all(p + 1 <= self.max_context for p in batch.prefix_lens)
                and all(s == 0 for s in batch.logits_start))

    def forward(self, batch: ForwardBatch) -> torch.Tensor:
        """The logits ``[batch_size, vocab]`` of decode ``batch`` (see :meth:`can_run`).

        NOTE: a view of the graph's output buffer: valid until the next call.
        """
        assert self.can_run(batch), "DecodeGraphs.forward needs a batch that can_run() accepts"
        n = batch.batch_size
        bs = next(s for s in self.sizes if s >= n)
        splits = self.backend.static_decode_splits(max(batch.prefix_lens) + 1, bs)
        self.input_ids[:n].copy_(batch.input_ids)
        self.positions[:n].copy_(batch.positions)
        self.out_loc[:n].copy_(batch.out_cache_loc)
        if bs > n:
            self.input_ids[n:bs].zero_()
            self.positions[n:bs].zero_()
            self.out_loc[n:bs].fill_(self.pad_slot)
        static = self._batches[bs]
        # NOTE: engines sharing one model share its backend; ours reads (and our graphs captured)
        # these buffers, whatever another engine installed since.
        self.backend.static_decode = self._buffers
        self.backend.prepare_static_decode(batch, static, self.pad_slot, splits)
        if not self.capture:
            return self.model.forward(static, self.kv_buffer)[:n]
        entry = self._graphs.get((bs, splits))
        if entry is None:
            entry = self._graphs[(bs, splits)] = self._capture(static)
        entry.graph.replay()
        return entry.logits[:n]

    def _capture(self, static: ForwardBatch) -> _Graph:
        # NOTE: the warm-up runs this very batch (rewriting the same K/V into the same slots), and
        # compiles the Triton kernels outside the capture. Side stream, as torch's docs advise.
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            self.model.forward(static, self.kv_buffer)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            logits = self.model.forward(static, self.kv_buffer)
        return _Graph(graph, logits)
