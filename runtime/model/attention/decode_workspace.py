"""DecodeWorkspace: contiguous copies of a running decode batch's K/V, carried from step to step.

A paged decode step on SDPA needs every request's whole K/V history as one padded tensor; a
gather from the KV buffer in every layer of every step re-reads all of it. The workspace keeps
last decode step's copies and, at the next one, fills in only what is new:

* the same requests again (the steady state): each row gets its new token, in place;
* requests left or joined (a batch-size change): continuing rows move up within the same tensors
  (they keep spare rows, +25%, and spare columns, +64 tokens) and joiners are gathered into the
  rows after them; no allocation;
* rows reordered, or the batch outgrew the tensors: new ones are allocated and each continuing
  row copied over from its old row (one contiguous copy per row);
* tokens added by forwards that did not use the workspace (a mixed prefill + decode batch, a
  chunk of prefill): they are gathered from the paged buffer too, behind the copied history.

A new row continues an old one when it holds the old row's slots as its first ones (the old
row's last slot at the same position, then the whole row compared).

NOTE (validity): a copy is right as long as no forward rewrote its slots since it was taken. A
slot in a running request's ``kv_indices`` is written only by the forward that creates it, and
forwards that bypass the workspace report the slots they wrote (:meth:`note_writes`): an old row
that holds any of them is not carried (a finished request's freed slots can be handed out again).
"""
from __future__ import annotations

import torch

from ...cache.kv_buffer import KVBuffer

_HEADROOM = 64  # decode steps an allocated workspace can absorb before it must grow (rows: +25%)


def _compacts(new_rows: torch.Tensor, old_rows: torch.Tensor) -> bool:
    """Whether moving each old row to its new row, in order, never overwrites a row still to be
    read: sources strictly increasing and never behind their destinations."""
    return bool((old_rows >= new_rows).all()) and bool((old_rows[1:] > old_rows[:-1]).all())


class DecodeWorkspace:
    """Per-layer ``[row capacity, capacity, kv_heads, head_dim]`` K and V copies for the current
    decode batch (its rows first)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.num_rebuilds = 0  # steps that gathered every row (for tests and stats)
        self.num_carries = 0  # steps whose batch changed and that kept the continuing rows
        self.invalidate()

    def invalidate(self) -> None:
        """Forget everything (the next decode step gathers every row)."""
        self._k: dict[int, torch.Tensor] = {}
        self._v: dict[int, torch.Tensor] = {}
        self._index: torch.Tensor | None = None  # [B, Lmax] slots of the last step (padded)
        self._lens: torch.Tensor | None = None  # [B] sequence lengths of the last step
        self._max_len = 0
        self._buffer: KVBuffer | None = None
        self._capacity = 0
        self._pending: tuple[torch.Tensor, torch.Tensor, int] | None = None
        self._written: list[torch.Tensor] = []  # slots written since, by forwards without us
        self._layers_done: set[int] = set()
        self._row_capacity = 0
        self._moves: list[tuple[int, int]] = []  # (row, old row) copied within the tensors
        self._copy: tuple | None = None  # into new tensors: (old row of each row, columns, old K, old V)
        self._cols = 0
        self._fill: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None  # rows, positions, slots

    def note_writes(self, slots: torch.Tensor) -> None:
        """A forward that did not go through the workspace wrote K/V at ``slots``."""
        if self._index is not None:
            self._written.append(slots)

    def stage(self, index: torch.Tensor, lens: torch.Tensor, max_len: int) -> None:
        """Record this step's padded slot matrix ``[B, max_len]`` and lengths ``[B]``."""
        self._pending = (index, lens, max_len)

    def begin(self, kv_buffer: KVBuffer) -> bool:
        """Plan the staged step (what to keep, move, copy, gather); False = too big, use plain gathers."""
        assert self._pending is not None, "stage() must precede begin()"
        index, lens, max_len = self._pending
        self._pending = None
        bsz, device = index.shape[0], index.device
        complete = self._index is not None and len(self._layers_done) == kv_buffer.num_layers
        new_rows, old_rows, starts = (
            self._continuing(index, lens) if complete and kv_buffer is self._buffer else (None, None, None)
        )
        self._moves, self._copy = [], None
        if new_rows is not None and bsz <= self._row_capacity and max_len <= self._capacity and _compacts(new_rows, old_rows):
            # NOTE: rows only move towards the front, in order (requests left, joiners come
            # after): each is copied within the same tensors, no allocation.
            self._moves = [(i, o) for i, o in zip(new_rows.tolist(), old_rows.tolist()) if i != o]
            if self._moves or new_rows.numel() != bsz or bsz != self._index.shape[0]:
                self.num_carries += 1
        else:
            carried = new_rows is not None
            capacity = self._capacity if carried and max_len <= self._capacity else max_len + _HEADROOM
            row_capacity = bsz + max(2, bsz // 4)
            per_slot = KVBuffer.bytes_per_slot(
                kv_buffer.num_layers, kv_buffer.num_kv_heads, kv_buffer.head_dim, kv_buffer.dtype
            )
            if row_capacity * capacity * per_slot > self.max_bytes:
                self.invalidate()
                return False
            if carried:
                # NOTE: a joiner's row starts as a copy of any old row: its own keys are gathered
                # over [0, len) and the rest is masked padding (finite values, as SDPA needs).
                source = torch.zeros(bsz, dtype=torch.long, device=device)
                source[new_rows] = old_rows
                self._copy = (source, min(self._max_len, capacity), self._k, self._v)
                self.num_carries += 1
            else:
                self.num_rebuilds += 1
            self._k, self._v = {}, {}
            self._capacity, self._row_capacity, self._buffer = capacity, row_capacity, kv_buffer
        if starts is None:
            starts = torch.zeros(bsz, dtype=torch.long, device=device)
        # NOTE: every row's positions [start, len) come from the paged buffer; that holds this
        # step's new tokens already (written at out_cache_loc before attention).
        counts = lens - starts
        rows = torch.repeat_interleave(torch.arange(bsz, device=device), counts)
        offsets = torch.arange(rows.numel(), device=device) - torch.repeat_interleave(counts.cumsum(0) - counts, counts)
        positions = torch.repeat_interleave(starts, counts) + offsets
        self._fill = (rows, positions, index[rows, positions])
        self._cols = min(self._max_len, self._capacity)  # columns a moved row holds
        self._index, self._lens, self._max_len = index, lens, max_len
        self._written = []
        self._layers_done = set()
        return True

    def _continuing(
        self, index: torch.Tensor, lens: torch.Tensor
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
        """Rows of this step that continue a row of the last one: (new rows, their old rows,
        per new row the positions already held), or Nones when none does."""
        old, old_lens = self._index, self._lens
        old_width = old.shape[1]
        held = torch.arange(old_width, device=old.device)[None, :] < old_lens[:, None]  # [B0, L0]
        usable = torch.ones(old.shape[0], dtype=torch.bool, device=old.device)
        if self._written:
            usable = ~(torch.isin(old, torch.cat(self._written)) & held).any(1)
        last_pos = old_lens - 1  # [B0]
        last_slot = old.gather(1, last_pos[:, None]).squeeze(1)
        width = index.shape[1]
        # candidate[r, o]: new row r holds old row o's last slot where o had it
        reach = (last_pos[None, :] < lens[:, None]) & usable[None, :]
        at = index.gather(1, last_pos.clamp(max=width - 1)[None, :].expand(index.shape[0], -1))
        candidate = reach & (at == last_slot[None, :])
        has = candidate.any(1)
        if not bool(has.any()):
            return None, None, None
        new_rows = has.nonzero().squeeze(1)
        old_rows = candidate[new_rows].to(torch.uint8).argmax(1)
        n = min(old_width, width)
        same = ((index[new_rows, :n] == old[old_rows, :n]) | ~held[old_rows, :n]).all(1)
        if old_width > width:  # an old row longer than every new one cannot continue
            same &= ~held[old_rows, width:].any(1)
        new_rows, old_rows = new_rows[same], old_rows[same]
        if new_rows.numel() == 0:
            return None, None, None
        starts = torch.zeros(index.shape[0], dtype=torch.long, device=index.device)
        starts[new_rows] = old_lens[old_rows]
        return new_rows, old_rows, starts

    def keys_values(
        self,
        layer_id: int,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        k_new: torch.Tensor,
        v_new: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """This layer's ``[B, kv_heads, max_len, head_dim]`` K and V views for SDPA.

        ``k_cache``/``v_cache`` must already hold the new tokens (written at out_cache_loc).
        """
        bsz, n = self._index.shape[0], self._max_len
        rows, positions, slots = self._fill
        for i, (store, cache) in enumerate(((self._k, k_cache), (self._v, v_cache))):
            ws = store.get(layer_id)
            if ws is None:
                # NOTE: zeros, not empty: masked positions still meet SDPA's value matmul, and
                # 0 * NaN garbage would poison the output.
                ws = cache.new_zeros(self._row_capacity, self._capacity, cache.shape[1], cache.shape[2])
                store[layer_id] = ws
                if self._copy is None:  # nothing to carry: gather every row whole
                    ws[:bsz, :n] = cache.index_select(0, self._index.reshape(-1)).view(bsz, n, *cache.shape[1:])
                    continue
                source, cols, *old = self._copy
                torch.index_select(old[i][layer_id][:, :cols], 0, source, out=ws[:bsz, :cols])
            for row, old_row in self._moves:
                ws[row, : self._cols].copy_(ws[old_row, : self._cols])
            ws[rows, positions] = cache.index_select(0, slots)
        self._layers_done.add(layer_id)
        return self._k[layer_id][:bsz, :n].transpose(1, 2), self._v[layer_id][:bsz, :n].transpose(1, 2)
