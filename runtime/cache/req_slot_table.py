"""ReqSlotTable: for each running request, the KV slot of each of its tokens, in order.

Row ``r`` column ``i`` holds the slot of token ``i`` of the request that owns row ``r``. The
scheduler writes a row as it allocates slots; the model runner reads ``row[:seq_len]`` as the
request's ``kv_indices``.
"""
from __future__ import annotations

import torch


class ReqSlotTable:
    """An int64 table ``[max_running, max_context]`` plus a free list of rows.

    Guarantees: ``alloc_row`` returns a row no one else holds; ``free_row`` of a row that is not
    held raises. Row contents are NOT cleared on free (the next owner overwrites what it uses).
    """

    __slots__ = ("max_running", "max_context", "table", "_free_rows", "_held")

    def __init__(self, max_running: int, max_context: int, device: torch.device | str = "cpu"):
        if max_running < 1 or max_context < 1:
            raise ValueError(
                f"ReqSlotTable: max_running ({max_running}) and max_context ({max_context}) "
                f"must be >= 1"
            )
        self.max_running = max_running
        self.max_context = max_context
        self.table = torch.zeros((max_running, max_context), dtype=torch.int64, device=device)
        self._free_rows: list[int] = list(range(max_running - 1, -1, -1))
        self._held: set[int] = set()

    @property
    def num_free_rows(self) -> int:
        """Rows ``alloc_row`` can still hand out."""
        return len(self._free_rows)

    @property
    def num_used_rows(self) -> int:
        """Rows held by requests."""
        return len(self._held)

    def can_alloc_row(self) -> bool:
        """True when ``alloc_row`` would succeed."""
        return bool(self._free_rows)

    def alloc_row(self) -> int:
        """Take a free row; raises RuntimeError when all ``max_running`` rows are held."""
        if not self._free_rows:
            raise RuntimeError(f"ReqSlotTable.alloc_row: all {self.max_running} rows are held")
        row = self._free_rows.pop()
        self._held.add(row)
        return row

    def free_row(self, row: int) -> None:
        """Give ``row`` back; raises ValueError if it is not held."""
        if row not in self._held:
            raise ValueError(f"ReqSlotTable.free_row: row {row} is not held")
        self._held.remove(row)
        self._free_rows.append(row)

    def write(self, row: int, start: int, slots: torch.Tensor) -> None:
        """``table[row, start:start+len(slots)] = slots``."""
        end = start + slots.numel()
        if end > self.max_context:
            raise ValueError(
                f"ReqSlotTable.write: tokens {start}..{end} exceed max_context {self.max_context}"
            )
        if slots.numel():
            self.table[row, start:end] = slots

    def write_tokens(self, rows: list[int], cols: list[int], slots: torch.Tensor) -> None:
        """``table[rows[i], cols[i]] = slots[i]`` for all i (one token per row, vectorized)."""
        if max(cols, default=0) >= self.max_context:
            raise ValueError(f"ReqSlotTable.write_tokens: a column exceeds max_context {self.max_context}")
        self.table[torch.tensor(rows), torch.tensor(cols)] = slots

    def read(self, row: int, start: int, end: int) -> torch.Tensor:
        """A view of ``table[row, start:end]`` (valid until the row is written again)."""
        return self.table[row, start:end]

    def reset(self) -> None:
        """Release every row (only safe when no request holds one)."""
        self._free_rows = list(range(self.max_running - 1, -1, -1))
        self._held.clear()

    def check_integrity(self) -> None:
        """Raise AssertionError unless held and free rows partition ``range(max_running)``."""
        free = set(self._free_rows)
        assert len(free) == len(self._free_rows), "a row is on the free list twice"
        assert not (free & self._held), "a row is both free and held"
        assert free | self._held == set(range(self.max_running)), "a row is lost"
